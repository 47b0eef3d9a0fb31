// The CUDA ModelOps: the CPU's argument checks (ops/validate.h, so the same bad call gets
// the same message), then kernels queued on the caller's stream.
//
// Device: every method makes the ops' device current for its duration and restores the
// caller's (DeviceGuard). Asynchrony: methods only queue work, except sum_of_squares
// (which returns a host value), the first use of a RoPE key (its table upload), and the
// rare growth of the scratch buffer (DeviceBuffer). Threads: methods that use the scratch
// buffer or the RoPE tables hold a mutex, which also keeps each call's launches
// contiguous on the stream; the others are stateless.
//
// Token ids and targets live in device memory and cannot be checked here without a
// sync: the kernels skip an out-of-range id (model_kernels.h says how).
//
// Activations of either type (fp32, bf16) go straight to kernels templated on it: no
// staging copies, unlike the CPU (model_kernels.h, attention_kernels.h).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cuda/cuda_status.h"
#include "cuda/device_buffer.h"
#include "cuda/device_check.h"
#include "cuda/ops/attention_kernels.h"
#include "cuda/ops/model_kernels.h"
#include "cuda/ops/rope_device_tables.h"
#include "fp8/model_ops.h"
#include "ops/adamw.h"
#include "ops/rope_table.h"
#include "ops/validate.h"

namespace fp8 {
namespace {

using cuda::cuda_status;
using cuda::DeviceGuard;

#define FP8_RETURN_IF_ERROR(expr)           \
  if (absl::Status s_ = (expr); !s_.ok()) { \
    return s_;                              \
  }

// The limit of the CUDA attention kernels, checked after the shared validation.
absl::Status check_attention_head_dim(const char* op, const AttentionShape& s) {
  if (s.head_dim > cuda::kMaxAttentionHeadDim) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": head_dim ", s.head_dim,
                                                   " exceeds the CUDA kernels' limit of ", cuda::kMaxAttentionHeadDim));
  }
  return absl::OkStatus();
}

cuda::AttentionKernels kernels_of(CudaModelOpsOptions::Attention a) {
  switch (a) {
    case CudaModelOpsOptions::Attention::kMma:
      return cuda::AttentionKernels::kMma;
    case CudaModelOpsOptions::Attention::kSimt:
      return cuda::AttentionKernels::kSimt;
    case CudaModelOpsOptions::Attention::kTensorCores:
      break;
  }
  return cuda::AttentionKernels::kTensorCores;
}

cuda::AttentionLaunch launch_of(const AttentionShape& s, const CudaModelOpsOptions& options) {
  return {s.batch, s.seq, s.n_heads, s.n_kv_heads, s.head_dim, kernels_of(options.attention)};
}

cuda::RopeDims dims_of(const RopeShape& s) { return {s.batch, s.seq, s.heads, s.head_dim}; }

// The kernels' name for an activation type; `act` was validated (float32 or bfloat16).
cuda::HpType hp_type(DType act) { return act == DType::kBFloat16 ? cuda::HpType::kBFloat16 : cuda::HpType::kFloat32; }

class CudaModelOps final : public ModelOps {
 public:
  static absl::StatusOr<std::unique_ptr<ModelOps>> create(int device, cudaStream_t stream,
                                                        const CudaModelOpsOptions& options);

  ~CudaModelOps() override {
    DeviceGuard guard(device_);
    // Let queued work finish before its scratch and tables go away. An error here belongs
    // to work whose caller never synchronised; nothing is left to report it to.
    cudaStreamSynchronize(stream_);
    scratch_.release();
    rope_tables_.release();
  }

  std::string name() const override { return name_; }

  absl::Status embedding_forward(const int32_t* tokens, int64_t n, const float* table, int64_t vocab, int64_t dim,
                                 void* out, DType act) override {
    FP8_RETURN_IF_ERROR(ops::validate_embedding_forward(tokens, n, table, vocab, dim, out, act));
    return on_device(
        [&] { return cuda::launch_embedding_forward(tokens, n, table, vocab, dim, out, hp_type(act), stream_); });
  }

