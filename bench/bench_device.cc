#include "bench/bench_device.h"

#include <string>

#include "absl/status/statusor.h"
#include "bench/bench_util.h"

namespace fp8::bench {

const engine::Device& open_engine_device(bool cuda, std::unique_ptr<engine::Device>& owner) {
  if (!cuda) return engine::Device::cpu();
  absl::StatusOr<std::unique_ptr<engine::Device>> d = engine::Device::cuda(0);
  if (!d.ok()) die("--device cuda: cannot open CUDA device 0: " + std::string(d.status().message()));
  owner = std::move(*d);
  return *owner;
}

}  // namespace fp8::bench
