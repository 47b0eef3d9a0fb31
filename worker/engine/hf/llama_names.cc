#include "worker/engine/hf/llama_names.h"

#include <array>
#include <charconv>
#include <utility>

#include "absl/strings/str_cat.h"

namespace fp8::hf {

std::vector<ParameterShape> llama_parameter_shapes(const engine::LlamaConfig& c) {
  const int64_t q_dim = c.n_heads * c.head_dim(), kv_dim = c.n_kv_heads * c.head_dim();
  std::vector<ParameterShape> out;
  out.push_back({"tok_embeddings", {c.vocab_size, c.dim}, c.padded_vocab()});
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string p = absl::StrCat("layers.", i, ".");
    out.push_back({p + "attention_norm", {c.dim}, c.dim});
    out.push_back({p + "attention.wq", {q_dim, c.dim}, q_dim});
    out.push_back({p + "attention.wk", {kv_dim, c.dim}, kv_dim});
    out.push_back({p + "attention.wv", {kv_dim, c.dim}, kv_dim});
    out.push_back({p + "attention.wo", {c.dim, q_dim}, c.dim});
    out.push_back({p + "ffn_norm", {c.dim}, c.dim});
    out.push_back({p + "feed_forward.w1", {c.ffn_dim, c.dim}, c.ffn_dim});
    out.push_back({p + "feed_forward.w2", {c.dim, c.ffn_dim}, c.dim});
    out.push_back({p + "feed_forward.w3", {c.ffn_dim, c.dim}, c.ffn_dim});
  }
  out.push_back({"norm", {c.dim}, c.dim});
  if (!c.tie_embeddings) out.push_back({"output", {c.vocab_size, c.dim}, c.padded_vocab()});
  return out;
}

std::vector<int64_t> ParameterShape::engine_shape() const {
  std::vector<int64_t> s = shape;
  s[0] = engine_rows;
  return s;
}

std::string hf_tensor_name(std::string_view name) {
  if (name == "tok_embeddings") return "model.embed_tokens.weight";
  if (name == "norm") return "model.norm.weight";
  if (name == "output") return "lm_head.weight";
  constexpr std::string_view kLayers = "layers.";
  if (!name.starts_with(kLayers)) return "";
  name.remove_prefix(kLayers.size());
  const size_t dot = name.find('.');
  int64_t layer = 0;
  if (dot == std::string_view::npos || dot == 0) return "";
  const auto [end, ec] = std::from_chars(name.data(), name.data() + dot, layer);
  if (ec != std::errc() || end != name.data() + dot || layer < 0) return "";
  const std::string_view rest = name.substr(dot + 1);
  static constexpr std::array<std::pair<std::string_view, std::string_view>, 9> kBlock = {{
      {"attention_norm", "input_layernorm"},
      {"attention.wq", "self_attn.q_proj"},
      {"attention.wk", "self_attn.k_proj"},
      {"attention.wv", "self_attn.v_proj"},
      {"attention.wo", "self_attn.o_proj"},
      {"ffn_norm", "post_attention_layernorm"},
      {"feed_forward.w1", "mlp.gate_proj"},
      {"feed_forward.w3", "mlp.up_proj"},
      {"feed_forward.w2", "mlp.down_proj"},
  }};
  for (const auto& [ours, theirs] : kBlock) {
    if (rest == ours) return absl::StrCat("model.layers.", layer, ".", std::string(theirs), ".weight");
  }
  return "";
}

bool is_rope_projection(std::string_view name) {
  return name.ends_with(".attention.wq") || name.ends_with(".attention.wk");
}

}  // namespace fp8::hf
