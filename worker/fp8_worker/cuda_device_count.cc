#include "worker/fp8_worker/cuda_device_count.h"

#include "absl/strings/str_cat.h"

#if defined(FP8_HAVE_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace fp8::worker {

absl::StatusOr<int> count_cuda_devices() {
#if defined(FP8_HAVE_CUDA)
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err == cudaErrorNoDevice) return 0;
  if (err != cudaSuccess) {
    // Without a driver the runtime says "CUDA driver version is insufficient", which
    // reads like an upgrade problem: say what it is.
    int driver = 0;
    const bool no_driver = cudaDriverGetVersion(&driver) == cudaSuccess && driver == 0;
    return absl::UnavailableError(absl::StrCat(no_driver ? "no NVIDIA driver on this host (" : "(",
                                               "cudaGetDeviceCount: ", cudaGetErrorString(err), ")"));
  }
  return count;
#else
  return absl::FailedPreconditionError(
      "this fp8-worker was built without CUDA (no nvcc at build time), so it cannot count GPUs");
#endif
}

}  // namespace fp8::worker
