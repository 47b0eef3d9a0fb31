// A decoder block under sequence parallelism (LlamaConfig::sequence_parallel), Megatron's
// layout: between blocks each tensor-parallel rank holds its own tokens [local, dim] (rank
// r's are tokens [r · local, (r + 1) · local) of the micro-batch), the norms and residual
// adds run on them, and
//   norm → all-gather → column-parallel layers … row-parallel layer → reduce-scatter → + residual
// In the backward the gradients mirror it: grad_hidden is all-gathered for the row-parallel
// layer, and the column-parallel layers' input gradients, each rank's share of the sum, are
// reduce-scattered back to the tokens (the sum and the split in one collective).
#include "worker/engine/model/transformer_block.h"

#include <initializer_list>

#include "worker/engine/status_macros.h"

namespace fp8::engine {

namespace {

float* fp32_of(const Tensor& t) { return t.data<float>(); }
void* act_of(const Tensor& t) { return t.raw(); }

size_t act_bytes(DType t) { return t == DType::kBFloat16 ? 2 : 4; }

// Where a row-parallel layer's input, split along its rows, writes its rows' amaxes (the
// ranks reduce them), as transformer_block.cc does.
float* split_input_row_amax(const LinearUnit& unit, const Tensor& buffer) {
  return unit.layer->info().needs.scaled_over_rows_of(TensorKind::kInput) ? fp32_of(buffer) : nullptr;
}

absl::Status reduce_row_amax(TensorParallelComm& tp, float* row_amax, int64_t rows) {
  return row_amax == nullptr ? absl::OkStatus() : tp.max(row_amax, rows);
}

bool per_tensor_dynamic(const CastConfig& c) {
  return c.is_fp8() && c.granularity == ScaleGranularity::kTensorwise && c.scaling == ScalingMode::kDynamic;
}

// The cast the readers of a gathered tensor share where every one of them casts it to fp8
// per tensor, dynamically, alike, and reads it only so (no high-precision GEMM reads it
// as stored): the gather may then move its codes. Null otherwise.
const CastConfig* input_gather_cast(std::initializer_list<const LinearUnit*> readers) {
  const CastConfig& first = (*readers.begin())->layer->info().config.output.input;
  for (const LinearUnit* u : readers) {
    const Float8LinearInfo& info = u->layer->info();
    if (!u->selection.fp8 || !per_tensor_dynamic(info.config.output.input) || !(info.config.output.input == first) ||
        info.needs.input_in_backward) {
      return nullptr;
    }
  }
  return &first;
}

}  // namespace

// With a cast (input_gather_cast) each rank casts its tokens with the whole tensor's scale
// (from the ranks' largest row amax) and the codes travel, one byte an element; `full` holds their values, decoded, which the readers cast again to the very same
// codes (each is a code times the inverse scale: rescaled it rounds back to itself).
// Otherwise the values travel as they are, as one process's readers read them.
absl::Status TransformerBlock::gather_tokens(Activations& a, const CastConfig* fp8, const Tensor& shard,
                                             const float* shard_row_amax, const Tensor& full, DType t) const {
  const int64_t local = a.local_tokens, dim = shard.shape().at(1), m = a.tokens_count();
  if (fp8 == nullptr) {
    return tp->all_gather(act_of(shard), act_of(full), static_cast<size_t>(local * dim) * act_bytes(t), false);
  }
  if (shard_row_amax == nullptr) return absl::InternalError("gather_tokens: an fp8 gather without row amaxes");
  const CastConfig& cast = *fp8;
  float* amax = fp32_of(a.gather_scale);
  float* scale = amax + 1;
  float* inv_scale = amax + 2;
  FP8_RETURN_IF_ERROR(backend->amax(MatrixRef{shard_row_amax, DType::kFloat32, local, 1}, Granularity::kTensorwise,
                                    amax));
  FP8_RETURN_IF_ERROR(tp->max(amax, 1));
  FP8_RETURN_IF_ERROR(backend->compute_scales(amax, 1, cast.format(), cast.pow2_scale, scale, inv_scale));
  CastArgs c;
  c.input = MatrixRef{act_of(shard), t, local, dim};
  c.format = cast.format();
  c.granularity = Granularity::kTensorwise;
  c.scale = scale;
  c.out = static_cast<uint8_t*>(a.gather_codes_shard.raw());
  FP8_RETURN_IF_ERROR(backend->cast(c));
  FP8_RETURN_IF_ERROR(tp->all_gather(a.gather_codes_shard.raw(), a.gather_codes.raw(),
                                     static_cast<size_t>(local * dim), true));
  DequantizeArgs d;
  d.input = static_cast<const uint8_t*>(a.gather_codes.raw());
  d.format = cast.format();
  d.rows = m;
  d.cols = dim;
  d.granularity = Granularity::kTensorwise;
  d.scale = scale;
  d.out_dtype = t;
  d.out = act_of(full);
  return backend->dequantize(d);
}

absl::Status TransformerBlock::forward_sequence_parallel(ModelOps& ops, const LlamaConfig& c, Activations& a,
                                                         BlockActivations& s, const Tensor& in, Tensor& out,
                                                         bool training) const {
  const int64_t m = a.tokens_count(), local = a.local_tokens, hd = c.head_dim();
  const DType t = c.activations;
  const RopeShape q_rope{a.rows, a.seq, c.local_heads(), hd}, k_rope{a.rows, a.seq, c.local_kv_heads(), hd};
  const AttentionShape attention{a.rows, a.seq, c.local_heads(), c.local_kv_heads(), hd};
  // Attention: the norm on this rank's tokens, every token's normed values gathered.
  FP8_RETURN_IF_ERROR(ops.rmsnorm_forward(act_of(in), fp32_of(attention_norm->value), local, c.dim, c.norm_eps,
                                          act_of(s.attn_in_shard), fp32_of(s.attn_inv_rms), t, fp32_of(a.cast_row_amax)));
  FP8_RETURN_IF_ERROR(gather_tokens(a, input_gather_cast({&wq, &wk, &wv}), s.attn_in_shard, fp32_of(a.cast_row_amax),
                                    s.attn_in, t));
  FP8_RETURN_IF_ERROR(wq.forward(s.attn_in, m, s.q, training));
  FP8_RETURN_IF_ERROR(wk.forward(s.attn_in, m, s.k, training));
  FP8_RETURN_IF_ERROR(wv.forward(s.attn_in, m, s.v, training));
  FP8_RETURN_IF_ERROR(ops.rope_forward(q_rope, c.rope_theta, act_of(s.q), act_of(s.q), t));
  FP8_RETURN_IF_ERROR(ops.rope_forward(k_rope, c.rope_theta, act_of(s.k), act_of(s.k), t));
  float* row_amax = split_input_row_amax(wo, a.cast_row_amax);
  FP8_RETURN_IF_ERROR(ops.attention_forward(attention, act_of(s.q), act_of(s.k), act_of(s.v), act_of(s.attn_out),
                                            fp32_of(s.attn_lse), t, row_amax));
  FP8_RETURN_IF_ERROR(reduce_row_amax(*tp, row_amax, m));
  FP8_RETURN_IF_ERROR(wo.forward(s.attn_out, m, a.partial, training, row_amax));
  // Each rank's tokens of the ranks' summed outputs, then the residual.
  FP8_RETURN_IF_ERROR(tp->reduce_scatter(act_of(a.partial), act_of(s.mid), local * c.dim, t));
  FP8_RETURN_IF_ERROR(ops.add(act_of(s.mid), act_of(in), local * c.dim, act_of(s.mid), t));
  // Feed-forward, the same way.
  FP8_RETURN_IF_ERROR(ops.rmsnorm_forward(act_of(s.mid), fp32_of(ffn_norm->value), local, c.dim, c.norm_eps,
                                          act_of(s.ffn_in_shard), fp32_of(s.ffn_inv_rms), t, fp32_of(a.cast_row_amax)));
  FP8_RETURN_IF_ERROR(
      gather_tokens(a, input_gather_cast({&w1, &w3}), s.ffn_in_shard, fp32_of(a.cast_row_amax), s.ffn_in, t));
  FP8_RETURN_IF_ERROR(w1.forward(s.ffn_in, m, s.gate, training));
  FP8_RETURN_IF_ERROR(w3.forward(s.ffn_in, m, s.up, training));
  row_amax = split_input_row_amax(w2, a.cast_row_amax);
  const int64_t ffn = c.local_ffn_dim();
  FP8_RETURN_IF_ERROR(ops.swiglu_forward(act_of(s.gate), act_of(s.up), m * ffn, act_of(s.swiglu_out), t, {row_amax, ffn}));
  FP8_RETURN_IF_ERROR(reduce_row_amax(*tp, row_amax, m));
  FP8_RETURN_IF_ERROR(w2.forward(s.swiglu_out, m, a.partial, training, row_amax));
  FP8_RETURN_IF_ERROR(tp->reduce_scatter(act_of(a.partial), act_of(out), local * c.dim, t));
  return ops.add(act_of(out), act_of(s.mid), local * c.dim, act_of(out), t);
}

absl::Status TransformerBlock::recompute_sequence_parallel(ModelOps& ops, const LlamaConfig& c, Activations& a,
                                                           BlockActivations& s, const Tensor& in) const {
  const int64_t local = a.local_tokens;
  const DType t = c.activations;
  const bool selective = c.checkpointing == ActivationCheckpointing::kSelective;
  // Only a reader whose backward reads its input needs the gathered values again, and for
  // such readers the forward gathered them in high precision (input_gather_cast): no fp8
  // cast, no row amaxes.
  const BlockInputsRead read = inputs_read_in_backward();
  if (selective) {
    FP8_RETURN_IF_ERROR(ops.rmsnorm_forward(act_of(in), fp32_of(attention_norm->value), local, c.dim, c.norm_eps,
                                            act_of(s.attn_in_shard), fp32_of(s.attn_inv_rms), t));
  }
  if (read.attn_in) {
    FP8_RETURN_IF_ERROR(gather_tokens(a, input_gather_cast({&wq, &wk, &wv}), s.attn_in_shard, nullptr, s.attn_in, t));
  }
  if (selective) {
    FP8_RETURN_IF_ERROR(ops.rmsnorm_forward(act_of(s.mid), fp32_of(ffn_norm->value), local, c.dim, c.norm_eps,
                                            act_of(s.ffn_in_shard), fp32_of(s.ffn_inv_rms), t));
  }
  if (read.ffn_in) {
    FP8_RETURN_IF_ERROR(gather_tokens(a, input_gather_cast({&w1, &w3}), s.ffn_in_shard, nullptr, s.ffn_in, t));
  }
  if (!selective || !read.swiglu_out) return absl::OkStatus();
  return ops.swiglu_forward(act_of(s.gate), act_of(s.up), a.tokens_count() * c.local_ffn_dim(),
                            act_of(s.swiglu_out), t);
}

absl::Status TransformerBlock::backward_sequence_parallel(ModelOps& ops, const LlamaConfig& c, Activations& a,
                                                          const BlockActivations& s, const Tensor& in) const {
  const int64_t m = a.tokens_count(), local = a.local_tokens, hd = c.head_dim();
  const DType t = c.activations;
  const RopeShape q_rope{a.rows, a.seq, c.local_heads(), hd}, k_rope{a.rows, a.seq, c.local_kv_heads(), hd};
  const AttentionShape attention{a.rows, a.seq, c.local_heads(), c.local_kv_heads(), hd};
  const size_t shard_bytes = static_cast<size_t>(local * c.dim) * act_bytes(t);
  constexpr Store kAdd = Store::kAccumulate, kWrite = Store::kOverwrite;
  // The row-parallel layers read every token's gradient: gathered, their casts measure it.
  // (In high precision: as fp8 codes it measured no faster end to end; bench/RESULTS.md.)
  FP8_RETURN_IF_ERROR(tp->all_gather(act_of(a.grad_hidden), act_of(a.grad_gathered), shard_bytes, false));
  FP8_RETURN_IF_ERROR(w2.backward(a.grad_gathered, &a.grad_ffn, kWrite));
  // The column-parallel layers' gradients are split along their rows, as without sequence
  // parallelism (transformer_block.cc): their row amaxes reduced across the ranks.
  auto split_grad_row_amax = [&](const LinearUnit& u, const Tensor& buffer) -> float* {
    return u.layer->info().needs.scaled_over_rows_of(TensorKind::kGradOutput) ? fp32_of(buffer) : nullptr;
  };
  float* gate_row_amax = split_grad_row_amax(w1, a.grad_gate_row_amax);
  float* up_row_amax = split_grad_row_amax(w3, a.grad_up_row_amax);
  const int64_t ffn = c.local_ffn_dim();
  FP8_RETURN_IF_ERROR(ops.swiglu_backward(act_of(s.gate), act_of(s.up), act_of(a.grad_ffn), m * ffn, act_of(a.grad_gate),
                                          act_of(a.grad_up), t, {gate_row_amax, ffn}, {up_row_amax, ffn}));
  FP8_RETURN_IF_ERROR(reduce_row_amax(*tp, gate_row_amax, m));
  FP8_RETURN_IF_ERROR(reduce_row_amax(*tp, up_row_amax, m));
  FP8_RETURN_IF_ERROR(w1.backward(a.grad_gate, &a.grad_norm_in, kWrite, gate_row_amax));
  FP8_RETURN_IF_ERROR(w3.backward(a.grad_up, &a.grad_norm_in, kAdd, up_row_amax));
  FP8_RETURN_IF_ERROR(tp->reduce_scatter(act_of(a.grad_norm_in), act_of(a.grad_norm_shard), local * c.dim, t));
  FP8_RETURN_IF_ERROR(ffn_norm->claim_grad_for_adding());
  FP8_RETURN_IF_ERROR(ops.rmsnorm_backward(act_of(s.mid), fp32_of(ffn_norm->value), fp32_of(s.ffn_inv_rms), act_of(a.grad_norm_shard),
                                           local, c.dim, act_of(a.grad_hidden), fp32_of(ffn_norm->grad), t, kAdd));

  FP8_RETURN_IF_ERROR(tp->all_gather(act_of(a.grad_hidden), act_of(a.grad_gathered), shard_bytes, false));
  FP8_RETURN_IF_ERROR(wo.backward(a.grad_gathered, &a.grad_attn, kWrite));
  FP8_RETURN_IF_ERROR(ops.attention_backward(attention, act_of(s.q), act_of(s.k), act_of(s.v), act_of(s.attn_out),
                                             fp32_of(s.attn_lse), act_of(a.grad_attn), act_of(a.grad_q), act_of(a.grad_k),
                                             act_of(a.grad_v), t));
  float* q_row_amax = split_grad_row_amax(wq, a.grad_qk_row_amax);
  FP8_RETURN_IF_ERROR(ops.rope_backward(q_rope, c.rope_theta, act_of(a.grad_q), act_of(a.grad_q), t, q_row_amax));
  FP8_RETURN_IF_ERROR(reduce_row_amax(*tp, q_row_amax, m));
  FP8_RETURN_IF_ERROR(wq.backward(a.grad_q, &a.grad_norm_in, kWrite, q_row_amax));
  float* k_row_amax = split_grad_row_amax(wk, a.grad_qk_row_amax);
  FP8_RETURN_IF_ERROR(ops.rope_backward(k_rope, c.rope_theta, act_of(a.grad_k), act_of(a.grad_k), t, k_row_amax));
  FP8_RETURN_IF_ERROR(reduce_row_amax(*tp, k_row_amax, m));
  FP8_RETURN_IF_ERROR(wk.backward(a.grad_k, &a.grad_norm_in, kAdd, k_row_amax));
  float* v_row_amax = split_grad_row_amax(wv, a.grad_qk_row_amax);
  if (v_row_amax != nullptr) {
    const MatrixRef grad_v{a.grad_v.raw(), t, m, c.local_kv_heads() * hd};
    FP8_RETURN_IF_ERROR(backend->amax(grad_v, Granularity::kRowwise, v_row_amax));
    FP8_RETURN_IF_ERROR(reduce_row_amax(*tp, v_row_amax, m));
  }
  FP8_RETURN_IF_ERROR(wv.backward(a.grad_v, &a.grad_norm_in, kAdd, v_row_amax));
  FP8_RETURN_IF_ERROR(tp->reduce_scatter(act_of(a.grad_norm_in), act_of(a.grad_norm_shard), local * c.dim, t));
  FP8_RETURN_IF_ERROR(attention_norm->claim_grad_for_adding());
  return ops.rmsnorm_backward(act_of(in), fp32_of(attention_norm->value), fp32_of(s.attn_inv_rms), act_of(a.grad_norm_shard), local,
                              c.dim, act_of(a.grad_hidden), fp32_of(attention_norm->grad), t, kAdd);
}

}  // namespace fp8::engine
