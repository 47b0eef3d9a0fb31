#include "worker/fp8_worker/cuda_device_memory.h"

#include "absl/strings/str_cat.h"

#if defined(FP8_HAVE_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace fp8::worker {

absl::StatusOr<double> cuda_device_memory_gb(int index) {
#if defined(FP8_HAVE_CUDA)
  cudaDeviceProp properties{};
  const cudaError_t err = cudaGetDeviceProperties(&properties, index);
  if (err != cudaSuccess) {
    return absl::UnavailableError(absl::StrCat("cudaGetDeviceProperties(", index, "): ", cudaGetErrorString(err)));
  }
  return static_cast<double>(properties.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0);
#else
  (void)index;
  return absl::FailedPreconditionError(
      "this fp8-worker was built without CUDA (no nvcc at build time), so it cannot read a GPU's memory");
#endif
}

}  // namespace fp8::worker
