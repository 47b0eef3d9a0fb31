// The CPU ModelOps: validate every argument (shared checks, so the CUDA path will reject
// the same calls with the same messages), then run the multithreaded kernel.
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "cpu/parallel.h"
#include "fp8/model_ops.h"
#include "ops/adamw.h"
#include "ops/attention.h"
#include "ops/cross_entropy.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"
#include "ops/rope_table.h"
#include "ops/swiglu.h"
#include "ops/validate.h"

namespace fp8 {
namespace {

#define FP8_RETURN_IF_ERROR(expr)           \
  if (absl::Status s_ = (expr); !s_.ok()) { \
    return s_;                              \
  }

class CpuModelOps final : public ModelOps {
 public:
  std::string name() const override { return absl::StrCat("cpu (", cpu::num_threads(), " threads, OpenBLAS)"); }

  absl::Status embedding_forward(const int32_t* tokens, int64_t n, const float* table, int64_t vocab, int64_t dim,
                                 float* out) override {
    FP8_RETURN_IF_ERROR(ops::validate_embedding_forward(tokens, n, table, vocab, dim, out));
    FP8_RETURN_IF_ERROR(ops::check_token_ids("embedding_forward", tokens, n, vocab));
    ops::cpu::embedding_forward(tokens, n, table, dim, out);
    return absl::OkStatus();
  }

  absl::Status embedding_backward(const int32_t* tokens, int64_t n, const float* grad_out, int64_t vocab, int64_t dim,
                                  float* grad_table) override {
    FP8_RETURN_IF_ERROR(ops::validate_embedding_backward(tokens, n, grad_out, vocab, dim, grad_table));
    FP8_RETURN_IF_ERROR(ops::check_token_ids("embedding_backward", tokens, n, vocab));
    ops::cpu::embedding_backward(tokens, n, grad_out, vocab, dim, grad_table);
    return absl::OkStatus();
  }

  absl::Status rmsnorm_forward(const float* x, const float* weight, int64_t rows, int64_t dim, float eps, float* out,
                               float* inv_rms) override {
    FP8_RETURN_IF_ERROR(ops::validate_rmsnorm_forward(x, weight, rows, dim, eps, out, inv_rms));
    ops::cpu::rmsnorm_forward(x, weight, rows, dim, eps, out, inv_rms);
    return absl::OkStatus();
  }

  absl::Status rmsnorm_backward(const float* x, const float* weight, const float* inv_rms, const float* grad_out,
                                int64_t rows, int64_t dim, float* grad_x, float* grad_weight) override {
    FP8_RETURN_IF_ERROR(ops::validate_rmsnorm_backward(x, weight, inv_rms, grad_out, rows, dim, grad_x, grad_weight));
    ops::cpu::rmsnorm_backward(x, weight, inv_rms, grad_out, rows, dim, grad_x, grad_weight);
    return absl::OkStatus();
  }

  absl::Status rope_forward(const RopeShape& shape, double theta, const float* x, float* out) override {
    FP8_RETURN_IF_ERROR(ops::validate_rope_forward(shape, theta, x, out));
    const auto table = rope_tables_.get(shape.seq, shape.head_dim, theta);
    ops::cpu::rope(shape, *table, ops::cpu::RopeDirection::kForward, x, out);
    return absl::OkStatus();
  }

  absl::Status rope_backward(const RopeShape& shape, double theta, const float* grad_out, float* grad_x) override {
    FP8_RETURN_IF_ERROR(ops::validate_rope_backward(shape, theta, grad_out, grad_x));
    const auto table = rope_tables_.get(shape.seq, shape.head_dim, theta);
    ops::cpu::rope(shape, *table, ops::cpu::RopeDirection::kInverse, grad_out, grad_x);
    return absl::OkStatus();
  }

  absl::Status attention_forward(const AttentionShape& shape, const float* q, const float* k, const float* v,
                                 float* out, float* lse) override {
    FP8_RETURN_IF_ERROR(ops::validate_attention_forward(shape, q, k, v, out, lse));
    ops::cpu::attention_forward(shape, q, k, v, out, lse);
    return absl::OkStatus();
  }

