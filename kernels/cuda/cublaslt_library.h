// cuBLASLt, opened when the first CUDA backend is made rather than linked into every
// program: libcublasLt is ~540 MB, and loading it at startup slowed each process that
// links the kernels, GPU or not (every CLI start, every test case on a CPU machine).
//
// cublaslt::load() dlopens libcublasLt.so.13 once per process: from the loader's search
// path (LD_LIBRARY_PATH, ldconfig), else from the CUDA toolkit this build was configured
// with. After it succeeds, api() holds the functions gemm_cublaslt.cc calls, with
// cuBLASLt's own signatures (cublasLt.h supplies the types).
#pragma once

#include <cublasLt.h>

#include "absl/status/status.h"

namespace fp8::cuda::cublaslt {

#define FP8_CUBLASLT_FUNCTIONS(X)                                                                         \
  X(cublasLtCreate) X(cublasLtDestroy) X(cublasLtGetStatusName) X(cublasLtGetStatusString)             \
  X(cublasLtMatmul) X(cublasLtMatmulAlgoGetHeuristic) X(cublasLtMatmulDescCreate)                     \
  X(cublasLtMatmulDescDestroy) X(cublasLtMatmulDescSetAttribute) X(cublasLtMatmulPreferenceCreate)    \
  X(cublasLtMatmulPreferenceDestroy) X(cublasLtMatmulPreferenceSetAttribute) X(cublasLtMatrixLayoutCreate) \
  X(cublasLtMatrixLayoutDestroy)

struct Api {
#define FP8_CUBLASLT_MEMBER(name) decltype(&::name) name = nullptr;
  FP8_CUBLASLT_FUNCTIONS(FP8_CUBLASLT_MEMBER)
#undef FP8_CUBLASLT_MEMBER
};

// Opens the library and resolves every function, once (thread-safe); later calls return
// the first outcome. The error names each place tried and the loader's reason.
absl::Status load();

// The functions; only after load() returned OK.
const Api& api();

}  // namespace fp8::cuda::cublaslt
