#include "worker/engine/model/transformer_block.h"

#include "worker/engine/status_macros.h"

namespace fp8::engine {

namespace {

RopeShape rope_shape(const Activations& a, int64_t heads, int64_t head_dim) {
  return RopeShape{a.rows, a.seq, heads, head_dim};
}

AttentionShape attention_shape(const Activations& a, const LlamaConfig& c) {
  return AttentionShape{a.rows, a.seq, c.n_heads, c.n_kv_heads, c.head_dim()};
}

float* f(const Tensor& t) { return t.data<float>(); }

}  // namespace

absl::Status TransformerBlock::forward(ModelOps& ops, const LlamaConfig& c, Activations& a, BlockActivations& s,
                                       const Tensor& in, Tensor& out, bool training) const {
  const int64_t m = a.tokens_count(), hd = c.head_dim();
  // Attention.
  FP8_RETURN_IF_ERROR(ops.rmsnorm_forward(f(in), f(attention_norm->value), m, c.dim, c.norm_eps, f(s.attn_in),
                                          f(s.attn_inv_rms)));
  FP8_RETURN_IF_ERROR(wq.forward(s.attn_in, m, s.q, training));
  FP8_RETURN_IF_ERROR(wk.forward(s.attn_in, m, s.k, training));
  FP8_RETURN_IF_ERROR(wv.forward(s.attn_in, m, s.v, training));
  FP8_RETURN_IF_ERROR(ops.rope_forward(rope_shape(a, c.n_heads, hd), c.rope_theta, f(s.q), f(s.q)));
  FP8_RETURN_IF_ERROR(ops.rope_forward(rope_shape(a, c.n_kv_heads, hd), c.rope_theta, f(s.k), f(s.k)));
  FP8_RETURN_IF_ERROR(ops.attention_forward(attention_shape(a, c), f(s.q), f(s.k), f(s.v), f(s.attn_out),
                                            f(s.attn_lse)));
  FP8_RETURN_IF_ERROR(wo.forward(s.attn_out, m, a.branch_out, training));
  FP8_RETURN_IF_ERROR(ops.add(f(in), f(a.branch_out), m * c.dim, f(s.mid)));
  // Feed-forward.
  FP8_RETURN_IF_ERROR(
      ops.rmsnorm_forward(f(s.mid), f(ffn_norm->value), m, c.dim, c.norm_eps, f(s.ffn_in), f(s.ffn_inv_rms)));
  FP8_RETURN_IF_ERROR(w1.forward(s.ffn_in, m, s.gate, training));
  FP8_RETURN_IF_ERROR(w3.forward(s.ffn_in, m, s.up, training));
  FP8_RETURN_IF_ERROR(ops.swiglu_forward(f(s.gate), f(s.up), m * c.ffn_dim, f(s.swiglu_out)));
  FP8_RETURN_IF_ERROR(w2.forward(s.swiglu_out, m, a.branch_out, training));
  return ops.add(f(s.mid), f(a.branch_out), m * c.dim, f(out));
}

absl::Status TransformerBlock::backward(ModelOps& ops, const LlamaConfig& c, Activations& a,
                                        const BlockActivations& s, const Tensor& in) const {
  const int64_t m = a.tokens_count(), hd = c.head_dim();
  // out = mid + ffn(mid): grad_hidden becomes ∂L/∂mid by adding the branch's share.
  FP8_RETURN_IF_ERROR(w2.backward(a.grad_hidden, &a.grad_ffn));
  FP8_RETURN_IF_ERROR(
      ops.swiglu_backward(f(s.gate), f(s.up), f(a.grad_ffn), m * c.ffn_dim, f(a.grad_gate), f(a.grad_up)));
  FP8_RETURN_IF_ERROR(w1.backward(a.grad_gate, &a.grad_norm_in));
  FP8_RETURN_IF_ERROR(w3.backward(a.grad_up, &a.grad_tmp));
  FP8_RETURN_IF_ERROR(ops.accumulate(f(a.grad_tmp), m * c.dim, f(a.grad_norm_in)));
  FP8_RETURN_IF_ERROR(ops.rmsnorm_backward(f(s.mid), f(ffn_norm->value), f(s.ffn_inv_rms), f(a.grad_norm_in), m,
                                           c.dim, f(a.grad_tmp), f(ffn_norm->grad)));
  FP8_RETURN_IF_ERROR(ops.accumulate(f(a.grad_tmp), m * c.dim, f(a.grad_hidden)));

  // mid = in + attention(in): grad_hidden becomes ∂L/∂in the same way.
  FP8_RETURN_IF_ERROR(wo.backward(a.grad_hidden, &a.grad_attn));
  FP8_RETURN_IF_ERROR(ops.attention_backward(attention_shape(a, c), f(s.q), f(s.k), f(s.v), f(s.attn_out),
                                             f(s.attn_lse), f(a.grad_attn), f(a.grad_q), f(a.grad_k), f(a.grad_v)));
  FP8_RETURN_IF_ERROR(ops.rope_backward(rope_shape(a, c.n_heads, hd), c.rope_theta, f(a.grad_q), f(a.grad_q)));
  FP8_RETURN_IF_ERROR(ops.rope_backward(rope_shape(a, c.n_kv_heads, hd), c.rope_theta, f(a.grad_k), f(a.grad_k)));
  FP8_RETURN_IF_ERROR(wq.backward(a.grad_q, &a.grad_norm_in));
  FP8_RETURN_IF_ERROR(wk.backward(a.grad_k, &a.grad_tmp));
  FP8_RETURN_IF_ERROR(ops.accumulate(f(a.grad_tmp), m * c.dim, f(a.grad_norm_in)));
  FP8_RETURN_IF_ERROR(wv.backward(a.grad_v, &a.grad_tmp));
  FP8_RETURN_IF_ERROR(ops.accumulate(f(a.grad_tmp), m * c.dim, f(a.grad_norm_in)));
  FP8_RETURN_IF_ERROR(ops.rmsnorm_backward(f(in), f(attention_norm->value), f(s.attn_inv_rms), f(a.grad_norm_in), m,
                                           c.dim, f(a.grad_tmp), f(attention_norm->grad)));
  return ops.accumulate(f(a.grad_tmp), m * c.dim, f(a.grad_hidden));
}

}  // namespace fp8::engine
