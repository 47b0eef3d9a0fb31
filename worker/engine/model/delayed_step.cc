#include "worker/engine/model/delayed_step.h"

#include "common/status_macros.h"

namespace fp8::engine {

absl::Status finish_delayed_step(std::span<LinearUnit* const> linears, const Device& device, Tensor& packed,
                                 const ReducePackedAmaxes& reduce) {
  int64_t total = 0;
  for (const LinearUnit* u : linears) total += u->layer->delayed().count();
  if (total == 0) {
    // Nothing delayed: finish_step() only resets per-step state (no device work).
    for (LinearUnit* u : linears) FP8_RETURN_IF_ERROR(u->layer->finish_step());
    return absl::OkStatus();
  }
  if (!packed.defined() || packed.numel() != total) {
    FP8_ASSIGN_OR_RETURN(packed, Tensor::zeros(device, ElementType::kFloat32, {total}));
  }
  float* data = packed.data<float>();
  int64_t offset = 0;
  for (LinearUnit* u : linears) {
    FP8_RETURN_IF_ERROR(u->layer->delayed().write_step_amaxes(data + offset));
    offset += u->layer->delayed().count();
  }
  if (reduce) FP8_RETURN_IF_ERROR(reduce(data, total));
  offset = 0;
  for (LinearUnit* u : linears) {
    FP8_RETURN_IF_ERROR(u->layer->finish_step(u->layer->delayed().count() > 0 ? data + offset : nullptr));
    offset += u->layer->delayed().count();
  }
  return absl::OkStatus();
}

}  // namespace fp8::engine
