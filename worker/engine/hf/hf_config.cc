#include "worker/engine/hf/hf_config.h"

#include "nlohmann/json.hpp"

namespace fp8::hf {

std::string hf_llama_config_json(const v1::ModelSpec& spec, const engine::LlamaConfig& c, SafetensorsDType dtype) {
  nlohmann::ordered_json j;
  j["architectures"] = {"LlamaForCausalLM"};
  j["model_type"] = "llama";
  j["hidden_size"] = c.dim;
  j["intermediate_size"] = c.ffn_dim;
  j["num_hidden_layers"] = c.n_layers;
  j["num_attention_heads"] = c.n_heads;
  j["num_key_value_heads"] = c.n_kv_heads;
  j["head_dim"] = c.head_dim();
  j["hidden_act"] = "silu";
  j["max_position_embeddings"] = c.max_seq_len;
  // The spec's doubles: LlamaConfig holds the epsilon as a float.
  j["rms_norm_eps"] = spec.norm_eps();
  j["rope_theta"] = spec.rope_theta();
  j["rope_scaling"] = nullptr;
  j["attention_bias"] = false;
  j["mlp_bias"] = false;
  j["vocab_size"] = c.vocab_size;
  j["tie_word_embeddings"] = false;
  j["torch_dtype"] = dtype == SafetensorsDType::kBF16 ? "bfloat16" : "float32";
  return j.dump(2) + "\n";
}

}  // namespace fp8::hf
