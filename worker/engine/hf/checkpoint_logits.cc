#include "worker/engine/hf/checkpoint_logits.h"

#include <algorithm>
#include <memory>

#include "absl/strings/str_cat.h"
#include "worker/engine/data/token_batch.h"
#include "worker/engine/model/llama.h"
#include "worker/engine/status_macros.h"
#include "worker/engine/tensor/device.h"

namespace fp8::hf {

absl::Status check_tokens(const engine::LlamaConfig& config, std::span<const int32_t> tokens, const char* what) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n == 0 || n > config.max_seq_len) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", n, " tokens; give between 1 and max_seq_len ", config.max_seq_len));
  }
  for (int32_t t : tokens) {
    if (t < 0 || t >= config.vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": token ", t, " is outside the vocabulary of ", config.vocab_size));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<engine::LlamaModel>> engine_model(const CheckpointModel& m,
                                                                 const engine::Device& device) {
  engine::LlamaConfig config = m.config;
  config.activations = DType::kFloat32;
  v1::Fp8Spec fp8;
  fp8.set_recipe(v1::Fp8Spec::NONE);
  FP8_ASSIGN_OR_RETURN(std::unique_ptr<engine::LlamaModel> model,
                       engine::LlamaModel::create(device, config, fp8, /*seed=*/0));
  for (engine::Parameter& p : model->parameters().all()) {
    const NamedTensor* t = m.find(p.name);
    // The engine's tensor may have more rows (the vocabulary's padding, zero).
    const int64_t rows = p.value.shape().at(0);
    if (t == nullptr || t->shape.size() != p.value.shape().size() || t->shape[0] > rows ||
        !std::equal(t->shape.begin() + 1, t->shape.end(), p.value.shape().begin() + 1)) {
      return absl::InternalError(absl::StrCat("the checkpoint's model has no parameter ", p.name,
                                              " shaped as the engine builds it"));
    }
    std::vector<float> values = t->values;
    values.resize(static_cast<size_t>(p.value.numel()), 0.0f);
    FP8_RETURN_IF_ERROR(p.value.upload<float>(values));
  }
  return model;
}

absl::StatusOr<std::vector<float>> engine_logits(engine::LlamaModel& model, std::span<const int32_t> tokens) {
  FP8_RETURN_IF_ERROR(check_tokens(model.config(), tokens, "logits"));
  engine::data::TokenBatch batch;
  batch.rows = 1;
  batch.seq_len = static_cast<int64_t>(tokens.size());
  batch.inputs.assign(tokens.begin(), tokens.end());
  batch.targets.assign(tokens.begin(), tokens.end());  // read only for the loss
  return model.logits(batch);
}

absl::StatusOr<std::vector<float>> checkpoint_logits(const CheckpointModel& m, std::span<const int32_t> tokens) {
  FP8_RETURN_IF_ERROR(check_tokens(m.config, tokens, "logits"));
  FP8_ASSIGN_OR_RETURN(std::unique_ptr<engine::LlamaModel> model, engine_model(m, engine::Device::cpu()));
  return engine_logits(*model, tokens);
}

}  // namespace fp8::hf
