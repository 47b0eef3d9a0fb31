// The number of GPUs this process can use, for `fp8-worker --device cuda:all`.
#pragma once

#include "absl/status/statusor.h"

namespace fp8::worker {

// cudaGetDeviceCount (so CUDA_VISIBLE_DEVICES applies): 0 when the runtime finds no GPU;
// Unavailable, with the runtime's reason, when it cannot tell (no NVIDIA driver, say);
// FailedPrecondition in a build without CUDA, which has no runtime to ask.
absl::StatusOr<int> count_cuda_devices();

}  // namespace fp8::worker