  absl::Status embedding_backward(const int32_t* tokens, int64_t n, const void* grad_out, int64_t vocab, int64_t dim,
                                  float* grad_table, DType act) override {
    FP8_RETURN_IF_ERROR(ops::validate_embedding_backward(tokens, n, grad_out, vocab, dim, grad_table, act));
    if (n > cuda::kMaxEmbeddingBackwardTokens) {
      return absl::InvalidArgumentError(absl::StrCat("embedding_backward: n ", n,
                                                     " exceeds the CUDA kernels' limit of ",
                                                     cuda::kMaxEmbeddingBackwardTokens, " tokens"));
    }
    std::lock_guard<std::mutex> lock(mu_);
    DeviceGuard guard(device_);
    if (!guard.status().ok()) return guard.status();
    size_t bytes = 0;
    FP8_RETURN_IF_ERROR(cuda_status(cuda::embedding_backward_scratch_bytes(n, vocab, &bytes)));
    auto scratch = scratch_.get(bytes, stream_);
    if (!scratch.ok()) return scratch.status();
    return cuda_status(cuda::launch_embedding_backward(tokens, n, grad_out, vocab, dim, grad_table, *scratch, bytes,
                                                       hp_type(act), stream_));
  }

  absl::Status rmsnorm_forward(const void* x, const float* weight, int64_t rows, int64_t dim, float eps, void* out,
                               float* inv_rms, DType act, float* row_amax) override {
    FP8_RETURN_IF_ERROR(ops::validate_rmsnorm_forward(x, weight, rows, dim, eps, out, inv_rms, act));
    return on_device([&] {
      return cuda::launch_rmsnorm_forward(x, weight, rows, dim, eps, out, inv_rms, row_amax, hp_type(act), stream_);
    });
  }

  absl::Status rmsnorm_backward(const void* x, const float* weight, const float* inv_rms, const void* grad_out,
                                int64_t rows, int64_t dim, void* grad_x, float* grad_weight, DType act,
                                Store grad_x_store, float* grad_x_row_amax) override {
    FP8_RETURN_IF_ERROR(
        ops::validate_rmsnorm_backward(x, weight, inv_rms, grad_out, rows, dim, grad_x, grad_weight, act));
    return with_scratch(cuda::rmsnorm_backward_scratch_bytes(rows, dim), [&](void* scratch) {
      return cuda::launch_rmsnorm_backward(x, weight, inv_rms, grad_out, rows, dim, grad_x,
                                           grad_x_store == Store::kAccumulate, grad_x_row_amax, grad_weight, scratch,
                                           hp_type(act), stream_);
    });
  }

  absl::Status rope_forward(const RopeShape& shape, double theta, const void* x, void* out, DType act) override {
    FP8_RETURN_IF_ERROR(ops::validate_rope_forward(shape, theta, x, out, act));
    return rope(shape, theta, /*inverse=*/false, x, out, act, nullptr);
  }

  absl::Status rope_backward(const RopeShape& shape, double theta, const void* grad_out, void* grad_x, DType act,
                             float* grad_x_row_amax) override {
    FP8_RETURN_IF_ERROR(ops::validate_rope_backward(shape, theta, grad_out, grad_x, act));
    return rope(shape, theta, /*inverse=*/true, grad_out, grad_x, act, grad_x_row_amax);
  }

  absl::Status attention_forward(const AttentionShape& shape, const void* q, const void* k, const void* v, void* out,
                                 float* lse, DType act, float* out_row_amax) override {
    FP8_RETURN_IF_ERROR(ops::validate_attention_forward(shape, q, k, v, out, lse, act));
    FP8_RETURN_IF_ERROR(check_attention_head_dim("attention_forward", shape));
    return on_device(
        [&] { return cuda::launch_attention_forward(launch_of(shape, options_), q, k, v, out, lse, out_row_amax, hp_type(act),
                                                    stream_); });
  }

  absl::Status kv_cache_attention_forward(const KvCacheAttentionShape& shape, const void* q, const void* k_cache,
                                          const void* v_cache, void* out, DType act) override {
    FP8_RETURN_IF_ERROR(ops::validate_kv_cache_attention_forward(shape, q, k_cache, v_cache, out, act));
    FP8_RETURN_IF_ERROR(check_attention_head_dim(
        "kv_cache_attention_forward", {shape.batch, shape.seq, shape.n_heads, shape.n_kv_heads, shape.head_dim}));
    const cuda::KvCacheAttentionLaunch d{shape.batch,   shape.seq,        shape.past,    shape.cache_len,
                                         shape.n_heads, shape.n_kv_heads, shape.head_dim};
    return on_device([&] {
      return cuda::launch_kv_cache_attention_forward(d, q, k_cache, v_cache, out, hp_type(act), stream_);
    });
  }

