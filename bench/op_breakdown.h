// Where a training step's device time goes, op by op. ProfilingBackend and
// ProfilingModelOps pass every call through to a device's own Backend and ModelOps; while
// their OpProfiler is on, each call that queues device work is bracketed by two marks in
// the device's queue (OpTimer). From the marks come each op's time, summed by label
// ("fp8 GEMM", "attention backward", "quantize tensorwise", ...), and the time between
// ops, when the device ran none of them: the host's waits and launches.
//
// A trainer built on a Device made of the two (engine::Device's constructor) trains as on
// the device itself; bench_train --breakdown profiles a few steps after its timed ones
// (a mark is a CUDA event record on a GPU: cheap, not free). Calls come from one thread,
// the trainer's.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bench/op_timer.h"
#include "fp8/fp8.h"
#include "fp8/model_ops.h"

namespace fp8::bench {

// The labels of the calls at which a GPU's host waits for the device: a step that makes
// none of them runs ahead of the device (README: none inside a one-process step).
inline constexpr char kHostWaitPrefix[] = "host waits: ";
inline constexpr char kHostWaitRead[] = "host waits: reads";
inline constexpr char kHostWaitUpload[] = "host waits: uploads";
inline constexpr char kHostWaitSynchronize[] = "host waits: synchronize";
inline constexpr char kHostWaitGradNorm[] = "host waits: grad norm read";

struct OpTime {
  std::string label;
  double seconds = 0;
  int64_t calls = 0;
  // Calls issued when the device had finished all work queued before (OpTimer::
  // passed_last_mark): it then waited for the host, a wait counted in the op's time.
  int64_t issued_to_idle_device = 0;
};

struct OpBreakdown {
  std::vector<OpTime> ops;  // one per label, most time first
  double between_s = 0;     // from each op's end to the next one's start, summed
  double span_s = 0;        // from the first op's start to the last one's end
};

class OpProfiler {
 public:
  explicit OpProfiler(std::unique_ptr<OpTimer> timer) : timer_(std::move(timer)) {}

  // Marks ops from now on (or stops marking them).
  void set_on(bool on) { on_ = on && error_.ok(); }
  bool on() const { return on_; }

  // Whether GEMMs, casts and device copies are labelled with their shapes too ("fp8 GEMM
  // 8192x2048x256", "device copies 4 B"), one row per shape: which of a step's many GEMMs
  // and casts fall short of the device, and which copies a step makes.
  void set_by_shape(bool by_shape) { by_shape_ = by_shape; }
  bool by_shape() const { return by_shape_; }

  // Runs op() (a call returning absl::Status or StatusOr), bracketed by marks while on.
  template <class Op>
  auto run(std::string label, Op&& op) -> decltype(op()) {
    if (!on_) return op();
    issued_to_idle_.push_back(timer_->passed_last_mark());
    mark();
    auto result = op();
    mark();
    labels_.push_back(std::move(label));
    return result;
  }

  // The ops marked since the last take(), once the device has passed them; the first
  // error a mark met instead (marking stopped then).
  absl::StatusOr<OpBreakdown> take();

 private:
  void mark();

  std::unique_ptr<OpTimer> timer_;
  bool on_ = false;
  bool by_shape_ = false;
  absl::Status error_;
  std::vector<std::string> labels_;  // op i: marks 2i and 2i + 1
  std::vector<bool> issued_to_idle_;  // op i: OpTime::issued_to_idle_device
};

class ProfilingBackend final : public Backend {
 public:
  ProfilingBackend(Backend& inner, OpProfiler& profiler) : inner_(inner), p_(profiler) {}

  std::string name() const override { return inner_.name(); }
  bool is_cuda() const override { return inner_.is_cuda(); }
  absl::StatusOr<void*> allocate(size_t bytes) override { return inner_.allocate(bytes); }
  void deallocate(void* p) override { inner_.deallocate(p); }
  MemoryStats memory_stats() const override { return inner_.memory_stats(); }
  void reset_peak_memory() override { inner_.reset_peak_memory(); }
  absl::Status copy_from_host(void* dst, const void* src, size_t bytes) override;
  absl::Status copy_to_host(void* dst, const void* src, size_t bytes) override;
  absl::Status queue_copy_from_host(void* dst, const void* src, size_t bytes) override;
  absl::Status copy(void* dst, const void* src, size_t bytes) override;
  absl::Status copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
                         size_t rows) override;
  absl::Status fill_zero(void* dst, size_t bytes) override;
  absl::Status transpose_bytes(const uint8_t* src, int64_t rows, int64_t cols, uint8_t* dst) override;
  absl::Status synchronize() override;
  absl::StatusOr<std::unique_ptr<Fence>> fence() override { return inner_.fence(); }
  // Queued like a kernel: the wait comes later, on the read (a trainer's is a step behind).
  absl::StatusOr<std::unique_ptr<QueuedRead>> queue_read(const void* src, size_t bytes) override {
    return p_.run("queued reads", [&] { return inner_.queue_read(src, bytes); });
  }
  absl::Status amax(const MatrixRef& x, Granularity g, float* out) override;
  absl::Status compute_scales(const float* amax, int64_t n, Format f, bool pow2, float* scale,
                              float* inv_scale) override;
  absl::Status cast(const CastArgs& args) override;
  absl::Status record_delayed_amaxes(const DelayedRecordArgs& args) override;
  absl::Status count_cast_range(const CastRangeArgs& args) override;
  absl::Status quantize(const QuantizeArgs& args) override;
  absl::Status dequantize(const DequantizeArgs& args) override;
  absl::Status convert(const void* in, DType in_dtype, void* out, DType out_dtype, int64_t n) override;
  absl::Status scaled_gemm(const ScaledGemmArgs& args) override;
  absl::Status gemm(const GemmArgs& args) override;

