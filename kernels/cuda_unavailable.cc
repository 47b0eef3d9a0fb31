// Built instead of the CUDA backend when the toolkit is absent, so that every caller can
// ask for a CUDA backend and get a clear answer.
#include "fp8/fp8.h"

namespace fp8 {

bool cuda_compiled() { return false; }

absl::StatusOr<std::unique_ptr<Backend>> make_cuda_backend(int, void*, const CudaBackendOptions&) {
  return absl::UnavailableError(
      "this build has no CUDA backend (nvcc was not found at configure time; install the CUDA "
      "toolkit and reconfigure, or leave FP8_ENABLE_CUDA on)");
}

absl::StatusOr<std::shared_ptr<void>> make_cuda_stream(int) {
  return absl::UnavailableError("this build has no CUDA backend (nvcc was not found at configure time)");
}

}  // namespace fp8
