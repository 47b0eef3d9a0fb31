#include "cuda/device_check.h"

#include "absl/strings/str_cat.h"
#include "cuda/cuda_status.h"

namespace fp8::cuda {

absl::StatusOr<cudaDeviceProp> check_cuda_device(int device, cudaError_t (*probe_image)(), const char* kernels) {
  int count = 0;
  if (const cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) {
    cudaGetLastError();  // do not leave the failure as the thread's last error
    return absl::UnavailableError(absl::StrCat(
        "no CUDA GPU available: cudaGetDeviceCount failed with ", cudaGetErrorName(e), " (", cudaGetErrorString(e),
        "); this machine has no NVIDIA GPU, or no working NVIDIA driver"));
  }
  if (count == 0) return absl::UnavailableError("no CUDA GPU available: cudaGetDeviceCount found 0 devices");
  if (device < 0 || device >= count) {
    return absl::UnavailableError(
        absl::StrCat("CUDA device ", device, " does not exist: this machine has ", count, " CUDA device(s)"));
  }
  DeviceGuard guard(device);
  if (!guard.status().ok()) {
    return absl::UnavailableError(absl::StrCat("CUDA device ", device, " unusable: ", guard.status().message()));
  }
  cudaDeviceProp prop{};
  if (auto s = cuda_status(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties"); !s.ok()) return s;
  if (const cudaError_t e = probe_image(); e != cudaSuccess) {
    cudaGetLastError();
    return absl::UnavailableError(absl::StrCat("CUDA device ", device, " (", prop.name, ", sm_", prop.major,
                                               prop.minor, ") cannot run this build's ", kernels, ": ",
                                               cudaGetErrorString(e),
                                               "; rebuild with CMAKE_CUDA_ARCHITECTURES covering this GPU"));
  }
  return prop;
}

}  // namespace fp8::cuda
