// The CPU ModelOps: validate every argument (shared checks, so the CUDA path will reject
// the same calls with the same messages), then run the multithreaded kernel. The kernels
// are fp32; bf16 activations reach them through ActivationStaging (ops/bf16_staging.h),
// which for fp32 hands them the caller's pointers untouched.
#include <cmath>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "cpu/cast_cpu.h"
#include "cpu/parallel.h"
#include "fp8/model_ops.h"
#include "ops/adamw.h"
#include "ops/attention.h"
#include "ops/bf16_staging.h"
#include "ops/cross_entropy.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/kv_cache_attention.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"
#include "ops/rope_table.h"
#include "ops/swiglu.h"
#include "ops/validate.h"

namespace fp8 {
namespace {

using Staging = ops::cpu::ActivationStaging;

int64_t query_elements(const AttentionShape& s) { return s.batch * s.seq * s.n_heads * s.head_dim; }
int64_t kv_elements(const AttentionShape& s) { return s.batch * s.seq * s.n_kv_heads * s.head_dim; }

#define FP8_RETURN_IF_ERROR(expr)           \
  if (absl::Status s_ = (expr); !s_.ok()) { \
    return s_;                              \
  }

// The rows' amaxes of an op's output of n values, from the output as stored, with the
// cast's own amax: the same bits as the cast would compute, by construction.
void write_row_amaxes(const void* stored, DType act, int64_t n, const RowAmaxes& row_amax) {
  if (row_amax.out == nullptr) return;
  const int64_t cols = row_amax.row_length;
  fp8::cpu::amax(MatrixRef{stored, act, n / cols, cols}, Granularity::kRowwise, row_amax.out);
}

class CpuModelOps final : public ModelOps {
 public:
  std::string name() const override { return absl::StrCat("cpu (", cpu::num_threads(), " threads, OpenBLAS)"); }

  absl::Status embedding_forward(const int32_t* tokens, int64_t n, const float* table, int64_t vocab, int64_t dim,
                                 void* out, DType act) override {
    FP8_RETURN_IF_ERROR(ops::validate_embedding_forward(tokens, n, table, vocab, dim, out, act));
    FP8_RETURN_IF_ERROR(ops::check_token_ids("embedding_forward", tokens, n, vocab));
    Staging st(act);
    ops::cpu::embedding_forward(tokens, n, table, dim, st.out(out, n * dim));
    st.finish();
    return absl::OkStatus();
  }

  absl::Status embedding_backward(const int32_t* tokens, int64_t n, const void* grad_out, int64_t vocab, int64_t dim,
                                  float* grad_table, DType act) override {
    FP8_RETURN_IF_ERROR(ops::validate_embedding_backward(tokens, n, grad_out, vocab, dim, grad_table, act));
    FP8_RETURN_IF_ERROR(ops::check_token_ids("embedding_backward", tokens, n, vocab));
    Staging st(act);
    ops::cpu::embedding_backward(tokens, n, st.in(grad_out, n * dim), vocab, dim, grad_table);
    return absl::OkStatus();
  }

  absl::Status rmsnorm_forward(const void* x, const float* weight, int64_t rows, int64_t dim, float eps, void* out,
                               float* inv_rms, DType act, float* row_amax) override {
    FP8_RETURN_IF_ERROR(ops::validate_rmsnorm_forward(x, weight, rows, dim, eps, out, inv_rms, act));
    Staging st(act);
    const int64_t n = rows * dim;
    const float* x32 = st.in(x, n);
    ops::cpu::rmsnorm_forward(x32, weight, rows, dim, eps, st.out(out, n), inv_rms);
    st.finish();
    write_row_amaxes(out, act, n, {row_amax, dim});
    return absl::OkStatus();
  }

