// One Llama decoder block:
//   mid = hidden + wo(attention(rope(wq(n)), rope(wk(n)), wv(n)))   n = rmsnorm(hidden)
//   out = mid + w2(silu(w1(n')) * w3(n'))                           n' = rmsnorm(mid)
#pragma once

#include "absl/status/status.h"
#include "fp8/model_ops.h"
#include "worker/engine/model/activations.h"
#include "worker/engine/model/linear_unit.h"
#include "worker/engine/model/llama_config.h"
#include "worker/engine/model/tensor_parallel.h"

namespace fp8::engine {

struct TransformerBlock {
  Parameter* attention_norm = nullptr;
  Parameter* ffn_norm = nullptr;
  LinearUnit wq, wk, wv, wo;  // attention.*
  LinearUnit w1, w2, w3;      // feed_forward.*
  // Under tensor parallelism (not owned; null without): the ranks this block is split
  // across, and the backend for the row amaxes no op writes (tensor_parallel.h).
  TensorParallelComm* tp = nullptr;
  Backend* backend = nullptr;

  // out = block(in), saving what backward() needs in `saved`.
  absl::Status forward(ModelOps& ops, const LlamaConfig& c, Activations& a, BlockActivations& saved, const Tensor& in,
                       Tensor& out, bool training) const;
  // What activation checkpointing drops, made again just before backward() reads it, the
  // same bits as the forward made: kFull runs forward() once more (with `training`, so the
  // fp8 layers keep their casts and delayed scaling records this micro-batch's amaxes
  // then, and only then: the first forward ran without); kSelective runs the norms and
  // SwiGLU's product on the kept GEMM outputs. Nothing for kNone, but under sequence
  // parallelism the gathers of kept shards a backward reads.
  absl::Status recompute(ModelOps& ops, const LlamaConfig& c, Activations& a, BlockActivations& saved,
                         const Tensor& in, Tensor& out) const;
  // The first forward of a training pass keeps what the block's backward would read, unless
  // kFull drops it all (recompute then runs the training forward).
  static bool forward_keeps_casts(const LlamaConfig& c) { return c.checkpointing != ActivationCheckpointing::kFull; }

  // On entry a.grad_hidden holds ∂L/∂out (and a.grad_hidden_row_amax its row amaxes, where
  // w2 takes them); on return ∂L/∂in, its row amaxes written to grad_in_row_amax unless
  // null (for the block below's w2: w2.grad_output_row_amax_in). Parameter gradients
  // accumulate.
  absl::Status backward(ModelOps& ops, const LlamaConfig& c, Activations& a, const BlockActivations& saved,
                        const Tensor& in, float* grad_in_row_amax) const;

  // Sequence parallelism (LlamaConfig::sequence_parallel; transformer_block_sequence.cc):
  // forward() and backward() with `in`, `out` and grad_hidden on this rank's tokens only.
  absl::Status forward_sequence_parallel(ModelOps& ops, const LlamaConfig& c, Activations& a, BlockActivations& s,
                                         const Tensor& in, Tensor& out, bool training) const;
  absl::Status backward_sequence_parallel(ModelOps& ops, const LlamaConfig& c, Activations& a,
                                          const BlockActivations& s, const Tensor& in) const;
  // recompute() under sequence parallelism, for kNone and kSelective: the normed tokens
  // gathered again where a backward reads them, the way the forward gathered them (the same
  // values); for kSelective the norms on this rank's tokens first, and SwiGLU's product.
  absl::Status recompute_sequence_parallel(ModelOps& ops, const LlamaConfig& c, Activations& a, BlockActivations& s,
                                           const Tensor& in) const;
  // This rank's tokens of a tensor all-gathered into `full`: as fp8 codes cast per `fp8`
  // (null: as stored), the amax from the shard's row amaxes.
  absl::Status gather_tokens(Activations& a, const CastConfig* fp8, const Tensor& shard, const float* shard_row_amax,
                             const Tensor& full, DType t) const;

  // Which of the linears' inputs their backward reads (Float8LinearNeeds::input_in_backward).
  BlockInputsRead inputs_read_in_backward() const;

  // The block's seven linears, in forward order.
  std::array<const LinearUnit*, 7> linears() const { return {&wq, &wk, &wv, &wo, &w1, &w3, &w2}; }
};

}  // namespace fp8::engine
