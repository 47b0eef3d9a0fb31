// NCCL, opened when the first NCCL process group is made rather than linked: libnccl is
// ~200 MB and only GPU machines have it, so a program that links this backend (fp8-train)
// still starts on a CPU-only host or image that lacks it.
//
// nccl::load() dlopens libnccl.so.2 once per process: from the loader's search path
// (LD_LIBRARY_PATH, ldconfig), else from the CUDA toolkit this build was configured with.
// After it succeeds, api() holds the functions nccl_process_group.cc calls, with NCCL's
// own signatures (nccl.h supplies the types).
#pragma once

#include <nccl.h>

#include "absl/status/status.h"

namespace fp8::engine::collectives::nccl {

#define FP8_NCCL_FUNCTIONS(X)                                                                              \
  X(ncclAllGather) X(ncclAllReduce) X(ncclBroadcast) X(ncclCommAbort) X(ncclCommDestroy)                  \
  X(ncclCommFinalize) X(ncclCommGetAsyncError) X(ncclCommInitRankConfig) X(ncclGetErrorString)            \
  X(ncclGetLastError) X(ncclGetUniqueId) X(ncclGroupEnd) X(ncclGroupStart) X(ncclReduceScatter)

struct Api {
#define FP8_NCCL_MEMBER(name) decltype(&::name) name = nullptr;
  FP8_NCCL_FUNCTIONS(FP8_NCCL_MEMBER)
#undef FP8_NCCL_MEMBER
};

// Opens the library and resolves every function, once (thread-safe); later calls return
// the first outcome. The error names each place tried and the loader's reason.
absl::Status load();

// The functions; only after load() returned OK.
const Api& api();

}  // namespace fp8::engine::collectives::nccl