  absl::Status rmsnorm_backward(const void* x, const float* weight, const float* inv_rms, const void* grad_out,
                                int64_t rows, int64_t dim, void* grad_x, float* grad_weight, DType act,
                                Store grad_x_store, float* grad_x_row_amax) override {
    FP8_RETURN_IF_ERROR(
        ops::validate_rmsnorm_backward(x, weight, inv_rms, grad_out, rows, dim, grad_x, grad_weight, act));
    Staging st(act);
    const int64_t n = rows * dim;
    const float* x32 = st.in(x, n);
    const float* grad_out32 = st.in(grad_out, n);
    const bool accumulate = grad_x_store == Store::kAccumulate;
    float* grad_x32 = accumulate ? st.in_out(grad_x, n) : st.out(grad_x, n);
    ops::cpu::rmsnorm_backward(x32, weight, inv_rms, grad_out32, rows, dim, grad_x32, grad_weight, accumulate);
    st.finish();
    write_row_amaxes(grad_x, act, n, {grad_x_row_amax, dim});
    return absl::OkStatus();
  }

  absl::Status rope_forward(const RopeShape& shape, double theta, const void* x, void* out, DType act) override {
    FP8_RETURN_IF_ERROR(ops::validate_rope_forward(shape, theta, x, out, act));
    return rope(shape, theta, ops::cpu::RopeDirection::kForward, x, out, act);
  }

  absl::Status rope_backward(const RopeShape& shape, double theta, const void* grad_out, void* grad_x, DType act,
                             float* grad_x_row_amax) override {
    FP8_RETURN_IF_ERROR(ops::validate_rope_backward(shape, theta, grad_out, grad_x, act));
    FP8_RETURN_IF_ERROR(rope(shape, theta, ops::cpu::RopeDirection::kInverse, grad_out, grad_x, act));
    const int64_t row_length = shape.heads * shape.head_dim;
    write_row_amaxes(grad_x, act, shape.batch * shape.seq * row_length, {grad_x_row_amax, row_length});
    return absl::OkStatus();
  }

  absl::Status attention_forward(const AttentionShape& shape, const void* q, const void* k, const void* v, void* out,
                                 float* lse, DType act, float* out_row_amax) override {
    FP8_RETURN_IF_ERROR(ops::validate_attention_forward(shape, q, k, v, out, lse, act));
    Staging st(act);
    const int64_t qn = query_elements(shape), kvn = kv_elements(shape);
    const float* q32 = st.in(q, qn);
    const float* k32 = st.in(k, kvn);
    const float* v32 = st.in(v, kvn);
    ops::cpu::attention_forward(shape, q32, k32, v32, st.out(out, qn), lse);
    st.finish();
    write_row_amaxes(out, act, qn, {out_row_amax, shape.n_heads * shape.head_dim});
    return absl::OkStatus();
  }

  absl::Status kv_cache_attention_forward(const KvCacheAttentionShape& shape, const void* q, const void* k_cache,
                                          const void* v_cache, void* out, DType act) override {
    FP8_RETURN_IF_ERROR(ops::validate_kv_cache_attention_forward(shape, q, k_cache, v_cache, out, act));
    Staging st(act);
    const int64_t qn = shape.batch * shape.seq * shape.n_heads * shape.head_dim;
    const int64_t cache_n = shape.batch * shape.cache_len * shape.n_kv_heads * shape.head_dim;
    const float* q32 = st.in(q, qn);
    const float* k32 = st.in(k_cache, cache_n);
    const float* v32 = st.in(v_cache, cache_n);
    ops::cpu::kv_cache_attention_forward(shape, q32, k32, v32, st.out(out, qn));
    st.finish();
    return absl::OkStatus();
  }

  absl::Status attention_backward(const AttentionShape& shape, const void* q, const void* k, const void* v,
                                  const void* out, const float* lse, const void* grad_out, void* grad_q, void* grad_k,
                                  void* grad_v, DType act) override {
    FP8_RETURN_IF_ERROR(
        ops::validate_attention_backward(shape, q, k, v, out, lse, grad_out, grad_q, grad_k, grad_v, act));
    Staging st(act);
    const int64_t qn = query_elements(shape), kvn = kv_elements(shape);
    const float* q32 = st.in(q, qn);
    const float* k32 = st.in(k, kvn);
    const float* v32 = st.in(v, kvn);
    const float* out32 = st.in(out, qn);
    const float* grad_out32 = st.in(grad_out, qn);
    float* grad_q32 = st.out(grad_q, qn);
    float* grad_k32 = st.out(grad_k, kvn);
    float* grad_v32 = st.out(grad_v, kvn);
    ops::cpu::attention_backward(shape, q32, k32, v32, out32, lse, grad_out32, grad_q32, grad_k32, grad_v32);
    st.finish();
    return absl::OkStatus();
  }