  absl::Status attention_backward(const AttentionShape& shape, const void* q, const void* k, const void* v,
                                  const void* out, const float* lse, const void* grad_out, void* grad_q, void* grad_k,
                                  void* grad_v, DType act) override {
    FP8_RETURN_IF_ERROR(
        ops::validate_attention_backward(shape, q, k, v, out, lse, grad_out, grad_q, grad_k, grad_v, act));
    FP8_RETURN_IF_ERROR(check_attention_head_dim("attention_backward", shape));
    const cuda::AttentionLaunch d = launch_of(shape, options_);
    return with_scratch(cuda::attention_backward_scratch_bytes(d), [&](void* scratch) {
      return cuda::launch_attention_backward(d, q, k, v, out, lse, grad_out, grad_q, grad_k, grad_v, scratch,
                                             hp_type(act), stream_);
    });
  }

  absl::Status swiglu_forward(const void* gate, const void* up, int64_t n, void* out, DType act,
                              const RowAmaxes& row_amax) override {
    FP8_RETURN_IF_ERROR(ops::validate_swiglu_forward(gate, up, n, out, act, row_amax));
    if (row_amax.out != nullptr) {
      const int64_t cols = row_amax.row_length;
      return on_device([&] {
        return cuda::launch_swiglu_forward_rows(gate, up, n / cols, cols, out, row_amax.out, hp_type(act), stream_);
      });
    }
    return on_device([&] { return cuda::launch_swiglu_forward(gate, up, n, out, hp_type(act), stream_); });
  }

  absl::Status swiglu_backward(const void* gate, const void* up, const void* grad_out, int64_t n, void* grad_gate,
                               void* grad_up, DType act, const RowAmaxes& grad_gate_row_amax,
                               const RowAmaxes& grad_up_row_amax) override {
    FP8_RETURN_IF_ERROR(ops::validate_swiglu_backward(gate, up, grad_out, n, grad_gate, grad_up, act,
                                                      grad_gate_row_amax, grad_up_row_amax));
    if (grad_gate_row_amax.out != nullptr || grad_up_row_amax.out != nullptr) {
      const int64_t cols =
          grad_gate_row_amax.out != nullptr ? grad_gate_row_amax.row_length : grad_up_row_amax.row_length;
      return on_device([&] {
        return cuda::launch_swiglu_backward_rows(gate, up, grad_out, n / cols, cols, grad_gate, grad_up,
                                                 grad_gate_row_amax.out, grad_up_row_amax.out, hp_type(act), stream_);
      });
    }
    return on_device(
        [&] { return cuda::launch_swiglu_backward(gate, up, grad_out, n, grad_gate, grad_up, hp_type(act), stream_); });
  }

  absl::Status add(const void* a, const void* b, int64_t n, void* out, DType act) override {
    FP8_RETURN_IF_ERROR(ops::validate_add(a, b, n, out, act));
    return on_device([&] { return cuda::launch_add(a, b, n, out, hp_type(act), stream_); });
  }

  absl::Status accumulate(const void* x, int64_t n, void* y, DType act) override {
    FP8_RETURN_IF_ERROR(ops::validate_accumulate(x, n, y, act));
    return on_device([&] { return cuda::launch_accumulate(x, n, y, hp_type(act), stream_); });
  }

  absl::Status cross_entropy_forward(const void* logits, const int32_t* targets, int64_t rows, int64_t vocab,
                                     float* loss, float* lse, DType act, int64_t padded_vocab) override {
    FP8_RETURN_IF_ERROR(
        ops::validate_cross_entropy_forward(logits, targets, rows, vocab, padded_vocab, loss, lse, act));
    const int64_t ld = padded_vocab == 0 ? vocab : padded_vocab;
    return with_scratch(cuda::cross_entropy_forward_scratch_bytes(rows), [&](void* scratch) {
      return cuda::launch_cross_entropy_forward(logits, targets, rows, vocab, ld, loss, lse, scratch, hp_type(act),
                                                stream_);
    });
  }

  absl::Status cross_entropy_backward(const void* logits, const int32_t* targets, const float* lse, int64_t rows,
                                      int64_t vocab, float grad_loss, void* grad_logits, DType act,
                                      int64_t padded_vocab) override {
    FP8_RETURN_IF_ERROR(ops::validate_cross_entropy_backward(logits, targets, lse, rows, vocab, padded_vocab,
                                                             grad_loss, grad_logits, act));
    const int64_t ld = padded_vocab == 0 ? vocab : padded_vocab;
    return with_scratch(cuda::cross_entropy_backward_scratch_bytes(), [&](void* scratch) {
      return cuda::launch_cross_entropy_backward(logits, targets, lse, rows, vocab, ld, grad_loss, grad_logits,
                                                 scratch, hp_type(act), stream_);
    });
  }

