#include "worker/engine/hf/decoder_weights.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace fp8::hf {

absl::StatusOr<DecoderWeights> decoder_weights(const CheckpointModel& model) {
  const engine::LlamaConfig& c = model.config;
  auto tensor = [&](const std::string& name, std::vector<int64_t> shape) -> absl::StatusOr<const NamedTensor*> {
    const NamedTensor* t = model.find(name);
    if (t == nullptr || t->shape != shape) {
      return absl::InvalidArgumentError(
          absl::StrCat("the model has no parameter ", name, " shaped as its config says"));
    }
    return t;
  };
  DecoderWeights w;
  absl::StatusOr<const NamedTensor*> p = tensor("tok_embeddings", {c.vocab_size, c.dim});
  if (!p.ok()) return p.status();
  w.embeddings = *p;
  if (!(p = tensor("norm", {c.dim})).ok()) return p.status();
  w.final_norm = *p;
  if (c.tie_embeddings) {
    w.output = w.embeddings;
  } else {
    if (!(p = tensor("output", {c.vocab_size, c.dim})).ok()) return p.status();
    w.output = *p;
  }
  const int64_t kv_dim = c.n_kv_heads * c.head_dim();
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string b = absl::StrCat("layers.", i, ".");
    DecoderWeights::Block block{};
    const std::pair<const NamedTensor**, std::pair<std::string, std::vector<int64_t>>> wanted[] = {
        {&block.attention_norm, {"attention_norm", {c.dim}}},
        {&block.wq, {"attention.wq", {c.dim, c.dim}}},
        {&block.wk, {"attention.wk", {kv_dim, c.dim}}},
        {&block.wv, {"attention.wv", {kv_dim, c.dim}}},
        {&block.wo, {"attention.wo", {c.dim, c.dim}}},
        {&block.ffn_norm, {"ffn_norm", {c.dim}}},
        {&block.w1, {"feed_forward.w1", {c.ffn_dim, c.dim}}},
        {&block.w2, {"feed_forward.w2", {c.dim, c.ffn_dim}}},
        {&block.w3, {"feed_forward.w3", {c.ffn_dim, c.dim}}},
    };
    for (const auto& [slot, what] : wanted) {
      if (!(p = tensor(b + what.first, what.second)).ok()) return p.status();
      *slot = *p;
    }
    w.blocks.push_back(block);
  }
  return w;
}

}  // namespace fp8::hf