  absl::Status swiglu_forward(const void* gate, const void* up, int64_t n, void* out, DType act,
                              const RowAmaxes& row_amax) override {
    FP8_RETURN_IF_ERROR(ops::validate_swiglu_forward(gate, up, n, out, act, row_amax));
    Staging st(act);
    const float* gate32 = st.in(gate, n);
    const float* up32 = st.in(up, n);
    ops::cpu::swiglu_forward(gate32, up32, n, st.out(out, n));
    st.finish();
    write_row_amaxes(out, act, n, row_amax);
    return absl::OkStatus();
  }

  absl::Status swiglu_backward(const void* gate, const void* up, const void* grad_out, int64_t n, void* grad_gate,
                               void* grad_up, DType act, const RowAmaxes& grad_gate_row_amax,
                               const RowAmaxes& grad_up_row_amax) override {
    FP8_RETURN_IF_ERROR(ops::validate_swiglu_backward(gate, up, grad_out, n, grad_gate, grad_up, act,
                                                      grad_gate_row_amax, grad_up_row_amax));
    Staging st(act);
    const float* gate32 = st.in(gate, n);
    const float* up32 = st.in(up, n);
    const float* grad_out32 = st.in(grad_out, n);
    float* grad_gate32 = st.out(grad_gate, n);
    ops::cpu::swiglu_backward(gate32, up32, grad_out32, n, grad_gate32, st.out(grad_up, n));
    st.finish();
    write_row_amaxes(grad_gate, act, n, grad_gate_row_amax);
    write_row_amaxes(grad_up, act, n, grad_up_row_amax);
    return absl::OkStatus();
  }

  absl::Status add(const void* a, const void* b, int64_t n, void* out, DType act) override {
    FP8_RETURN_IF_ERROR(ops::validate_add(a, b, n, out, act));
    Staging st(act);
    const float* a32 = st.in(a, n);
    const float* b32 = st.in(b, n);
    ops::cpu::add(a32, b32, n, st.out(out, n));
    st.finish();
    return absl::OkStatus();
  }

  absl::Status accumulate(const void* x, int64_t n, void* y, DType act) override {
    FP8_RETURN_IF_ERROR(ops::validate_accumulate(x, n, y, act));
    Staging st(act);
    const float* x32 = st.in(x, n);
    ops::cpu::accumulate(x32, n, st.in_out(y, n));
    st.finish();
    return absl::OkStatus();
  }

  absl::Status cross_entropy_forward(const void* logits, const int32_t* targets, int64_t rows, int64_t vocab,
                                     float* loss, float* lse, DType act, int64_t padded_vocab) override {
    FP8_RETURN_IF_ERROR(
        ops::validate_cross_entropy_forward(logits, targets, rows, vocab, padded_vocab, loss, lse, act));
    FP8_RETURN_IF_ERROR(ops::check_targets("cross_entropy_forward", targets, rows, vocab));
    const int64_t ld = padded_vocab == 0 ? vocab : padded_vocab;
    Staging st(act);
    ops::cpu::cross_entropy_forward(st.in(logits, rows * ld), targets, rows, vocab, ld, loss, lse);
    return absl::OkStatus();
  }

