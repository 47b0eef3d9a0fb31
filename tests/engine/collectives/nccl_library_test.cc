// NCCL is opened at run time (worker/engine/collectives/nccl/nccl_library.h), so a missing
// or mismatched library would otherwise first show on a GPU. Opening it and resolving
// every function needs no GPU: this runs wherever the CUDA toolkit and NCCL are installed.
#include "worker/engine/collectives/nccl/nccl_library.h"

#include <gtest/gtest.h>

#include <string>

namespace fp8::engine::collectives {
namespace {

TEST(NcclLibrary, OpensOnceAndResolvesEveryFunction) {
  const absl::Status first = nccl::load();
  ASSERT_TRUE(first.ok()) << first;
  EXPECT_TRUE(nccl::load().ok()) << "a second load returns the first outcome";
  const nccl::Api& api = nccl::api();
#define FP8_EXPECT_RESOLVED(name) EXPECT_NE(api.name, nullptr) << #name;
  FP8_NCCL_FUNCTIONS(FP8_EXPECT_RESOLVED)
#undef FP8_EXPECT_RESOLVED
  // A call that needs no device: the library's own text for a result.
  EXPECT_FALSE(std::string(api.ncclGetErrorString(ncclInvalidArgument)).empty());
}

}  // namespace
}  // namespace fp8::engine::collectives
