// config.json of Hugging Face's LlamaForCausalLM for a model of this project.
//
// The function matches Hugging Face's Llama: RMSNorm x · rsqrt(mean(x²) + rms_norm_eps) · g,
// SwiGLU down(silu(gate(x)) · up(x)), attention scores scaled by 1 / sqrt(head_dim) with a
// causal mask, query head h reading key/value head h / (heads / kv_heads), RoPE with
// rope_theta over halves once wq and wk are permuted (rope_permutation.h).
#pragma once

#include <string>

#include "fp8/v1/job.pb.h"
#include "worker/engine/hf/safetensors_format.h"
#include "worker/engine/model/llama_config.h"

namespace fp8::hf {

// Pretty-printed JSON. lm_head is always written out, so tie_word_embeddings is false.
std::string hf_llama_config_json(const v1::ModelSpec& spec, const engine::LlamaConfig& config,
                                 SafetensorsDType dtype);

}  // namespace fp8::hf