  absl::Status attention_backward(const AttentionShape& shape, const float* q, const float* k, const float* v,
                                  const float* out, const float* lse, const float* grad_out, float* grad_q,
                                  float* grad_k, float* grad_v) override {
    FP8_RETURN_IF_ERROR(ops::validate_attention_backward(shape, q, k, v, out, lse, grad_out, grad_q, grad_k, grad_v));
    ops::cpu::attention_backward(shape, q, k, v, out, lse, grad_out, grad_q, grad_k, grad_v);
    return absl::OkStatus();
  }

  absl::Status swiglu_forward(const float* gate, const float* up, int64_t n, float* out) override {
    FP8_RETURN_IF_ERROR(ops::validate_swiglu_forward(gate, up, n, out));
    ops::cpu::swiglu_forward(gate, up, n, out);
    return absl::OkStatus();
  }

  absl::Status swiglu_backward(const float* gate, const float* up, const float* grad_out, int64_t n, float* grad_gate,
                               float* grad_up) override {
    FP8_RETURN_IF_ERROR(ops::validate_swiglu_backward(gate, up, grad_out, n, grad_gate, grad_up));
    ops::cpu::swiglu_backward(gate, up, grad_out, n, grad_gate, grad_up);
    return absl::OkStatus();
  }

  absl::Status add(const float* a, const float* b, int64_t n, float* out) override {
    FP8_RETURN_IF_ERROR(ops::validate_add(a, b, n, out));
    ops::cpu::add(a, b, n, out);
    return absl::OkStatus();
  }

  absl::Status accumulate(const float* x, int64_t n, float* y) override {
    FP8_RETURN_IF_ERROR(ops::validate_accumulate(x, n, y));
    ops::cpu::accumulate(x, n, y);
    return absl::OkStatus();
  }

  absl::Status cross_entropy_forward(const float* logits, const int32_t* targets, int64_t rows, int64_t vocab,
                                     float* loss, float* lse) override {
    FP8_RETURN_IF_ERROR(ops::validate_cross_entropy_forward(logits, targets, rows, vocab, loss, lse));
    FP8_RETURN_IF_ERROR(ops::check_targets("cross_entropy_forward", targets, rows, vocab));
    ops::cpu::cross_entropy_forward(logits, targets, rows, vocab, loss, lse);
    return absl::OkStatus();
  }

  absl::Status cross_entropy_backward(const float* logits, const int32_t* targets, const float* lse, int64_t rows,
                                      int64_t vocab, float grad_loss, float* grad_logits) override {
    FP8_RETURN_IF_ERROR(
        ops::validate_cross_entropy_backward(logits, targets, lse, rows, vocab, grad_loss, grad_logits));
    FP8_RETURN_IF_ERROR(ops::check_targets("cross_entropy_backward", targets, rows, vocab));
    ops::cpu::cross_entropy_backward(logits, targets, lse, rows, vocab, grad_loss, grad_logits);
    return absl::OkStatus();
  }

  absl::Status adamw_step(const AdamWHyperparams& h, int64_t step, float* param, const float* grad, float* m, float* v,
                          int64_t n) override {
    FP8_RETURN_IF_ERROR(ops::validate_adamw(h, step, param, grad, m, v, n));
    ops::cpu::adamw_step(ops::adamw_coefficients(h, step), param, grad, m, v, n);
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

  absl::Status scale_inplace(float* x, int64_t n, float factor) override {
    FP8_RETURN_IF_ERROR(ops::validate_scale_inplace(x, n, factor));
    ops::cpu::scale_inplace(x, n, factor);
    return absl::OkStatus();
  }

 private:
  ops::RopeTableCache rope_tables_;
};

#undef FP8_RETURN_IF_ERROR

}  // namespace

ModelOps& cpu_model_ops() {
  static CpuModelOps ops;
  return ops;
}

}  // namespace fp8
