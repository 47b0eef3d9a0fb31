#include "worker/engine/hf/checkpoint_logits.h"

#include <algorithm>
#include <memory>

#include "absl/strings/str_cat.h"
#include "worker/engine/data/token_batch.h"
#include "worker/engine/model/llama.h"
#include "worker/engine/status_macros.h"
#include "worker/engine/tensor/device.h"

namespace fp8::hf {

absl::StatusOr<std::vector<float>> checkpoint_logits(const CheckpointModel& m, std::span<const int32_t> tokens) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n == 0 || n > m.config.max_seq_len) {
    return absl::InvalidArgumentError(
        absl::StrCat("logits: ", n, " tokens; give between 1 and max_seq_len ", m.config.max_seq_len));
  }
  for (int32_t t : tokens) {
    if (t < 0 || t >= m.config.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("logits: token ", t, " is outside the vocabulary of ",
                                                     m.config.vocab_size));
    }
  }
  engine::LlamaConfig config = m.config;
  config.activations = DType::kFloat32;
  v1::Fp8Spec fp8;
  fp8.set_recipe(v1::Fp8Spec::NONE);
  FP8_ASSIGN_OR_RETURN(std::unique_ptr<engine::LlamaModel> model,
                       engine::LlamaModel::create(engine::Device::cpu(), config, fp8, /*seed=*/0));
  for (engine::Parameter& p : model->parameters().all()) {
    const NamedTensor* t = m.find(p.name);
    // The engine's tensor may have more rows (the vocabulary's padding, zero).
    const int64_t rows = p.value.shape().at(0);
    if (t == nullptr || t->shape.size() != p.value.shape().size() || t->shape[0] > rows ||
        !std::equal(t->shape.begin() + 1, t->shape.end(), p.value.shape().begin() + 1)) {
      return absl::InternalError(absl::StrCat("logits: the checkpoint's model has no parameter ", p.name,
                                              " shaped as the engine builds it"));
    }
    std::vector<float> values = t->values;
    values.resize(static_cast<size_t>(p.value.numel()), 0.0f);
    FP8_RETURN_IF_ERROR(p.value.upload<float>(values));
  }
  engine::data::TokenBatch batch;
  batch.rows = 1;
  batch.seq_len = n;
  batch.inputs.assign(tokens.begin(), tokens.end());
  batch.targets.assign(tokens.begin(), tokens.end());  // read only for the loss
  return model->logits(batch);
}

}  // namespace fp8::hf
