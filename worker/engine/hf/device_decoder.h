// Next-token logits from the training engine's own forward (recipe none, fp32
// activations) on any device, a GPU included: each fed token runs the forward over the
// whole context so far and keeps the last position's logits. There is no KV cache, so
// position p costs a forward over p tokens; LlamaDecoder is the CPU's cached path.
//
//   auto device = *engine::Device::cuda(0);
//   DeviceDecoder d = *DeviceDecoder::create(model, *device);
//   for (int32_t t : prompt) logits = *d.feed(t);
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/engine/hf/checkpoint_model.h"
#include "worker/engine/hf/next_token_model.h"
#include "worker/engine/model/llama.h"
#include "worker/engine/tensor/device.h"

namespace fp8::hf {

class DeviceDecoder final : public NextTokenModel {
 public:
  // The model's parameters are copied to `device`, which must outlive the decoder.
  static absl::StatusOr<std::unique_ptr<DeviceDecoder>> create(const CheckpointModel& model,
                                                               const engine::Device& device);

  absl::StatusOr<std::span<const float>> feed(int32_t token) override;
  int64_t position() const override { return static_cast<int64_t>(context_.size()); }
  int64_t max_seq_len() const override { return model_->config().max_seq_len; }
  void reset() override { context_.clear(); }

 private:
  explicit DeviceDecoder(std::unique_ptr<engine::LlamaModel> model) : model_(std::move(model)) {}

  std::unique_ptr<engine::LlamaModel> model_;
  std::vector<int32_t> context_;
  std::vector<float> logits_;  // the last position's
};

}  // namespace fp8::hf
