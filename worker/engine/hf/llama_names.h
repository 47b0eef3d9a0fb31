// The parameters of this project's Llama (worker/engine/model/llama.cc) and their names in
// Hugging Face's LlamaForCausalLM:
//
//   tok_embeddings                 model.embed_tokens.weight
//   layers.{i}.attention_norm      model.layers.{i}.input_layernorm.weight
//   layers.{i}.attention.wq|wk|wv|wo   model.layers.{i}.self_attn.q|k|v|o_proj.weight
//   layers.{i}.ffn_norm            model.layers.{i}.post_attention_layernorm.weight
//   layers.{i}.feed_forward.w1|w3|w2   model.layers.{i}.mlp.gate|up|down_proj.weight
//   norm                           model.norm.weight
//   output                         lm_head.weight
//
// Linear weights are [out_features, in_features] in both. wq and wk also differ in the
// order of each head's rows (rope_permutation.h).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "worker/engine/model/llama_config.h"

namespace fp8::hf {

struct ParameterShape {
  std::string name;            // this project's
  std::vector<int64_t> shape;  // full, unsharded, as Hugging Face holds it
  // Rows of the engine's tensor: more than shape[0] where the vocabulary is padded
  // (LlamaConfig::padded_vocab); the padding rows are zero and no other tool sees them.
  int64_t engine_rows = 0;

  // The engine's shape: `shape` with engine_rows rows.
  std::vector<int64_t> engine_shape() const;
};

// Every parameter LlamaModel builds for `config`, in its order (no "output" when the
// embeddings are tied).
std::vector<ParameterShape> llama_parameter_shapes(const engine::LlamaConfig& config);

// The Hugging Face name of a parameter; empty for a name this model does not have.
std::string hf_tensor_name(std::string_view name);

// Whether a parameter's rows are RoPE-rotated query or key features (wq, wk).
bool is_rope_projection(std::string_view name);

}  // namespace fp8::hf
