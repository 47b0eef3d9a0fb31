// The model's compute kernels: every op of a Llama-style decoder other than its linear
// layers (those are fp8::Backend GEMMs), each with its backward, and the optimizer's
// elementwise work.
//
// One interface, `ModelOps`, with a CPU implementation (multithreaded, attention GEMMs
// through OpenBLAS) and a CUDA one keeping the same contracts, so model code never
// branches on the device.
//
// Conventions
//  * fp32 tensors, dense, row-major and contiguous. Shapes are written outermost first:
//    in [batch, seq, heads, head_dim] head_dim is contiguous.
//  * Pointers live in the implementation's memory (host memory for the CPU). Scalars
//    passed by value are host values.
//  * Backward functions WRITE (=) the gradients of their inputs (activations) and
//    ACCUMULATE (+=) into the gradients of parameters (the embedding table, norm
//    weights), so that gradients add up over micro-batches: zero parameter gradients
//    once before the first micro-batch.
//  * Outputs must not overlap inputs unless the method says otherwise.
//  * Every dimension must be positive. Bad arguments return InvalidArgument naming the
//    method and what is wrong (e.g. "embedding_forward: token 300 at position 17 is
//    outside the vocabulary of 256") and write nothing. Values that live in device
//    memory (token ids, targets) cannot be checked before a CUDA kernel runs without
//    stalling the stream: the CUDA implementation never reads or writes out of bounds
//    for a bad id (its row is skipped: zeros out, nothing accumulated, an ignored
//    target), and callers check ids on the host before uploading them (the model does).
//  * Reductions are deterministic: the same call on the same thread count gives the same
//    bits (partial sums are combined in a fixed order, never by racing atomics).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace fp8 {

// The cross-entropy target that marks a row to ignore: padding, or a position with no
// next token to predict.
inline constexpr int32_t kIgnoreTarget = -1;

// Rotary position embedding over x [batch, seq, heads, head_dim]. Llama convention: the
// pair (x[2i], x[2i+1]) of the vector at sequence index `pos` is rotated by the angle
// pos * theta^(-2i / head_dim). head_dim must be even.
struct RopeShape {
  int64_t batch = 0;
  int64_t seq = 0;
  int64_t heads = 0;
  int64_t head_dim = 0;
};

// Causal self-attention with grouped-query attention: query head h reads key/value head
// h / (n_heads / n_kv_heads). q and out are [batch, seq, n_heads, head_dim], k and v
// are [batch, seq, n_kv_heads, head_dim]; n_heads must be a multiple of n_kv_heads.
struct AttentionShape {
  int64_t batch = 0;
  int64_t seq = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
};

// A buffer of n floats in the implementation's memory.
struct FloatSpan {
  const float* data = nullptr;
  int64_t n = 0;
};

// torch.optim.AdamW's hyperparameters, with its defaults. A struct rather than five
// positional floats, which are too easy to pass in the wrong order.
struct AdamWHyperparams {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 1e-2f;
};

class ModelOps {
 public:
  virtual ~ModelOps() = default;
  virtual std::string name() const = 0;

  // ---- embedding ------------------------------------------------------------------------
  // out[i, :] = table[tokens[i], :] for tokens [n] in [0, vocab), table [vocab, dim].
  virtual absl::Status embedding_forward(const int32_t* tokens, int64_t n, const float* table, int64_t vocab,
                                         int64_t dim, float* out) = 0;
  // grad_table[tokens[i], :] += grad_out[i, :]; a token seen twice gets both rows.
  virtual absl::Status embedding_backward(const int32_t* tokens, int64_t n, const float* grad_out, int64_t vocab,
                                          int64_t dim, float* grad_table) = 0;

  // ---- RMSNorm --------------------------------------------------------------------------
  // out = x * inv_rms * weight per row of x [rows, dim], where
  // inv_rms[r] = 1 / sqrt(mean(x[r, :]^2) + eps) is saved for the backward. eps > 0.
  virtual absl::Status rmsnorm_forward(const float* x, const float* weight, int64_t rows, int64_t dim, float eps,
                                       float* out, float* inv_rms) = 0;
  // grad_x = ∂L/∂x (written), grad_weight += ∂L/∂weight (summed over rows).
  virtual absl::Status rmsnorm_backward(const float* x, const float* weight, const float* inv_rms,
                                        const float* grad_out, int64_t rows, int64_t dim, float* grad_x,
                                        float* grad_weight) = 0;

  // ---- rotary position embedding ----------------------------------------------------------
  // out = rotate(x); out may equal x (in place). theta is the base, e.g. 10000 (Llama 2)
  // or 500000 (Llama 3). Cos/sin tables are computed once per (seq, head_dim, theta).
  virtual absl::Status rope_forward(const RopeShape& shape, double theta, const float* x, float* out) = 0;
  // The inverse rotation (a rotation's transpose is its inverse): grad_x = rotate⁻¹(grad_out).
  // grad_x may equal grad_out.
  virtual absl::Status rope_backward(const RopeShape& shape, double theta, const float* grad_out, float* grad_x) = 0;

