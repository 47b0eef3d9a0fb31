// Built instead of the CUDA model ops when the toolkit is absent, so that every caller can
// ask for them and get a clear answer.
#include "fp8/model_ops.h"

namespace fp8 {

absl::StatusOr<std::unique_ptr<ModelOps>> make_cuda_model_ops(int, void*, const CudaModelOpsOptions&) {
  return absl::UnavailableError(
      "this build has no CUDA model ops (nvcc was not found at configure time; install the CUDA "
      "toolkit and reconfigure, or leave FP8_ENABLE_CUDA on)");
}

}  // namespace fp8