  absl::Status cross_entropy_backward(const void* logits, const int32_t* targets, const float* lse, int64_t rows,
                                      int64_t vocab, float grad_loss, void* grad_logits, DType act,
                                      int64_t padded_vocab) override {
    FP8_RETURN_IF_ERROR(ops::validate_cross_entropy_backward(logits, targets, lse, rows, vocab, padded_vocab,
                                                             grad_loss, grad_logits, act));
    FP8_RETURN_IF_ERROR(ops::check_targets("cross_entropy_backward", targets, rows, vocab));
    const int64_t ld = padded_vocab == 0 ? vocab : padded_vocab;
    Staging st(act);
    const float* logits32 = st.in(logits, rows * ld);
    ops::cpu::cross_entropy_backward(logits32, targets, lse, rows, vocab, ld, grad_loss, st.out(grad_logits, rows * ld));
    st.finish();
    return absl::OkStatus();
  }

  absl::Status adamw_step(const AdamWHyperparams& h, int64_t step, float* param, const float* grad, float* m, float* v,
                          int64_t n, const RowAmaxes& param_row_amax) override {
    FP8_RETURN_IF_ERROR(ops::validate_adamw(h, step, param_row_amax, param, grad, m, v, n));
    ops::AdamWCoefficients c = ops::adamw_coefficients(h, step);
    if (h.grad_scale_in != nullptr) {
      c.grad_scale = *h.grad_scale_in;
      if (std::isnan(c.grad_scale)) return absl::OkStatus();  // a non-finite norm: no update
    }
    ops::cpu::adamw_step(c, param, grad, m, v, n);
    write_row_amaxes(param, DType::kFloat32, n, param_row_amax);
    return absl::OkStatus();
  }

  absl::StatusOr<double> sum_of_squares(const float* x, int64_t n) override {
    FP8_RETURN_IF_ERROR(ops::validate_sum_of_squares(x, n));
    return ops::cpu::sum_of_squares(x, n);
  }

  absl::StatusOr<double> total_sum_of_squares(const std::vector<FloatSpan>& buffers) override {
    for (const FloatSpan& b : buffers) FP8_RETURN_IF_ERROR(ops::validate_sum_of_squares(b.data, b.n));
    double total = 0.0;
    for (const FloatSpan& b : buffers) total += ops::cpu::sum_of_squares(b.data, b.n);
    return total;
  }

  absl::Status queue_grad_norm(const std::vector<FloatSpan>& buffers, double max_norm, double* sum_of_squares,
                               float* clip_scale) override {
    // The CUDA implementation's order of checks: the buffers, then the rest.
    for (const FloatSpan& b : buffers) FP8_RETURN_IF_ERROR(ops::validate_sum_of_squares(b.data, b.n));
    FP8_RETURN_IF_ERROR(ops::validate_grad_norm(max_norm, sum_of_squares, clip_scale));
    absl::StatusOr<double> total = total_sum_of_squares(buffers);
    if (!total.ok()) return total.status();
    *sum_of_squares = *total;
    *clip_scale = ops::clip_scale_from_sum_of_squares(*total, max_norm);
    return absl::OkStatus();
  }

  absl::Status queue_clip_scale(const double* sum_of_squares, double max_norm, float* clip_scale) override {
    FP8_RETURN_IF_ERROR(ops::validate_grad_norm(max_norm, sum_of_squares, clip_scale, "queue_clip_scale"));
    *clip_scale = ops::clip_scale_from_sum_of_squares(*sum_of_squares, max_norm);
    return absl::OkStatus();
  }

 private:
  absl::Status rope(const RopeShape& shape, double theta, ops::cpu::RopeDirection direction, const void* in, void* out,
                    DType act) {
    const auto table = rope_tables_.get(ops::rope_table_rows(shape.start, shape.seq), shape.head_dim, theta);
    Staging st(act);
    const int64_t n = shape.batch * shape.seq * shape.heads * shape.head_dim;
    const float* in32 = st.in(in, n);
    ops::cpu::rope(shape, *table, direction, in32, st.out(out, n));
    st.finish();
    return absl::OkStatus();
  }

  ops::RopeTableCache rope_tables_;
};

#undef FP8_RETURN_IF_ERROR

}  // namespace

ModelOps& cpu_model_ops() {
  static CpuModelOps ops;
  return ops;
}

}  // namespace fp8
