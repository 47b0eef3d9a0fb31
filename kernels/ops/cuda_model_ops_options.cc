// The attention kernels by name (fp8/model_ops.h). Built with or without CUDA, so that a
// bad name is reported the same way on every build.
#include <string>

#include "absl/strings/str_cat.h"
#include "fp8/model_ops.h"

namespace fp8 {

absl::StatusOr<CudaModelOpsOptions::Attention> parse_cuda_attention_kernels(std::string_view name) {
  if (name.empty() || name == "wgmma") return CudaModelOpsOptions::Attention::kTensorCores;
  if (name == "mma") return CudaModelOpsOptions::Attention::kMma;
  if (name == "simt") return CudaModelOpsOptions::Attention::kSimt;
  return absl::InvalidArgumentError(
      absl::StrCat("attention kernels '", std::string(name.substr(0, 32)), "': expected wgmma (the default), mma or simt"));
}

}  // namespace fp8