 private:
  Backend& inner_;
  OpProfiler& p_;
};

class ProfilingModelOps final : public ModelOps {
 public:
  ProfilingModelOps(ModelOps& inner, OpProfiler& profiler) : inner_(inner), p_(profiler) {}

  std::string name() const override { return inner_.name(); }
  absl::Status embedding_forward(const int32_t* tokens, int64_t n, const float* table, int64_t vocab, int64_t dim,
                                 void* out, DType act) override;
  absl::Status embedding_backward(const int32_t* tokens, int64_t n, const void* grad_out, int64_t vocab, int64_t dim,
                                  float* grad_table, DType act) override;
  absl::Status rmsnorm_forward(const void* x, const float* weight, int64_t rows, int64_t dim, float eps, void* out,
                               float* inv_rms, DType act, float* row_amax) override;
  absl::Status rmsnorm_backward(const void* x, const float* weight, const float* inv_rms, const void* grad_out,
                                int64_t rows, int64_t dim, void* grad_x, float* grad_weight, DType act,
                                Store grad_x_store, float* grad_x_row_amax) override;
  absl::Status rope_forward(const RopeShape& shape, double theta, const void* x, void* out, DType act) override;
  absl::Status rope_backward(const RopeShape& shape, double theta, const void* grad_out, void* grad_x, DType act,
                             float* grad_x_row_amax) override;
  absl::Status attention_forward(const AttentionShape& shape, const void* q, const void* k, const void* v, void* out,
                                 float* lse, DType act, float* out_row_amax) override;
  absl::Status attention_backward(const AttentionShape& shape, const void* q, const void* k, const void* v,
                                  const void* out, const float* lse, const void* grad_out, void* grad_q, void* grad_k,
                                  void* grad_v, DType act) override;
  absl::Status kv_cache_attention_forward(const KvCacheAttentionShape& shape, const void* q, const void* k_cache,
                                          const void* v_cache, void* out, DType act) override;
  absl::Status swiglu_forward(const void* gate, const void* up, int64_t n, void* out, DType act,
                              const RowAmaxes& row_amax) override;
  absl::Status swiglu_backward(const void* gate, const void* up, const void* grad_out, int64_t n, void* grad_gate,
                               void* grad_up, DType act, const RowAmaxes& grad_gate_row_amax,
                               const RowAmaxes& grad_up_row_amax) override;
  absl::Status add(const void* a, const void* b, int64_t n, void* out, DType act) override;
  absl::Status accumulate(const void* x, int64_t n, void* y, DType act) override;
  absl::Status cross_entropy_forward(const void* logits, const int32_t* targets, int64_t rows, int64_t vocab,
                                     float* loss, float* lse, DType act, int64_t padded_vocab) override;
  absl::Status cross_entropy_backward(const void* logits, const int32_t* targets, const float* lse, int64_t rows,
                                      int64_t vocab, float grad_loss, void* grad_logits, DType act,
                                      int64_t padded_vocab) override;
  absl::Status adamw_step(const AdamWHyperparams& h, int64_t step, float* param, const float* grad, float* m,
                          float* v, int64_t n, const RowAmaxes& param_row_amax) override;
  absl::StatusOr<double> sum_of_squares(const float* x, int64_t n) override;
  absl::StatusOr<double> total_sum_of_squares(const std::vector<FloatSpan>& buffers) override;
  absl::Status queue_clip_scale(const double* sum_of_squares, double max_norm, float* clip_scale) override;
  absl::Status queue_grad_norm(const std::vector<FloatSpan>& buffers, double max_norm, double* sum_of_squares,
                               float* clip_scale) override;

 private:
  ModelOps& inner_;
  OpProfiler& p_;
};

// Several runs' breakdowns side by side, a column each (ms per step over the run's
// `steps`, and the share of its span): a row per label, most time first over all runs,
// then the time between ops and the span.
struct NamedBreakdown {
  std::string name;
  OpBreakdown breakdown;
  int steps = 1;
};
void print_breakdowns(const std::vector<NamedBreakdown>& runs);

}  // namespace fp8::bench
