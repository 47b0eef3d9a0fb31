// A model in Hugging Face's Llama layout read back into this project's: config.json
// (LlamaForCausalLM) and model.safetensors, or the shards model.safetensors.index.json
// lists. Tensors are renamed (llama_names.h), widened to fp32 (bf16 exactly), and wq/wk's
// rows reordered from rotate-half to this project's adjacent pairs (rope_permutation.h):
// the model computes what the folder's model computes in Hugging Face's convention.
//
// What this project's Llama cannot compute is refused, naming the file and the key or
// tensor: rope_scaling, biases, an activation other than silu, a head_dim other than
// hidden_size / num_attention_heads, a tensor missing or shaped otherwise, or one the
// model has no place for.
#pragma once

#include <filesystem>

#include "absl/status/statusor.h"
#include "worker/engine/hf/checkpoint_model.h"

namespace fp8::hf {

// step is 0 and world_size 1; step_dir is `dir`. InvalidArgument for every refusal.
absl::StatusOr<CheckpointModel> read_hf_model(const std::filesystem::path& dir);

// The model section a config.json describes (sizes, rope_theta, rms_norm_eps, tying).
absl::StatusOr<v1::ModelSpec> model_spec_from_hf_config(const std::filesystem::path& config_json);

}  // namespace fp8::hf
