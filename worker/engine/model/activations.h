// The memory of one pass over a micro-batch of `rows` sequences of `seq` tokens
// (M = rows · seq): what the forward saves for the backward, and the backward's scratch.
// All fp32 [M, ...] row-major unless noted. Sized once per batch shape and reused.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/engine/model/llama_config.h"
#include "worker/engine/tensor/tensor.h"

namespace fp8::engine {

struct BlockActivations {
  Tensor attn_inv_rms;          // [M]
  Tensor attn_in;               // rmsnorm(hidden) [M, dim]
  Tensor q, k, v;               // after RoPE (q, k): [M, n_heads · hd], [M, n_kv_heads · hd]
  Tensor attn_out;              // [M, n_heads · hd]
  Tensor attn_lse;              // [rows, n_heads, seq]
  Tensor mid;                   // hidden + wo(attn_out) [M, dim]
  Tensor ffn_inv_rms;           // [M]
  Tensor ffn_in;                // rmsnorm(mid) [M, dim]
  Tensor gate, up, swiglu_out;  // [M, ffn_dim]
};

struct Activations {
  int64_t rows = 0, seq = 0;
  bool for_backward = false;
  Tensor tokens, targets;       // int32 [M]
  std::vector<Tensor> hidden;   // the residual stream: n_layers + 1 of [M, dim]
  std::vector<BlockActivations> blocks;
  Tensor final_inv_rms, final_in;  // final norm: [M], [M, dim]
  Tensor logits;                   // [M, vocab]
  Tensor loss_lse;                 // [M]
  Tensor loss;                     // [1]
  Tensor branch_out;               // wo or w2 output before the residual add [M, dim]

  // Backward scratch (allocated only for_backward).
  Tensor grad_hidden, grad_norm_in, grad_tmp;  // [M, dim]
  Tensor grad_attn;                            // [M, n_heads · hd]
  Tensor grad_q, grad_k, grad_v;               // like q, k, v
  Tensor grad_ffn, grad_gate, grad_up;         // [M, ffn_dim]
  Tensor grad_logits;                          // [M, vocab]

  int64_t tokens_count() const { return rows * seq; }
  static absl::StatusOr<Activations> create(const Device& device, const LlamaConfig& config, int64_t rows,
                                            int64_t seq, bool for_backward);
};

}  // namespace fp8::engine
