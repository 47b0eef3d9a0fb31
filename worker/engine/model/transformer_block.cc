#include "worker/engine/model/transformer_block.h"

#include <initializer_list>

#include "worker/engine/status_macros.h"

namespace fp8::engine {

namespace {

RopeShape rope_shape(const Activations& a, int64_t heads, int64_t head_dim) {
  return RopeShape{a.rows, a.seq, heads, head_dim};
}

AttentionShape attention_shape(const Activations& a, const LlamaConfig& c) {
  return AttentionShape{a.rows, a.seq, c.local_heads(), c.local_kv_heads(), c.head_dim()};
}

// fp32 tensors (parameters, inv_rms, lse) and activations (of the config's type).
float* f(const Tensor& t) { return t.data<float>(); }
void* act(const Tensor& t) { return t.raw(); }

// Where the op feeding these linears writes its output's row amaxes: a.cast_row_amax when
// one of them casts its input dynamically (the cast then skips its amax pass), else nowhere.
float* row_amax_for(Activations& a, std::initializer_list<const LinearUnit*> readers) {
  for (const LinearUnit* u : readers) {
    if (u->reads_input_row_amax()) return f(a.cast_row_amax);
  }
  return nullptr;
}

// Under tensor parallelism a row-parallel layer's input, and a column-parallel layer's
// output gradient, is split along its rows: `buffer` receives the rows' amaxes whenever some
// cast of the tensor scales over rows (the ranks then reduce them), else as `unit` reads
// them (grad_output_row_amax_in).
float* split_row_amax(const TensorParallelComm* tp, const LinearUnit& unit, TensorKind t, const Tensor& buffer) {
  if (tp != nullptr && unit.layer->info().needs.scaled_over_rows_of(t)) return f(buffer);
  const bool reads = t == TensorKind::kInput ? unit.reads_input_row_amax() : unit.reads_grad_output_row_amax();
  return reads ? f(buffer) : nullptr;
}

// Each row's amax over every rank's part of it.
absl::Status reduce_row_amax(TensorParallelComm* tp, float* row_amax, int64_t rows) {
  if (tp == nullptr || row_amax == nullptr) return absl::OkStatus();
  return tp->max(row_amax, rows);
}

// A row-parallel layer's output is each rank's partial sum (one rank adds the residual in
// its GEMM): their sum is the layer's output.
const Tensor* residual_on_one_rank(const TensorParallelComm* tp, const Tensor& residual) {
  return tp == nullptr || tp->rank() == 0 ? &residual : nullptr;
}
absl::Status sum_across_ranks(TensorParallelComm* tp, const Tensor& t, DType dtype) {
  return tp == nullptr ? absl::OkStatus() : tp->sum(t.raw(), dtype, t.numel());
}

}  // namespace

absl::Status TransformerBlock::forward(ModelOps& ops, const LlamaConfig& c, Activations& a, BlockActivations& s,
                                       const Tensor& in, Tensor& out, bool training) const {
  if (c.sequence_parallel) return forward_sequence_parallel(ops, c, a, s, in, out, training);
  const int64_t m = a.tokens_count(), hd = c.head_dim();
  const DType t = c.activations;
  // Attention.
  float* row_amax = row_amax_for(a, {&wq, &wk, &wv});
  FP8_RETURN_IF_ERROR(ops.rmsnorm_forward(act(in), f(attention_norm->value), m, c.dim, c.norm_eps, act(s.attn_in),
                                          f(s.attn_inv_rms), t, row_amax));
  FP8_RETURN_IF_ERROR(wq.forward(s.attn_in, m, s.q, training, row_amax));
  FP8_RETURN_IF_ERROR(wk.forward(s.attn_in, m, s.k, training, row_amax));
  FP8_RETURN_IF_ERROR(wv.forward(s.attn_in, m, s.v, training, row_amax));
  FP8_RETURN_IF_ERROR(ops.rope_forward(rope_shape(a, c.local_heads(), hd), c.rope_theta, act(s.q), act(s.q), t));
  FP8_RETURN_IF_ERROR(
      ops.rope_forward(rope_shape(a, c.local_kv_heads(), hd), c.rope_theta, act(s.k), act(s.k), t));
  row_amax = split_row_amax(tp, wo, TensorKind::kInput, a.cast_row_amax);
  FP8_RETURN_IF_ERROR(ops.attention_forward(attention_shape(a, c), act(s.q), act(s.k), act(s.v), act(s.attn_out),
                                            f(s.attn_lse), t, row_amax));
  FP8_RETURN_IF_ERROR(reduce_row_amax(tp, row_amax, m));
  // The residual adds ride on the output GEMMs (their epilogue's addend): no pass of their own.
  FP8_RETURN_IF_ERROR(wo.forward(s.attn_out, m, s.mid, training, row_amax, residual_on_one_rank(tp, in)));
  FP8_RETURN_IF_ERROR(sum_across_ranks(tp, s.mid, t));
  // Feed-forward.
  row_amax = row_amax_for(a, {&w1, &w3});
  FP8_RETURN_IF_ERROR(ops.rmsnorm_forward(act(s.mid), f(ffn_norm->value), m, c.dim, c.norm_eps, act(s.ffn_in),
                                          f(s.ffn_inv_rms), t, row_amax));
  FP8_RETURN_IF_ERROR(w1.forward(s.ffn_in, m, s.gate, training, row_amax));
  FP8_RETURN_IF_ERROR(w3.forward(s.ffn_in, m, s.up, training, row_amax));
  row_amax = split_row_amax(tp, w2, TensorKind::kInput, a.cast_row_amax);
  const int64_t ffn = c.local_ffn_dim();
  FP8_RETURN_IF_ERROR(ops.swiglu_forward(act(s.gate), act(s.up), m * ffn, act(s.swiglu_out), t, {row_amax, ffn}));
  FP8_RETURN_IF_ERROR(reduce_row_amax(tp, row_amax, m));
  FP8_RETURN_IF_ERROR(w2.forward(s.swiglu_out, m, out, training, row_amax, residual_on_one_rank(tp, s.mid)));
  return sum_across_ranks(tp, out, t);
}

absl::Status TransformerBlock::recompute(ModelOps& ops, const LlamaConfig& c, Activations& a, BlockActivations& s,
                                         const Tensor& in, Tensor& out) const {
  if (c.sequence_parallel && c.checkpointing != ActivationCheckpointing::kFull) {
    return recompute_sequence_parallel(ops, c, a, s, in);
  }
  switch (c.checkpointing) {
    case ActivationCheckpointing::kNone:
      return absl::OkStatus();
    case ActivationCheckpointing::kFull:
      // `out` is written again with the values the block above already read.
      return forward(ops, c, a, s, in, out, /*training=*/true);
    case ActivationCheckpointing::kSelective:
      break;
  }
  // The fp8 layers cast in the forward and kept their copies; they read these tensors
  // only in high precision (and the norms' backward reads the statistics). No row amaxes:
  // nothing is cast from them now.
  const int64_t m = a.tokens_count();
  const DType t = c.activations;
  FP8_RETURN_IF_ERROR(ops.rmsnorm_forward(act(in), f(attention_norm->value), m, c.dim, c.norm_eps, act(s.attn_in),
                                          f(s.attn_inv_rms), t, nullptr));
  FP8_RETURN_IF_ERROR(ops.rmsnorm_forward(act(s.mid), f(ffn_norm->value), m, c.dim, c.norm_eps, act(s.ffn_in),
                                          f(s.ffn_inv_rms), t, nullptr));
  return ops.swiglu_forward(act(s.gate), act(s.up), m * c.local_ffn_dim(), act(s.swiglu_out), t);
}

BlockInputsRead TransformerBlock::inputs_read_in_backward() const {
  auto read = [](std::initializer_list<const LinearUnit*> readers) {
    for (const LinearUnit* u : readers) {
      if (u->layer->info().needs.input_in_backward) return true;
    }
    return false;
  };
  return BlockInputsRead{read({&wq, &wk, &wv}), read({&w1, &w3}), read({&w2})};
}

absl::Status TransformerBlock::backward(ModelOps& ops, const LlamaConfig& c, Activations& a,
                                        const BlockActivations& s, const Tensor& in, float* grad_in_row_amax) const {
  if (c.sequence_parallel) return backward_sequence_parallel(ops, c, a, s, in);
  const int64_t m = a.tokens_count(), hd = c.head_dim();
  const DType t = c.activations;
  // Where branches meet, their gradients sum in the op that makes the last of them
  // (Store::kAccumulate): the linears reading one normed input add their input gradients
  // in the GEMM, and each RMSNorm adds its share into the residual stream's gradient.
  // The ops making a gradient that a linear casts dynamically also write its row amaxes
  // (grad_output_row_amax_in), which that cast reads instead of the gradient itself.
  constexpr Store kAdd = Store::kAccumulate, kWrite = Store::kOverwrite;
  // out = mid + ffn(mid): grad_hidden becomes ∂L/∂mid by adding the branch's share.
  FP8_RETURN_IF_ERROR(
      w2.backward(a.grad_hidden, &a.grad_ffn, kWrite, w2.grad_output_row_amax_in(a.grad_hidden_row_amax)));
  // Under tensor parallelism the column-parallel layers' input gradients are each rank's
  // share of the sum; the ranks add them up before the norm's backward reads them.
  float* gate_row_amax = split_row_amax(tp, w1, TensorKind::kGradOutput, a.grad_gate_row_amax);
  float* up_row_amax = split_row_amax(tp, w3, TensorKind::kGradOutput, a.grad_up_row_amax);
  const int64_t ffn = c.local_ffn_dim();
  FP8_RETURN_IF_ERROR(ops.swiglu_backward(act(s.gate), act(s.up), act(a.grad_ffn), m * ffn, act(a.grad_gate),
                                          act(a.grad_up), t, {gate_row_amax, ffn}, {up_row_amax, ffn}));
  FP8_RETURN_IF_ERROR(reduce_row_amax(tp, gate_row_amax, m));
  FP8_RETURN_IF_ERROR(reduce_row_amax(tp, up_row_amax, m));
  FP8_RETURN_IF_ERROR(w1.backward(a.grad_gate, &a.grad_norm_in, kWrite, gate_row_amax));
  FP8_RETURN_IF_ERROR(w3.backward(a.grad_up, &a.grad_norm_in, kAdd, up_row_amax));
  FP8_RETURN_IF_ERROR(sum_across_ranks(tp, a.grad_norm_in, t));
  float* wo_row_amax = wo.grad_output_row_amax_in(a.grad_hidden_row_amax);
  FP8_RETURN_IF_ERROR(ffn_norm->claim_grad_for_adding());
  FP8_RETURN_IF_ERROR(ops.rmsnorm_backward(act(s.mid), f(ffn_norm->value), f(s.ffn_inv_rms), act(a.grad_norm_in), m,
                                           c.dim, act(a.grad_hidden), f(ffn_norm->grad), t, kAdd, wo_row_amax));

  // mid = in + attention(in): grad_hidden becomes ∂L/∂in the same way.
  FP8_RETURN_IF_ERROR(wo.backward(a.grad_hidden, &a.grad_attn, kWrite, wo_row_amax));
  FP8_RETURN_IF_ERROR(ops.attention_backward(attention_shape(a, c), act(s.q), act(s.k), act(s.v), act(s.attn_out),
                                             f(s.attn_lse), act(a.grad_attn), act(a.grad_q), act(a.grad_k),
                                             act(a.grad_v), t));
  // RoPE's backward makes grad_q and grad_k, each just before the linear that casts it.
  float* q_row_amax = split_row_amax(tp, wq, TensorKind::kGradOutput, a.grad_qk_row_amax);
  FP8_RETURN_IF_ERROR(ops.rope_backward(rope_shape(a, c.local_heads(), hd), c.rope_theta, act(a.grad_q),
                                        act(a.grad_q), t, q_row_amax));
  FP8_RETURN_IF_ERROR(reduce_row_amax(tp, q_row_amax, m));
  FP8_RETURN_IF_ERROR(wq.backward(a.grad_q, &a.grad_norm_in, kWrite, q_row_amax));
  float* k_row_amax = split_row_amax(tp, wk, TensorKind::kGradOutput, a.grad_qk_row_amax);
  FP8_RETURN_IF_ERROR(ops.rope_backward(rope_shape(a, c.local_kv_heads(), hd), c.rope_theta, act(a.grad_k),
                                        act(a.grad_k), t, k_row_amax));
  FP8_RETURN_IF_ERROR(reduce_row_amax(tp, k_row_amax, m));
  FP8_RETURN_IF_ERROR(wk.backward(a.grad_k, &a.grad_norm_in, kAdd, k_row_amax));
  // No op makes grad_v's row amaxes: under tensor parallelism a pass of their own.
  float* v_row_amax = nullptr;
  if (tp != nullptr && wv.layer->info().needs.scaled_over_rows_of(TensorKind::kGradOutput)) {
    v_row_amax = f(a.grad_qk_row_amax);
    const MatrixRef grad_v{a.grad_v.raw(), t, m, c.local_kv_heads() * hd};
    FP8_RETURN_IF_ERROR(backend->amax(grad_v, Granularity::kRowwise, v_row_amax));
    FP8_RETURN_IF_ERROR(reduce_row_amax(tp, v_row_amax, m));
  }
  FP8_RETURN_IF_ERROR(wv.backward(a.grad_v, &a.grad_norm_in, kAdd, v_row_amax));
  FP8_RETURN_IF_ERROR(sum_across_ranks(tp, a.grad_norm_in, t));
  FP8_RETURN_IF_ERROR(attention_norm->claim_grad_for_adding());
  return ops.rmsnorm_backward(act(in), f(attention_norm->value), f(s.attn_inv_rms), act(a.grad_norm_in), m, c.dim,
                              act(a.grad_hidden), f(attention_norm->grad), t, kAdd, grad_in_row_amax);
}

}  // namespace fp8::engine