  // ---- causal self-attention (GQA) ----------------------------------------------------------
  // out = softmax(q·kᵀ / sqrt(head_dim) + causal mask)·v. Saves only the log-sum-exp of
  // each score row, lse [batch, n_heads, seq], never the [seq, seq] probabilities.
  virtual absl::Status attention_forward(const AttentionShape& shape, const float* q, const float* k, const float* v,
                                         float* out, float* lse) = 0;
  // Recomputes the probabilities from q, k and lse (flash-attention style). grad_q, grad_k
  // and grad_v are written; grad_k and grad_v sum over the query heads sharing a kv head.
  virtual absl::Status attention_backward(const AttentionShape& shape, const float* q, const float* k, const float* v,
                                          const float* out, const float* lse, const float* grad_out, float* grad_q,
                                          float* grad_k, float* grad_v) = 0;

  // ---- SwiGLU -------------------------------------------------------------------------------
  // out = silu(gate) * up elementwise over n values, silu(g) = g * sigmoid(g).
  virtual absl::Status swiglu_forward(const float* gate, const float* up, int64_t n, float* out) = 0;
  virtual absl::Status swiglu_backward(const float* gate, const float* up, const float* grad_out, int64_t n,
                                       float* grad_gate, float* grad_up) = 0;

  // ---- residual -------------------------------------------------------------------------------
  // out = a + b; out may equal a or b.
  virtual absl::Status add(const float* a, const float* b, int64_t n, float* out) = 0;
  // y += x.
  virtual absl::Status accumulate(const float* x, int64_t n, float* y) = 0;

  // ---- loss ---------------------------------------------------------------------------------
  // Mean cross-entropy of logits [rows, vocab] against targets [rows] in [0, vocab), a
  // target of kIgnoreTarget (-1) marking a row to ignore. *loss (one float in this
  // implementation's memory) is the mean over the rows not ignored, 0 when all are
  // ignored; lse [rows] (every row's log-sum-exp) is saved for the backward.
  virtual absl::Status cross_entropy_forward(const float* logits, const int32_t* targets, int64_t rows, int64_t vocab,
                                             float* loss, float* lse) = 0;
  // grad_logits = grad_loss * ∂loss/∂logits (written; zero on ignored rows).
  virtual absl::Status cross_entropy_backward(const float* logits, const int32_t* targets, const float* lse,
                                              int64_t rows, int64_t vocab, float grad_loss, float* grad_logits) = 0;

  // ---- optimizer ----------------------------------------------------------------------------
  // One torch.optim.AdamW step over n parameters, step = 1 for the first: decoupled weight
  // decay (param -= lr * weight_decay * param), then the bias-corrected Adam update.
  // m and v are the moment buffers (zero before step 1), updated in place.
  virtual absl::Status adamw_step(const AdamWHyperparams& h, int64_t step, float* param, const float* grad, float* m,
                                  float* v, int64_t n) = 0;
  // Σ x², accumulated in double: summed over every gradient buffer, the global grad norm.
  // Returns to the host (a CUDA implementation synchronises its stream).
  virtual absl::StatusOr<double> sum_of_squares(const float* x, int64_t n) = 0;
  // Σ over the buffers, in order, of each buffer's sum_of_squares (the same doubles, added
  // on the host in the same order): the global grad norm with ONE return to the host for
  // all gradient buffers instead of one per buffer. Every buffer is checked first.
  virtual absl::StatusOr<double> total_sum_of_squares(const std::vector<FloatSpan>& buffers) = 0;
  // x *= factor (gradient clipping).
  virtual absl::Status scale_inplace(float* x, int64_t n, float factor) = 0;
};

// The CUDA implementation on CUDA device `device`, queuing every kernel on `stream` (a
// cudaStream_t of that device; null for the default stream), which should be the stream
// of the Backend that shares its memory. Kernels only queue work, except where a method
// says it returns to the host (sum_of_squares). Fails with Unavailable, saying why, when
// the build has no CUDA or no GPU is present. Reductions are deterministic here too: a
// fixed decomposition and a fixed order of partial sums, never floating-point atomics.
absl::StatusOr<std::unique_ptr<ModelOps>> make_cuda_model_ops(int device = 0, void* stream = nullptr);

// The CPU implementation: threads from the kernels' pool, OpenBLAS for the attention
// GEMMs. Thread-safe; a process-wide instance. While attention runs its units on several
// pool threads it holds OpenBLAS to one thread, process-wide (kernels/ops/blas_threads.h
// says why): a GEMM issued meanwhile from another thread runs single-threaded.
ModelOps& cpu_model_ops();

}  // namespace fp8
