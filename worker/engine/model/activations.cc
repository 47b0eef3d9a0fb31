#include "worker/engine/model/activations.h"

#include <algorithm>

#include "worker/engine/status_macros.h"

namespace fp8::engine {

absl::StatusOr<Activations> Activations::create(const Device& device, const LlamaConfig& c, int64_t rows,
                                                int64_t seq, bool for_backward,
                                                const std::vector<BlockInputsRead>& inputs_read) {
  const int64_t m = rows * seq, hd = c.head_dim();
  const int64_t q_dim = c.local_heads() * hd, kv_dim = c.local_kv_heads() * hd;
  auto f32 = [&](TensorShape shape) { return Tensor::empty(device, ElementType::kFloat32, std::move(shape)); };
  const ElementType act_type = c.activations == DType::kBFloat16 ? ElementType::kBFloat16 : ElementType::kFloat32;
  auto act = [&](TensorShape shape) { return Tensor::empty(device, act_type, std::move(shape)); };
  auto i32 = [&](TensorShape shape) { return Tensor::empty(device, ElementType::kInt32, std::move(shape)); };

  // Under sequence parallelism the residual stream holds this rank's tokens only.
  const int64_t local = c.sequence_parallel ? m / c.tensor_parallel : m;
  Activations a;
  a.rows = rows;
  a.seq = seq;
  a.local_tokens = local;
  a.for_backward = for_backward;
  FP8_ASSIGN_OR_RETURN(a.tokens, i32({m}));
  FP8_ASSIGN_OR_RETURN(a.targets, i32({m}));
  a.hidden.resize(static_cast<size_t>(c.n_layers + 1));
  for (Tensor& h : a.hidden) {
    FP8_ASSIGN_OR_RETURN(h, act({local, c.dim}));
  }
  // What the GEMMs and the attention wrote, which the backward reads.
  auto keep_gemm_outputs = [&](BlockActivations& b) -> absl::Status {
    FP8_ASSIGN_OR_RETURN(b.q, act({m, q_dim}));
    FP8_ASSIGN_OR_RETURN(b.k, act({m, kv_dim}));
    FP8_ASSIGN_OR_RETURN(b.v, act({m, kv_dim}));
    FP8_ASSIGN_OR_RETURN(b.attn_out, act({m, q_dim}));
    FP8_ASSIGN_OR_RETURN(b.attn_lse, f32({rows, c.local_heads(), seq}));
    FP8_ASSIGN_OR_RETURN(b.mid, act({local, c.dim}));
    FP8_ASSIGN_OR_RETURN(b.gate, act({m, c.local_ffn_dim()}));
    FP8_ASSIGN_OR_RETURN(b.up, act({m, c.local_ffn_dim()}));
    return absl::OkStatus();
  };
  // Every tensor of a block once, for the blocks to share what they do not keep.
  auto make_block = [&]() -> absl::StatusOr<BlockActivations> {
    BlockActivations b;
    FP8_RETURN_IF_ERROR(keep_gemm_outputs(b));
    FP8_ASSIGN_OR_RETURN(b.attn_inv_rms, f32({local}));
    FP8_ASSIGN_OR_RETURN(b.attn_in, act({m, c.dim}));
    FP8_ASSIGN_OR_RETURN(b.ffn_inv_rms, f32({local}));
    FP8_ASSIGN_OR_RETURN(b.ffn_in, act({m, c.dim}));
    FP8_ASSIGN_OR_RETURN(b.swiglu_out, act({m, c.local_ffn_dim()}));
    if (c.sequence_parallel) {
      FP8_ASSIGN_OR_RETURN(b.attn_in_shard, act({local, c.dim}));
      FP8_ASSIGN_OR_RETURN(b.ffn_in_shard, act({local, c.dim}));
    }
    return b;
  };
  const ActivationCheckpointing keep = for_backward ? c.checkpointing : ActivationCheckpointing::kFull;
  a.blocks.resize(static_cast<size_t>(c.n_layers));
  if (keep == ActivationCheckpointing::kNone) {
    // Each block's own tensors, but for the linears' inputs that no backward reads: one
    // buffer of each such input for all blocks.
    BlockActivations dead;
    auto own_or_shared = [&](Tensor& own, Tensor& shared, bool kept, const TensorShape& shape) -> absl::Status {
      if (!kept && shared.defined()) {
        own = shared;
        return absl::OkStatus();
      }
      FP8_ASSIGN_OR_RETURN(own, act(shape));
      if (!kept) shared = own;
      return absl::OkStatus();
    };
    for (size_t i = 0; i < a.blocks.size(); ++i) {
      BlockActivations& b = a.blocks[i];
      FP8_RETURN_IF_ERROR(keep_gemm_outputs(b));
      FP8_ASSIGN_OR_RETURN(b.attn_inv_rms, f32({local}));
      FP8_ASSIGN_OR_RETURN(b.ffn_inv_rms, f32({local}));
      const BlockInputsRead read = i < inputs_read.size() ? inputs_read[i] : BlockInputsRead{};
      FP8_RETURN_IF_ERROR(own_or_shared(b.swiglu_out, dead.swiglu_out, read.swiglu_out, {m, c.local_ffn_dim()}));
      if (!c.sequence_parallel) {
        FP8_RETURN_IF_ERROR(own_or_shared(b.attn_in, dead.attn_in, read.attn_in, {m, c.dim}));
        FP8_RETURN_IF_ERROR(own_or_shared(b.ffn_in, dead.ffn_in, read.ffn_in, {m, c.dim}));
        continue;
      }
      // Under sequence parallelism a block keeps this rank's tokens of an input its
      // backward reads, gathered again then (TransformerBlock::recompute).
      FP8_RETURN_IF_ERROR(own_or_shared(b.attn_in, dead.attn_in, false, {m, c.dim}));
      FP8_RETURN_IF_ERROR(own_or_shared(b.ffn_in, dead.ffn_in, false, {m, c.dim}));
      FP8_RETURN_IF_ERROR(own_or_shared(b.attn_in_shard, dead.attn_in_shard, read.attn_in, {local, c.dim}));
      FP8_RETURN_IF_ERROR(own_or_shared(b.ffn_in_shard, dead.ffn_in_shard, read.ffn_in, {local, c.dim}));
    }
  } else {
    FP8_ASSIGN_OR_RETURN(const BlockActivations shared, make_block());
    std::fill(a.blocks.begin(), a.blocks.end(), shared);
    if (keep == ActivationCheckpointing::kSelective) {
      // Shared: the norms' outputs and statistics and SwiGLU's product (TransformerBlock::recompute).
      for (BlockActivations& b : a.blocks) FP8_RETURN_IF_ERROR(keep_gemm_outputs(b));
    }
  }
  FP8_ASSIGN_OR_RETURN(a.final_inv_rms, f32({local}));
  FP8_ASSIGN_OR_RETURN(a.final_in, act({m, c.dim}));
  FP8_ASSIGN_OR_RETURN(a.logits, f32({m, c.padded_vocab()}));
  FP8_ASSIGN_OR_RETURN(a.loss_lse, f32({m}));
  FP8_ASSIGN_OR_RETURN(a.loss, f32({1}));
  FP8_ASSIGN_OR_RETURN(a.cast_row_amax, f32({m}));
  if (c.sequence_parallel) {
    FP8_ASSIGN_OR_RETURN(a.partial, act({m, c.dim}));
    FP8_ASSIGN_OR_RETURN(a.gather_codes_shard, Tensor::empty(device, ElementType::kE4M3, {local, c.dim}));
    FP8_ASSIGN_OR_RETURN(a.gather_codes, Tensor::empty(device, ElementType::kE4M3, {m, c.dim}));
    FP8_ASSIGN_OR_RETURN(a.gather_scale, f32({3}));
    FP8_ASSIGN_OR_RETURN(a.final_in_shard, act({local, c.dim}));
  }
  if (!for_backward) return a;

  FP8_ASSIGN_OR_RETURN(a.grad_hidden, act({local, c.dim}));
  FP8_ASSIGN_OR_RETURN(a.grad_norm_in, act({m, c.dim}));
  FP8_ASSIGN_OR_RETURN(a.grad_hidden_row_amax, f32({m}));
  if (c.sequence_parallel) {
    FP8_ASSIGN_OR_RETURN(a.grad_gathered, act({m, c.dim}));
    FP8_ASSIGN_OR_RETURN(a.grad_norm_shard, act({local, c.dim}));
  }
  FP8_ASSIGN_OR_RETURN(a.grad_gate_row_amax, f32({m}));
  FP8_ASSIGN_OR_RETURN(a.grad_up_row_amax, f32({m}));
  FP8_ASSIGN_OR_RETURN(a.grad_qk_row_amax, f32({m}));
  FP8_ASSIGN_OR_RETURN(a.grad_attn, act({m, q_dim}));
  FP8_ASSIGN_OR_RETURN(a.grad_q, act({m, q_dim}));
  FP8_ASSIGN_OR_RETURN(a.grad_k, act({m, kv_dim}));
  FP8_ASSIGN_OR_RETURN(a.grad_v, act({m, kv_dim}));
  FP8_ASSIGN_OR_RETURN(a.grad_ffn, act({m, c.local_ffn_dim()}));
  FP8_ASSIGN_OR_RETURN(a.grad_gate, act({m, c.local_ffn_dim()}));
  FP8_ASSIGN_OR_RETURN(a.grad_up, act({m, c.local_ffn_dim()}));
  FP8_ASSIGN_OR_RETURN(a.grad_logits, f32({m, c.padded_vocab()}));
  return a;
}

}  // namespace fp8::engine
