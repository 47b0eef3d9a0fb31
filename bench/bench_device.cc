#include "bench/bench_device.h"

#include <cstdlib>
#include <string>

#include "absl/status/statusor.h"
#include "bench/bench_util.h"

namespace fp8::bench {

CudaModelOpsOptions cuda_model_ops_options_from_environment() {
  const char* name = std::getenv("FP8_CUDA_ATTENTION");
  absl::StatusOr<CudaModelOpsOptions::Attention> attention =
      parse_cuda_attention_kernels(name != nullptr ? name : "");
  check(attention.status(), "FP8_CUDA_ATTENTION in the environment");
  CudaModelOpsOptions options;
  options.attention = *attention;
  return options;
}

const engine::Device& open_engine_device(bool cuda, std::unique_ptr<engine::Device>& owner) {
  if (!cuda) return engine::Device::cpu();
  absl::StatusOr<std::unique_ptr<engine::Device>> d = engine::Device::cuda(0, cuda_model_ops_options_from_environment());
  if (!d.ok()) die("--device cuda: cannot open CUDA device 0: " + std::string(d.status().message()));
  owner = std::move(*d);
  return *owner;
}

}  // namespace fp8::bench
