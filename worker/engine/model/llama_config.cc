#include "worker/engine/model/llama_config.h"

#include "absl/strings/str_cat.h"

namespace fp8::engine {

std::string LlamaConfig::describe() const {
  return absl::StrCat("dim ", dim, ", ", n_layers, " layers, ", n_heads, " heads (", n_kv_heads, " kv), ffn ",
                      ffn_dim, ", vocab ", vocab_size,
                      padded_vocab() == vocab_size ? "" : absl::StrCat(" (padded to ", padded_vocab(), ")"),
                      tie_embeddings ? ", tied embeddings" : "",
                      activations == DType::kBFloat16 ? ", bf16 activations" : "",
                      checkpointing == ActivationCheckpointing::kNone
                          ? ""
                          : absl::StrCat(", ", activation_checkpointing_name(checkpointing),
                                         " activation checkpointing"));
}

int64_t LlamaConfig::parameter_count() const {
  const int64_t kv_dim = n_kv_heads * head_dim();
  const int64_t per_block = 2 * dim                          // two norms
                            + dim * dim * 2 + dim * kv_dim * 2  // wq, wo, wk, wv
                            + 3 * dim * ffn_dim;               // w1, w2, w3
  return padded_vocab() * dim * (tie_embeddings ? 1 : 2) + n_layers * per_block + dim;
}

absl::StatusOr<LlamaConfig> llama_config_from_spec(const v1::ModelSpec& m) {
  LlamaConfig c;
  c.vocab_size = m.vocab_size();
  c.dim = m.dim();
  c.n_layers = m.n_layers();
  c.n_heads = m.n_heads();
  c.n_kv_heads = m.n_kv_heads();
  c.ffn_dim = m.ffn_dim();
  c.max_seq_len = m.max_seq_len();
  c.rope_theta = m.rope_theta();
  c.norm_eps = static_cast<float>(m.norm_eps());
  c.tie_embeddings = m.tie_embeddings();
  auto bad = [](const char* field, auto value, const char* why) {
    return absl::InvalidArgumentError(absl::StrCat("model.", field, ": ", value, " ", why));
  };
  if (c.vocab_size <= 0) return bad("vocab_size", c.vocab_size, "must be positive");
  if (c.dim <= 0) return bad("dim", c.dim, "must be positive");
  if (c.n_layers <= 0) return bad("n_layers", c.n_layers, "must be positive");
  if (c.n_heads <= 0 || c.dim % c.n_heads != 0) return bad("n_heads", c.n_heads, "must divide model.dim");
  if (c.head_dim() % 2 != 0) return bad("n_heads", c.n_heads, "must leave an even head_dim for RoPE");
  if (c.n_kv_heads <= 0 || c.n_heads % c.n_kv_heads != 0) {
    return bad("n_kv_heads", c.n_kv_heads, "must divide model.n_heads");
  }
  if (c.ffn_dim <= 0) return bad("ffn_dim", c.ffn_dim, "must be positive");
  if (c.max_seq_len <= 0) return bad("max_seq_len", c.max_seq_len, "must be positive");
  if (!(c.rope_theta > 0)) return bad("rope_theta", c.rope_theta, "must be positive");
  if (!(c.norm_eps > 0)) return bad("norm_eps", c.norm_eps, "must be positive");
  return c;
}

absl::StatusOr<LlamaConfig> llama_config_from_spec(const v1::ModelSpec& model, const v1::TrainSpec& train) {
  absl::StatusOr<LlamaConfig> c = llama_config_from_spec(model);
  if (!c.ok()) return c;
  switch (train.compute_dtype()) {
    case v1::TrainSpec::BF16:
      c->activations = DType::kBFloat16;
      break;
    case v1::TrainSpec::FP32:
    case v1::TrainSpec::COMPUTE_DTYPE_UNSPECIFIED:
      c->activations = DType::kFloat32;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("train.compute_dtype: unknown value ", static_cast<int>(train.compute_dtype())));
  }
  switch (train.activation_checkpointing()) {
    case v1::TrainSpec::FULL:
      c->checkpointing = ActivationCheckpointing::kFull;
      break;
    case v1::TrainSpec::SELECTIVE:
      c->checkpointing = ActivationCheckpointing::kSelective;
      break;
    case v1::TrainSpec::NONE:
    case v1::TrainSpec::ACTIVATION_CHECKPOINTING_UNSPECIFIED:
      c->checkpointing = ActivationCheckpointing::kNone;
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat("train.activation_checkpointing: unknown value ",
                                                     static_cast<int>(train.activation_checkpointing())));
  }
  return c;
}

const char* activation_checkpointing_name(ActivationCheckpointing a) {
  switch (a) {
    case ActivationCheckpointing::kNone:
      return "none";
    case ActivationCheckpointing::kFull:
      return "full";
    case ActivationCheckpointing::kSelective:
      return "selective";
  }
  return "?";
}

}  // namespace fp8::engine
