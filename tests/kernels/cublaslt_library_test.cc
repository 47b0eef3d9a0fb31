// cuBLASLt is opened at run time (kernels/cuda/cublaslt_library.h), so a missing or
// mismatched library would otherwise first show on a GPU. Opening it and resolving every
// function needs no GPU: this runs wherever the CUDA toolkit is installed.
#include <gtest/gtest.h>

#include <cstring>

#include "cuda/cublaslt_library.h"

namespace fp8::cuda {
namespace {

TEST(CublasLtLibrary, OpensOnceAndResolvesEveryFunction) {
  const absl::Status first = cublaslt::load();
  ASSERT_TRUE(first.ok()) << first;
  EXPECT_TRUE(cublaslt::load().ok()) << "a second load returns the first outcome";
  const cublaslt::Api& api = cublaslt::api();
#define FP8_EXPECT_RESOLVED(name) EXPECT_NE(api.name, nullptr) << #name;
  FP8_CUBLASLT_FUNCTIONS(FP8_EXPECT_RESOLVED)
#undef FP8_EXPECT_RESOLVED
  // A call that needs no device: the library's own name for a status.
  EXPECT_STREQ(api.cublasLtGetStatusName(CUBLAS_STATUS_NOT_SUPPORTED), "CUBLAS_STATUS_NOT_SUPPORTED");
}

}  // namespace
}  // namespace fp8::cuda
