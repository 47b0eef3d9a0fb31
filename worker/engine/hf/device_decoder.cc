#include "worker/engine/hf/device_decoder.h"

#include "absl/strings/str_cat.h"
#include "worker/engine/hf/checkpoint_logits.h"
#include "worker/engine/status_macros.h"

namespace fp8::hf {

absl::StatusOr<std::unique_ptr<DeviceDecoder>> DeviceDecoder::create(const CheckpointModel& model,
                                                                     const engine::Device& device) {
  FP8_ASSIGN_OR_RETURN(std::unique_ptr<engine::LlamaModel> engine, engine_model(model, device));
  return std::unique_ptr<DeviceDecoder>(new DeviceDecoder(std::move(engine)));
}

absl::StatusOr<std::span<const float>> DeviceDecoder::feed(int32_t token) {
  const engine::LlamaConfig& c = model_->config();
  if (token < 0 || token >= c.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat("token ", token, " is outside the vocabulary of ", c.vocab_size));
  }
  if (position() >= c.max_seq_len) {
    return absl::InvalidArgumentError(absl::StrCat("the context is full: max_seq_len is ", c.max_seq_len));
  }
  context_.push_back(token);
  absl::StatusOr<std::vector<float>> all = engine_logits(*model_, context_);
  if (!all.ok()) {
    context_.pop_back();
    return all.status();
  }
  logits_.assign(all->end() - c.vocab_size, all->end());
  return std::span<const float>(logits_);
}

}  // namespace fp8::hf
