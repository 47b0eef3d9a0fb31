// The checks every CUDA object of this build runs before it uses a device: that the
// runtime sees a GPU, that `device` is one of them, that it can be made current, and that
// this build's kernel image runs on it (an sm_90 build cannot run on an older GPU).
// Failures are Unavailable and say which, so callers can tell "no GPU here" from a bug.
#pragma once

#include <cuda_runtime_api.h>

#include "absl/status/statusor.h"

namespace fp8::cuda {

// `probe_image` launches nothing and returns cudaSuccess when the image of the kernels in
// question runs on the current device; `kernels` names them in the message ("kernels",
// "model kernels"). Returns the device's properties.
absl::StatusOr<cudaDeviceProp> check_cuda_device(int device, cudaError_t (*probe_image)(), const char* kernels);

}  // namespace fp8::cuda