  absl::Status adamw_step(const AdamWHyperparams& h, int64_t step, float* param, const float* grad, float* m, float* v,
                          int64_t n, const RowAmaxes& param_row_amax) override {
    FP8_RETURN_IF_ERROR(ops::validate_adamw(h, step, param_row_amax, param, grad, m, v, n));
    // The CPU's coefficients, to the bit: bias corrections in double on the host.
    const ops::AdamWCoefficients c = ops::adamw_coefficients(h, step);
    if (param_row_amax.out != nullptr) {
      const int64_t cols = param_row_amax.row_length;
      return on_device([&] {
        return cuda::launch_adamw_rows(c, h.grad_scale_in, param, grad, m, v, n / cols, cols, param_row_amax.out,
                                       stream_);
      });
    }
    return on_device([&] { return cuda::launch_adamw(c, h.grad_scale_in, param, grad, m, v, n, stream_); });
  }

  absl::StatusOr<double> sum_of_squares(const float* x, int64_t n) override {
    FP8_RETURN_IF_ERROR(ops::validate_sum_of_squares(x, n));
    std::lock_guard<std::mutex> lock(mu_);
    DeviceGuard guard(device_);
    if (!guard.status().ok()) return guard.status();
    cuda::ScratchLayout layout;
    const size_t result_offset = layout.add(sizeof(double));
    const size_t partials_offset = layout.add(cuda::sum_of_squares_scratch_bytes(n));
    auto scratch = scratch_.get(layout.total(), stream_);
    if (!scratch.ok()) return scratch.status();
    auto* base = static_cast<char*>(*scratch);
    auto* result = reinterpret_cast<double*>(base + result_offset);
    FP8_RETURN_IF_ERROR(cuda_status(cuda::launch_sum_of_squares(x, n, result, base + partials_offset, stream_)));
    double sum = 0.0;
    FP8_RETURN_IF_ERROR(
        cuda_status(cudaMemcpyAsync(&sum, result, sizeof(double), cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync"));
    FP8_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"));
    return sum;
  }

  absl::StatusOr<double> total_sum_of_squares(const std::vector<FloatSpan>& buffers) override {
    for (const FloatSpan& b : buffers) FP8_RETURN_IF_ERROR(ops::validate_sum_of_squares(b.data, b.n));
    if (buffers.empty()) return 0.0;
    std::lock_guard<std::mutex> lock(mu_);
    DeviceGuard guard(device_);
    if (!guard.status().ok()) return guard.status();
    // queue_grad_norm's launches (the buffers' sums added in order on the device, as the
    // host would add them), then the one double back.
    const BufferTable t = table_of(buffers);
    cuda::ScratchLayout layout;
    const size_t sum_offset = layout.add(sizeof(double));
    const size_t clip_offset = layout.add(sizeof(float));
    const size_t rest_offset = layout.add(cuda::grad_norm_scratch_bytes(t.ns.data(), t.count()));
    auto scratch = scratch_.get(layout.total(), stream_);
    if (!scratch.ok()) return scratch.status();
    auto* base = static_cast<char*>(*scratch);
    auto* result = reinterpret_cast<double*>(base + sum_offset);
    FP8_RETURN_IF_ERROR(cuda_status(cuda::launch_grad_norm(t.xs.data(), t.ns.data(), t.count(), 0.0, result,
                                                           reinterpret_cast<float*>(base + clip_offset),
                                                           base + rest_offset, stream_)));
    double total = 0.0;
    FP8_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(&total, result, sizeof(double), cudaMemcpyDeviceToHost, stream_),
                                    "cudaMemcpyAsync"));
    FP8_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"));
    return total;
  }

  absl::Status queue_grad_norm(const std::vector<FloatSpan>& buffers, double max_norm, double* sum_of_squares,
                               float* clip_scale) override {
    for (const FloatSpan& b : buffers) FP8_RETURN_IF_ERROR(ops::validate_sum_of_squares(b.data, b.n));
    FP8_RETURN_IF_ERROR(ops::validate_grad_norm(max_norm, sum_of_squares, clip_scale));
    std::lock_guard<std::mutex> lock(mu_);
    DeviceGuard guard(device_);
    if (!guard.status().ok()) return guard.status();
    const BufferTable t = table_of(buffers);
    // (At least a little: with no buffers the outputs are still written, from no sums.)
    auto scratch = scratch_.get(std::max<size_t>(cuda::grad_norm_scratch_bytes(t.ns.data(), t.count()), 256), stream_);
    if (!scratch.ok()) return scratch.status();
    return cuda_status(cuda::launch_grad_norm(t.xs.data(), t.ns.data(), t.count(), max_norm, sum_of_squares,
                                              clip_scale, *scratch, stream_));
  }

  absl::Status queue_clip_scale(const double* sum_of_squares, double max_norm, float* clip_scale) override {
    FP8_RETURN_IF_ERROR(ops::validate_grad_norm(max_norm, sum_of_squares, clip_scale, "queue_clip_scale"));
    DeviceGuard guard(device_);
    if (!guard.status().ok()) return guard.status();
    return cuda_status(cuda::launch_clip_scale(sum_of_squares, max_norm, clip_scale, stream_));
  }

 private:
  // The buffers of a grad norm as the launchers take them.
  struct BufferTable {
    std::vector<const float*> xs;
    std::vector<int64_t> ns;
    int count() const { return static_cast<int>(xs.size()); }
  };
  static BufferTable table_of(const std::vector<FloatSpan>& buffers) {
    BufferTable t;
    for (const FloatSpan& b : buffers) {
      t.xs.push_back(b.data);
      t.ns.push_back(b.n);
    }
    return t;
  }

  CudaModelOps(int device, cudaStream_t stream, std::string name, const CudaModelOpsOptions& options)
      : device_(device), stream_(stream), name_(std::move(name)), options_(options) {}

  // Queues `launch()` with the ops' device current.
  template <typename Launch>
  absl::Status on_device(Launch&& launch) {
    DeviceGuard guard(device_);
    if (!guard.status().ok()) return guard.status();
    return cuda_status(launch());
  }

  // Queues `launch(scratch)` with `bytes` of the scratch buffer, holding the lock until the
  // launches are queued (later users of the buffer queue behind them on the stream).
  template <typename Launch>
  absl::Status with_scratch(size_t bytes, Launch&& launch) {
    std::lock_guard<std::mutex> lock(mu_);
    DeviceGuard guard(device_);
    if (!guard.status().ok()) return guard.status();
    auto scratch = scratch_.get(bytes, stream_);
    if (!scratch.ok()) return scratch.status();
    return cuda_status(launch(*scratch));
  }

  absl::Status rope(const RopeShape& shape, double theta, bool inverse, const void* in, void* out, DType act,
                    float* row_amax) {
    std::lock_guard<std::mutex> lock(mu_);
    DeviceGuard guard(device_);
    if (!guard.status().ok()) return guard.status();
    auto table = rope_tables_.get(ops::rope_table_rows(shape.start, shape.seq), shape.head_dim, theta, stream_);
    if (!table.ok()) return table.status();
    // The kernels rotate sequence index s by table row s: start the table at row `start`.
    const int64_t first = shape.start * (shape.head_dim / 2);
    return cuda_status(cuda::launch_rope(dims_of(shape), table->cos + first, table->sin + first, inverse, in, out,
                                         row_amax, hp_type(act), stream_));
  }

  const int device_;
  const cudaStream_t stream_;  // the caller's stream (or the default stream); not owned
  const std::string name_;
  const CudaModelOpsOptions options_;
  std::mutex mu_;  // guards scratch_ and rope_tables_
  cuda::DeviceBuffer scratch_;
  cuda::DeviceRopeTables rope_tables_;
};

absl::StatusOr<std::unique_ptr<ModelOps>> CudaModelOps::create(int device, cudaStream_t stream,
                                                              const CudaModelOpsOptions& options) {
  absl::StatusOr<cudaDeviceProp> prop = cuda::check_cuda_device(device, &cuda::probe_model_kernel_image, "model kernels");
  if (!prop.ok()) return prop.status();
  DeviceGuard guard(device);
  if (!guard.status().ok()) return guard.status();
  std::unique_ptr<CudaModelOps> ops(
      new CudaModelOps(device, stream, absl::StrCat("cuda:", device, " (", prop->name, ")"), options));
  // Allocate the scratch now, so that the first reduction does not call cudaMalloc.
  if (auto s = ops->scratch_.get(1, stream); !s.ok()) return s.status();
  return std::unique_ptr<ModelOps>(std::move(ops));
}

#undef FP8_RETURN_IF_ERROR

}  // namespace

absl::StatusOr<std::unique_ptr<ModelOps>> make_cuda_model_ops(int device, void* stream,
                                                              const CudaModelOpsOptions& options) {
  return CudaModelOps::create(device, static_cast<cudaStream_t>(stream), options);
}

}  // namespace fp8
