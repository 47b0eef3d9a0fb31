// The memory of one pass over a micro-batch of `rows` sequences of `seq` tokens
// (M = rows · seq): what the forward saves for the backward, and the backward's scratch.
// Row-major [M, ...] unless noted; "act" tensors are of the config's activation type (fp32
// or bf16), the rest fp32. Sized once per batch shape and reused. Heads and ffn_dim are
// this rank's share under tensor parallelism (LlamaConfig::local_heads).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/engine/model/llama_config.h"
#include "worker/engine/tensor/tensor.h"

namespace fp8::engine {

// One block's tensors. Those a block does not keep (config.checkpointing, a linear's input
// its backward does not read, or everything in evaluation) are shared by every block: the
// same memory, written by whichever block ran last, and written again for a block just
// before its backward reads them, if it does.
struct BlockActivations {
  Tensor attn_inv_rms;          // [M]
  Tensor attn_in;               // act: rmsnorm(hidden) [M, dim]
  Tensor q, k, v;               // act, after RoPE (q, k): [M, n_heads · hd], [M, n_kv_heads · hd]
  Tensor attn_out;              // act [M, n_heads · hd]
  Tensor attn_lse;              // [rows, n_heads, seq]
  Tensor mid;                   // act: hidden + wo(attn_out), the residual added in wo's GEMM [M, dim]
  Tensor ffn_inv_rms;           // [M]
  Tensor ffn_in;                // act: rmsnorm(mid) [M, dim]
  Tensor gate, up, swiglu_out;  // act [M, ffn_dim]
  // Sequence parallelism: the norms' outputs on this rank's tokens, [local tokens, dim],
  // before the all-gather makes attn_in and ffn_in; mid and the inv_rms hold this rank's
  // tokens only. Empty otherwise. Without checkpointing a block keeps these shards, not
  // the gathered attn_in and ffn_in, where its backward reads them: they are gathered
  // again then (TransformerBlock::recompute).
  Tensor attn_in_shard, ffn_in_shard;
};

// Which of a block's linears read their high-precision input in the backward
// (Float8LinearNeeds::input_in_backward): wq/wk/wv attn_in, w1/w3 ffn_in, w2 swiglu_out.
// Without checkpointing a block keeps only those; the blocks share one buffer for the rest.
struct BlockInputsRead {
  bool attn_in = true, ffn_in = true, swiglu_out = true;
};

struct Activations {
  int64_t rows = 0, seq = 0;
  // Tokens this rank holds between blocks: M, or under sequence parallelism M / ranks,
  // rank r's being tokens [r · local, (r + 1) · local). The residual stream (hidden, mid),
  // the norms' statistics and grad_hidden are [local tokens, ...].
  int64_t local_tokens = 0;
  bool for_backward = false;
  Tensor tokens, targets;       // int32 [M]
  std::vector<Tensor> hidden;   // act, the residual stream: n_layers + 1 of [M, dim]
  std::vector<BlockActivations> blocks;  // n_layers, sharing memory as described above
  Tensor final_inv_rms, final_in;  // final norm: [M], act [M, dim]
  Tensor logits;                   // fp32 [M, padded vocab]
  Tensor loss_lse;                 // [M]
  Tensor loss;                     // [1]
  // The row amaxes [M] of the activation the next linears cast to fp8, written by the op
  // that made it (an RMSNorm, the SwiGLU) and read by those casts right after
  // (Float8Linear::forward's input_row_amax) instead of the activation itself.
  Tensor cast_row_amax;
  // Sequence parallelism: the row-parallel layers' partial outputs [M, dim] before their
  // reduce-scatter; the fp8 all-gather's codes, this rank's [local, dim] and everyone's
  // [M, dim]; its amax, scale and inverse (fp32 [3]); the final norm's output on this
  // rank's tokens [local, dim] before the all-gather makes final_in.
  Tensor partial, gather_codes_shard, gather_codes, gather_scale, final_in_shard;

  // Backward scratch (allocated only for_backward).
  Tensor grad_hidden, grad_norm_in;            // act [M, dim]
  // The row amaxes [M] of a gradient that a linear casts to fp8 as its grad_output, written
  // with the gradient by the op that makes it (an RMSNorm's backward for grad_hidden, the
  // SwiGLU's for grad_gate and grad_up) when that linear takes them
  // (LinearUnit::grad_output_row_amax_in).
  Tensor grad_hidden_row_amax, grad_gate_row_amax, grad_up_row_amax;
  // The same for grad_q and then grad_k, from RoPE's backward, for wq and then wk.
  Tensor grad_qk_row_amax;
  Tensor grad_attn;                            // act [M, n_heads · hd]
  Tensor grad_q, grad_k, grad_v;               // act, like q, k, v
  Tensor grad_ffn, grad_gate, grad_up;         // act [M, ffn_dim]
  Tensor grad_logits;                          // fp32 [M, padded vocab]
  // Sequence parallelism: grad_hidden all-gathered for the row-parallel layers [M, dim], and
  // the norms' input gradients reduce-scattered to this rank's tokens [local, dim].
  Tensor grad_gathered, grad_norm_shard;

  int64_t tokens_count() const { return rows * seq; }
  // `inputs_read`: per block (empty: every input read).
  static absl::StatusOr<Activations> create(const Device& device, const LlamaConfig& config, int64_t rows,
                                            int64_t seq, bool for_backward,
                                            const std::vector<BlockInputsRead>& inputs_read = {});
};

}  // namespace fp8::engine
