#include "bench/op_breakdown.h"

#include <algorithm>
#include <chrono>
#include <map>

#include "absl/strings/str_cat.h"
#include "bench/bench_util.h"

namespace fp8::bench {

namespace {

class HostOpTimer final : public OpTimer {
 public:
  absl::Status mark() override {
    marks_.push_back(std::chrono::steady_clock::now());
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<double>> take() override {
    std::vector<double> s;
    s.reserve(marks_.size());
    for (const auto& m : marks_) s.push_back(std::chrono::duration<double>(m - marks_.front()).count());
    marks_.clear();
    return s;
  }

 private:
  std::vector<std::chrono::steady_clock::time_point> marks_;
};

const char* quantize_label(const QuantizeArgs& q) {
  if (q.has_columnwise()) return "quantize rowwise + columnwise";
  switch (q.granularity) {
    case Granularity::kTensorwise:
      return "quantize tensorwise";
    case Granularity::kRowwise:
      return "quantize rowwise";
    case Granularity::kColumnwise:
      return "quantize columnwise";
    case Granularity::kBlock1x128:
      return "quantize block1x128";
    case Granularity::kBlock128x128:
      return "quantize block128x128";
  }
  return "quantize";
}

// With OpProfiler::by_shape: "<label> MxKxN <dtype>" for a GEMM (its out dtype; "+C" where
// the epilogue adds a tensor), "<label> RxC <dtype>" for a cast (its input; "T" where it
// also writes the transpose, "known row amaxes" where it skips its amax pass).
std::string gemm_label(const OpProfiler& p, const char* label, int64_t m, int64_t k, int64_t n, DType out,
                       bool adds) {
  if (!p.by_shape()) return label;
  return absl::StrCat(label, " ", m, "x", k, "x", n, " ", dtype_name(out), adds ? " +C" : "");
}

std::string cast_label(const OpProfiler& p, const char* label, const MatrixRef& x, bool transposed,
                       bool known_row_amax) {
  if (!p.by_shape()) return label;
  return absl::StrCat(label, " ", x.rows, "x", x.cols, " ", dtype_name(x.dtype), transposed ? " T" : "",
                      known_row_amax ? " (known row amaxes)" : "");
}

// With OpProfiler::by_shape: "<label> <bytes> B" (a copy of rows: "<rows> x <bytes> B").
std::string copy_label(const OpProfiler& p, const char* label, size_t rows, size_t row_bytes) {
  if (!p.by_shape()) return label;
  return rows == 1 ? absl::StrCat(label, " ", row_bytes, " B") : absl::StrCat(label, " ", rows, " x ", row_bytes, " B");
}

}  // namespace

std::unique_ptr<OpTimer> host_op_timer() { return std::make_unique<HostOpTimer>(); }

void OpProfiler::mark() {
  if (!error_.ok()) return;
  if (absl::Status s = timer_->mark(); !s.ok()) {
    error_ = s;
    on_ = false;
  }
}

absl::StatusOr<OpBreakdown> OpProfiler::take() {
  std::vector<std::string> labels = std::move(labels_);
  std::vector<bool> issued_to_idle = std::move(issued_to_idle_);
  labels_.clear();
  issued_to_idle_.clear();
  absl::StatusOr<std::vector<double>> marks = timer_->take();
  if (!error_.ok()) return error_;
  if (!marks.ok()) return marks.status();
  if (marks->size() != 2 * labels.size()) {
    return absl::InternalError("op breakdown: " + std::to_string(marks->size()) + " marks for " +
                               std::to_string(labels.size()) + " ops");
  }
  OpBreakdown b;
  std::map<std::string, OpTime> by_label;
  for (size_t i = 0; i < labels.size(); ++i) {
    OpTime& t = by_label[labels[i]];
    t.label = labels[i];
    t.seconds += (*marks)[2 * i + 1] - (*marks)[2 * i];
    ++t.calls;
    if (issued_to_idle[i]) ++t.issued_to_idle_device;
    if (i > 0) b.between_s += (*marks)[2 * i] - (*marks)[2 * i - 1];
  }
  if (!labels.empty()) b.span_s = marks->back() - marks->front();
  for (auto& [label, t] : by_label) b.ops.push_back(t);
  std::sort(b.ops.begin(), b.ops.end(), [](const OpTime& x, const OpTime& y) { return x.seconds > y.seconds; });
  return b;
}

// ---- Backend --------------------------------------------------------------------------------

absl::Status ProfilingBackend::synchronize() {
  return p_.run(kHostWaitSynchronize, [&] { return inner_.synchronize(); });
}

absl::Status ProfilingBackend::copy_from_host(void* dst, const void* src, size_t bytes) {
  return p_.run(kHostWaitUpload, [&] { return inner_.copy_from_host(dst, src, bytes); });
}
absl::Status ProfilingBackend::copy_to_host(void* dst, const void* src, size_t bytes) {
  return p_.run(kHostWaitRead, [&] { return inner_.copy_to_host(dst, src, bytes); });
}
absl::Status ProfilingBackend::queue_copy_from_host(void* dst, const void* src, size_t bytes) {
  return p_.run("queued uploads", [&] { return inner_.queue_copy_from_host(dst, src, bytes); });
}
absl::Status ProfilingBackend::copy(void* dst, const void* src, size_t bytes) {
  return p_.run(copy_label(p_, "device copies", 1, bytes), [&] { return inner_.copy(dst, src, bytes); });
}
absl::Status ProfilingBackend::copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
                                         size_t row_bytes, size_t rows) {
  return p_.run(copy_label(p_, "device copies", rows, row_bytes),
                [&] { return inner_.copy_rows(dst, dst_pitch, src, src_pitch, row_bytes, rows); });
}
absl::Status ProfilingBackend::fill_zero(void* dst, size_t bytes) {
  return p_.run("zero fills", [&] { return inner_.fill_zero(dst, bytes); });
}
absl::Status ProfilingBackend::transpose_bytes(const uint8_t* src, int64_t rows, int64_t cols, uint8_t* dst) {
  return p_.run("fp8 transposes", [&] { return inner_.transpose_bytes(src, rows, cols, dst); });
}
absl::Status ProfilingBackend::amax(const MatrixRef& x, Granularity g, float* out) {
  return p_.run("amax", [&] { return inner_.amax(x, g, out); });
}
absl::Status ProfilingBackend::record_delayed_amaxes(const DelayedRecordArgs& args) {
  return p_.run("delayed scaling record", [&] { return inner_.record_delayed_amaxes(args); });
}

absl::Status ProfilingBackend::compute_scales(const float* amax, int64_t n, Format f, bool pow2, float* scale,
                                              float* inv_scale) {
  return p_.run("compute scales", [&] { return inner_.compute_scales(amax, n, f, pow2, scale, inv_scale); });
}
absl::Status ProfilingBackend::cast(const CastArgs& args) {
  return p_.run(cast_label(p_, "cast", args.input, args.out_t != nullptr, false),
                [&] { return inner_.cast(args); });
}
absl::Status ProfilingBackend::count_cast_range(const CastRangeArgs& args) {
  return p_.run("cast range counts", [&] { return inner_.count_cast_range(args); });
}
absl::Status ProfilingBackend::quantize(const QuantizeArgs& args) {
  return p_.run(cast_label(p_, quantize_label(args), args.input, args.out_t != nullptr, args.row_amax != nullptr),
                [&] { return inner_.quantize(args); });
}
absl::Status ProfilingBackend::dequantize(const DequantizeArgs& args) {
  return p_.run("dequantize", [&] { return inner_.dequantize(args); });
}
absl::Status ProfilingBackend::convert(const void* in, DType in_dtype, void* out, DType out_dtype, int64_t n) {
  return p_.run("convert", [&] { return inner_.convert(in, in_dtype, out, out_dtype, n); });
}
absl::Status ProfilingBackend::scaled_gemm(const ScaledGemmArgs& args) {
  const bool adds = args.accumulate || args.addend != nullptr;
  return p_.run(gemm_label(p_, "fp8 GEMM", args.m, args.k, args.n, args.out_dtype, adds),
                [&] { return inner_.scaled_gemm(args); });
}
absl::Status ProfilingBackend::gemm(const GemmArgs& args) {
  const char* label = args.in_dtype == DType::kBFloat16 ? "bf16 GEMM" : "fp32 GEMM";
  const bool adds = args.beta != 0.0f || args.addend != nullptr;
  return p_.run(gemm_label(p_, label, args.m, args.k, args.n, args.out_dtype, adds),
                [&] { return inner_.gemm(args); });
}

// ---- ModelOps -------------------------------------------------------------------------------

absl::Status ProfilingModelOps::embedding_forward(const int32_t* tokens, int64_t n, const float* table, int64_t vocab,
                                                  int64_t dim, void* out, DType act) {
  return p_.run("embedding forward", [&] { return inner_.embedding_forward(tokens, n, table, vocab, dim, out, act); });
}
absl::Status ProfilingModelOps::embedding_backward(const int32_t* tokens, int64_t n, const void* grad_out,
                                                   int64_t vocab, int64_t dim, float* grad_table, DType act) {
  return p_.run("embedding backward",
                [&] { return inner_.embedding_backward(tokens, n, grad_out, vocab, dim, grad_table, act); });
}
absl::Status ProfilingModelOps::rmsnorm_forward(const void* x, const float* weight, int64_t rows, int64_t dim,
                                                float eps, void* out, float* inv_rms, DType act, float* row_amax) {
  return p_.run("RMSNorm forward",
                [&] { return inner_.rmsnorm_forward(x, weight, rows, dim, eps, out, inv_rms, act, row_amax); });
}
absl::Status ProfilingModelOps::rmsnorm_backward(const void* x, const float* weight, const float* inv_rms,
                                                 const void* grad_out, int64_t rows, int64_t dim, void* grad_x,
                                                 float* grad_weight, DType act, Store grad_x_store,
                                                 float* grad_x_row_amax) {
  return p_.run("RMSNorm backward", [&] {
    return inner_.rmsnorm_backward(x, weight, inv_rms, grad_out, rows, dim, grad_x, grad_weight, act, grad_x_store,
                                   grad_x_row_amax);
  });
}
absl::Status ProfilingModelOps::rope_forward(const RopeShape& shape, double theta, const void* x, void* out,
                                             DType act) {
  return p_.run("RoPE forward", [&] { return inner_.rope_forward(shape, theta, x, out, act); });
}
absl::Status ProfilingModelOps::rope_backward(const RopeShape& shape, double theta, const void* grad_out,
                                              void* grad_x, DType act, float* grad_x_row_amax) {
  return p_.run("RoPE backward",
                [&] { return inner_.rope_backward(shape, theta, grad_out, grad_x, act, grad_x_row_amax); });
}
absl::Status ProfilingModelOps::attention_forward(const AttentionShape& shape, const void* q, const void* k,
                                                  const void* v, void* out, float* lse, DType act,
                                                  float* out_row_amax) {
  return p_.run("attention forward",
                [&] { return inner_.attention_forward(shape, q, k, v, out, lse, act, out_row_amax); });
}
absl::Status ProfilingModelOps::attention_backward(const AttentionShape& shape, const void* q, const void* k,
                                                   const void* v, const void* out, const float* lse,
                                                   const void* grad_out, void* grad_q, void* grad_k, void* grad_v,
                                                   DType act) {
  return p_.run("attention backward", [&] {
    return inner_.attention_backward(shape, q, k, v, out, lse, grad_out, grad_q, grad_k, grad_v, act);
  });
}
absl::Status ProfilingModelOps::kv_cache_attention_forward(const KvCacheAttentionShape& shape, const void* q,
                                                           const void* k_cache, const void* v_cache, void* out,
                                                           DType act) {
  return p_.run("attention over a KV cache",
                [&] { return inner_.kv_cache_attention_forward(shape, q, k_cache, v_cache, out, act); });
}
absl::Status ProfilingModelOps::swiglu_forward(const void* gate, const void* up, int64_t n, void* out, DType act,
                                               const RowAmaxes& row_amax) {
  return p_.run("SwiGLU forward", [&] { return inner_.swiglu_forward(gate, up, n, out, act, row_amax); });
}
absl::Status ProfilingModelOps::swiglu_backward(const void* gate, const void* up, const void* grad_out, int64_t n,
                                                void* grad_gate, void* grad_up, DType act,
                                                const RowAmaxes& grad_gate_row_amax,
                                                const RowAmaxes& grad_up_row_amax) {
  return p_.run("SwiGLU backward", [&] {
    return inner_.swiglu_backward(gate, up, grad_out, n, grad_gate, grad_up, act, grad_gate_row_amax,
                                  grad_up_row_amax);
  });
}
absl::Status ProfilingModelOps::add(const void* a, const void* b, int64_t n, void* out, DType act) {
  return p_.run("add", [&] { return inner_.add(a, b, n, out, act); });
}
absl::Status ProfilingModelOps::accumulate(const void* x, int64_t n, void* y, DType act) {
  return p_.run("accumulate", [&] { return inner_.accumulate(x, n, y, act); });
}
absl::Status ProfilingModelOps::cross_entropy_forward(const void* logits, const int32_t* targets, int64_t rows,
                                                      int64_t vocab, float* loss, float* lse, DType act,
                                                      int64_t padded_vocab) {
  return p_.run("cross-entropy forward", [&] {
    return inner_.cross_entropy_forward(logits, targets, rows, vocab, loss, lse, act, padded_vocab);
  });
}
absl::Status ProfilingModelOps::cross_entropy_backward(const void* logits, const int32_t* targets, const float* lse,
                                                       int64_t rows, int64_t vocab, float grad_loss,
                                                       void* grad_logits, DType act, int64_t padded_vocab) {
  return p_.run("cross-entropy backward", [&] {
    return inner_.cross_entropy_backward(logits, targets, lse, rows, vocab, grad_loss, grad_logits, act,
                                         padded_vocab);
  });
}
absl::Status ProfilingModelOps::adamw_step(const AdamWHyperparams& h, int64_t step, float* param, const float* grad,
                                           float* m, float* v, int64_t n, const RowAmaxes& param_row_amax) {
  return p_.run("AdamW", [&] { return inner_.adamw_step(h, step, param, grad, m, v, n, param_row_amax); });
}
absl::StatusOr<double> ProfilingModelOps::sum_of_squares(const float* x, int64_t n) {
  return p_.run(kHostWaitGradNorm, [&] { return inner_.sum_of_squares(x, n); });
}
absl::StatusOr<double> ProfilingModelOps::total_sum_of_squares(const std::vector<FloatSpan>& buffers) {
  return p_.run(kHostWaitGradNorm, [&] { return inner_.total_sum_of_squares(buffers); });
}
absl::Status ProfilingModelOps::queue_clip_scale(const double* sum_of_squares, double max_norm, float* clip_scale) {
  return p_.run("grad norm", [&] { return inner_.queue_clip_scale(sum_of_squares, max_norm, clip_scale); });
}

absl::Status ProfilingModelOps::queue_grad_norm(const std::vector<FloatSpan>& buffers, double max_norm,
                                                double* sum_of_squares, float* clip_scale) {
  return p_.run("grad norm", [&] { return inner_.queue_grad_norm(buffers, max_norm, sum_of_squares, clip_scale); });
}

// ---- the table ------------------------------------------------------------------------------

void print_breakdowns(const std::vector<NamedBreakdown>& runs) {
  // Rows in order of the most time any run spent on them.
  std::map<std::string, double> most;
  for (const NamedBreakdown& r : runs) {
    for (const OpTime& t : r.breakdown.ops) {
      most[t.label] = std::max(most[t.label], t.seconds / std::max(r.steps, 1));
    }
  }
  std::vector<std::string> labels;
  for (const auto& [label, s] : most) labels.push_back(label);
  std::stable_sort(labels.begin(), labels.end(),
                   [&](const std::string& x, const std::string& y) { return most[x] > most[y]; });

  std::vector<std::string> header{"ms per step (share, calls[, issued to an idle GPU])"};
  for (const NamedBreakdown& r : runs) header.push_back(r.name);
  Table table(header);
  // ms per step (share of the span, calls per step)
  auto cell = [](double seconds, int64_t calls, const NamedBreakdown& r, int64_t idle = 0) {
    const double steps = std::max(r.steps, 1);
    const double share = r.breakdown.span_s > 0 ? 100.0 * seconds / r.breakdown.span_s : 0.0;
    std::string s = fmt(1e3 * seconds / steps, 2) + " (" + fmt(share, 1) + "%";
    if (calls > 0) s += ", " + fmt(static_cast<double>(calls) / steps, 0) + "x";
    if (idle > 0) {
      const double per_step = static_cast<double>(idle) / steps;
      s += ", " + fmt(per_step, per_step < 10 ? 1 : 0) + " idle";
    }
    return s + ")";
  };
  for (const std::string& label : labels) {
    std::vector<std::string> row{label};
    for (const NamedBreakdown& r : runs) {
      const auto it = std::find_if(r.breakdown.ops.begin(), r.breakdown.ops.end(),
                                   [&](const OpTime& t) { return t.label == label; });
      row.push_back(it == r.breakdown.ops.end() ? "-" : cell(it->seconds, it->calls, r, it->issued_to_idle_device));
    }
    table.add(row);
  }
  std::vector<std::string> between{"between ops (host waits, launches)"}, span{"step (first op's start to last's end)"};
  for (const NamedBreakdown& r : runs) {
    between.push_back(cell(r.breakdown.between_s, 0, r));
    span.push_back(fmt(1e3 * r.breakdown.span_s / std::max(r.steps, 1), 2));
  }
  table.add(between);
  table.add(span);
  table.print();
}

}  // namespace fp8::bench
