// The model's compute kernels: every op of a Llama-style decoder other than its linear
// layers (those are fp8::Backend GEMMs), each with its backward, and the optimizer's
// elementwise work.
//
// One interface, `ModelOps`, with a CPU implementation (multithreaded, attention GEMMs
// through OpenBLAS) and a CUDA one keeping the same contracts, so model code never
// branches on the device.
//
// Conventions
//  * Dense, row-major, contiguous tensors of fp32, except activations, which may be bf16
//    (see "Activations" in ModelOps). Shapes are written outermost first: in
//    [batch, seq, heads, head_dim] head_dim is contiguous. Pointers need only their
//    element type's alignment.
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
//    bits (partial sums are combined in a fixed order, never by racing atomics; maxima may
//    meet in integer atomics, being exact and independent of order).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fp8/fp8.h"

namespace fp8 {

// The cross-entropy target that marks a row to ignore: padding, or a position with no
// next token to predict.
inline constexpr int32_t kIgnoreTarget = -1;

// Rotary position embedding over x [batch, seq, heads, head_dim]. Llama convention: the
// pair (x[2i], x[2i+1]) of the vector at sequence index s is rotated by the angle
// pos * theta^(-2i / head_dim), pos = start + s. head_dim must be even; start >= 0 is
// the position of sequence index 0 (0 in training; a generation step's new tokens come
// after the cached ones).
struct RopeShape {
  int64_t batch = 0;
  int64_t seq = 0;
  int64_t heads = 0;
  int64_t head_dim = 0;
  int64_t start = 0;
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

// Attention of new queries against a KV cache (generation): q and out
// [batch, seq, n_heads, head_dim] are the queries of positions [past, past + seq);
// k_cache and v_cache [batch, cache_len, n_kv_heads, head_dim] hold in their first
// past + seq rows of each batch the keys and values of positions 0 .. past + seq - 1, the
// new positions' included; later rows are not read. The query at position p reads keys
// 0 .. p, so past = 0 and cache_len = seq is attention_forward's causal attention.
// Heads are grouped as in AttentionShape. cache_len >= past + seq.
struct KvCacheAttentionShape {
  int64_t batch = 0;
  int64_t seq = 0;
  int64_t past = 0;
  int64_t cache_len = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
};

// Where an elementwise op writes the amax of each row of its output: n / row_length fp32
// values, max |out| over each run of row_length elements as stored (after rounding to
// bf16), bit for bit what Backend::amax(out, kRowwise) would write for the output seen as
// a [n / row_length, row_length] matrix. The fp8 cast that reads the output next takes
// its amax from them (QuantizeArgs::row_amax) instead of reading the output once more.
// None when `out` is null; else row_length must be positive and divide n.
struct RowAmaxes {
  float* out = nullptr;
  int64_t row_length = 0;
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
  // Each gradient's factor before the update (gradient clipping's max_norm / norm), one
  // fp32 multiply as the gradient is read: clipping without a pass of its own.
  float grad_scale = 1.0f;
  // Or the factor read from the implementation's memory (one float, e.g. queue_grad_norm's
  // clip_scale), so that the host need not wait for the norm: grad_scale must then be 1.
  // NaN there skips the update: param, m, v and the row amaxes stay as they were, for the
  // caller to report the divergence when it reads the norm.
  const float* grad_scale_in = nullptr;
};

class ModelOps {
 public:
  virtual ~ModelOps() = default;
  virtual std::string name() const = 0;

  // Activations: every pointer typed `void*` / `const void*` below is an activation (or
  // its gradient) of element type `act`, the last argument of its method: DType::kFloat32
  // (the default) or DType::kBFloat16 (bf16 activations with fp32 master weights, as
  // mixed-precision training runs them). Whatever `act`, every op computes in fp32: bf16
  // inputs are widened exactly, results are rounded once (to nearest even) when stored as
  // bf16, and reductions accumulate in fp32 or double as documented for fp32. Parameters
  // (the embedding table, norm weights), their gradients, inv_rms, lse and the loss are
  // fp32 whatever `act`. Another `act` is InvalidArgument, whatever else is wrong with the
  // call ("add: activations must be float32 or bfloat16, got float8_e4m3fn").
  //
  // So a bf16 call gives, bit for bit on the CPU, what the fp32 call gives on the widened
  // inputs with its activation outputs rounded; the CUDA kernels differ from it only as
  // their fp32 results differ from the CPU's (a bf16 output may land one bf16 ulp away
  // where the two fp32 results straddle a rounding boundary). accumulate in bf16 is
  // y = bf16(float(y) + float(x)).

  // ---- embedding ------------------------------------------------------------------------
  // out[i, :] = table[tokens[i], :] for tokens [n] in [0, vocab), table [vocab, dim].
  virtual absl::Status embedding_forward(const int32_t* tokens, int64_t n, const float* table, int64_t vocab,
                                         int64_t dim, void* out, DType act = DType::kFloat32) = 0;
  // grad_table[tokens[i], :] += grad_out[i, :]; a token seen twice gets both rows.
  virtual absl::Status embedding_backward(const int32_t* tokens, int64_t n, const void* grad_out, int64_t vocab,
                                          int64_t dim, float* grad_table, DType act = DType::kFloat32) = 0;

  // ---- RMSNorm --------------------------------------------------------------------------
  // out = x * inv_rms * weight per row of x [rows, dim], where
  // inv_rms[r] = 1 / sqrt(mean(x[r, :]^2) + eps) is saved for the backward. eps > 0.
  // row_amax [rows], when given, receives max |out[r, :]| of each row as stored (after
  // rounding to bf16), bit for bit what Backend::amax(out, kRowwise) would write: a
  // following fp8 cast of `out` takes its amax from them (QuantizeArgs::row_amax) instead
  // of reading `out` once more.
  virtual absl::Status rmsnorm_forward(const void* x, const float* weight, int64_t rows, int64_t dim, float eps,
                                       void* out, float* inv_rms, DType act = DType::kFloat32,
                                       float* row_amax = nullptr) = 0;
  // grad_x = ∂L/∂x, written or, with Store::kAccumulate, added to grad_x (a residual
  // stream's gradient takes the norm's share this way); grad_weight += ∂L/∂weight (summed
  // over rows). grad_x must not overlap x or grad_out. grad_x_row_amax [rows], when given,
  // receives max |grad_x[r, :]| of each row as stored (the sum, when accumulating), as
  // the forward's row_amax does for out: for the fp8 casts of the linear that reads
  // grad_x next as its grad_output.
  virtual absl::Status rmsnorm_backward(const void* x, const float* weight, const float* inv_rms, const void* grad_out,
                                        int64_t rows, int64_t dim, void* grad_x, float* grad_weight,
                                        DType act = DType::kFloat32, Store grad_x_store = Store::kOverwrite,
                                        float* grad_x_row_amax = nullptr) = 0;

  // ---- rotary position embedding ----------------------------------------------------------
  // out = rotate(x); out may equal x (in place). theta is the base, e.g. 10000 (Llama 2)
  // or 500000 (Llama 3). Cos/sin tables are computed once per (seq, head_dim, theta).
  virtual absl::Status rope_forward(const RopeShape& shape, double theta, const void* x, void* out,
                                    DType act = DType::kFloat32) = 0;
  // The inverse rotation (a rotation's transpose is its inverse): grad_x = rotate⁻¹(grad_out).
  // grad_x may equal grad_out. grad_x_row_amax [batch · seq], when given, receives the
  // amax of each row [heads · head_dim] of grad_x as stored (see RowAmaxes): for the fp8
  // casts of wq's and wk's grad_output, which grad_x is.
  virtual absl::Status rope_backward(const RopeShape& shape, double theta, const void* grad_out, void* grad_x,
                                     DType act = DType::kFloat32, float* grad_x_row_amax = nullptr) = 0;

  // ---- causal self-attention (GQA) ----------------------------------------------------------
  // out = softmax(q·kᵀ / sqrt(head_dim) + causal mask)·v. Saves only the log-sum-exp of
  // each score row, lse [batch, n_heads, seq] (fp32), never the [seq, seq] probabilities.
  // out_row_amax [batch · seq], when given, receives the amax of each row
  // [n_heads · head_dim] of out as stored (see RowAmaxes): for the fp8 cast of wo's input.
  virtual absl::Status attention_forward(const AttentionShape& shape, const void* q, const void* k, const void* v,
                                         void* out, float* lse, DType act = DType::kFloat32,
                                         float* out_row_amax = nullptr) = 0;
  // Recomputes the probabilities from q, k and lse (flash-attention style). grad_q, grad_k
  // and grad_v are written; grad_k and grad_v sum over the query heads sharing a kv head.
  virtual absl::Status attention_backward(const AttentionShape& shape, const void* q, const void* k, const void* v,
                                          const void* out, const float* lse, const void* grad_out, void* grad_q,
                                          void* grad_k, void* grad_v, DType act = DType::kFloat32) = 0;

  // Forward only, for generation: softmax(q·kᵀ / sqrt(head_dim) + causal mask)·v over the
  // cache (KvCacheAttentionShape); nothing is saved for a backward. Scores, softmax and
  // the weighted sum of values accumulate in fp32 or better.
  virtual absl::Status kv_cache_attention_forward(const KvCacheAttentionShape& shape, const void* q,
                                                  const void* k_cache, const void* v_cache, void* out,
                                                  DType act = DType::kFloat32) = 0;

  // ---- SwiGLU -------------------------------------------------------------------------------
  // out = silu(gate) * up elementwise over n values, silu(g) = g * sigmoid(g). row_amax:
  // the rows' amaxes of out (see RowAmaxes), for the fp8 cast of w2's input.
  virtual absl::Status swiglu_forward(const void* gate, const void* up, int64_t n, void* out,
                                      DType act = DType::kFloat32, const RowAmaxes& row_amax = {}) = 0;
  // grad_gate_row_amax and grad_up_row_amax: the rows' amaxes of grad_gate and grad_up
  // (see RowAmaxes), for the fp8 casts of w1's and w3's grad_output. Either may be given
  // alone; given both, their row_lengths must be equal.
  virtual absl::Status swiglu_backward(const void* gate, const void* up, const void* grad_out, int64_t n,
                                       void* grad_gate, void* grad_up, DType act = DType::kFloat32,
                                       const RowAmaxes& grad_gate_row_amax = {},
                                       const RowAmaxes& grad_up_row_amax = {}) = 0;

  // ---- residual -------------------------------------------------------------------------------
  // out = a + b; out may equal a or b.
  virtual absl::Status add(const void* a, const void* b, int64_t n, void* out, DType act = DType::kFloat32) = 0;
  // y += x.
  virtual absl::Status accumulate(const void* x, int64_t n, void* y, DType act = DType::kFloat32) = 0;

  // ---- loss ---------------------------------------------------------------------------------
  // Mean cross-entropy of logits [rows, padded_vocab] against targets [rows] in [0, vocab),
  // a target of kIgnoreTarget (-1) marking a row to ignore. Columns from vocab on pad the
  // rows to padded_vocab (0: no padding) and are not part of the softmax. *loss (one float
  // in this implementation's memory) is the mean over the rows not ignored, 0 when all
  // are ignored; lse [rows] (every row's log-sum-exp) is saved for the backward.
  virtual absl::Status cross_entropy_forward(const void* logits, const int32_t* targets, int64_t rows, int64_t vocab,
                                             float* loss, float* lse, DType act = DType::kFloat32,
                                             int64_t padded_vocab = 0) = 0;
  // grad_logits = grad_loss * ∂loss/∂logits (written; zero on ignored rows and in the
  // padding columns).
  virtual absl::Status cross_entropy_backward(const void* logits, const int32_t* targets, const float* lse,
                                              int64_t rows, int64_t vocab, float grad_loss, void* grad_logits,
                                              DType act = DType::kFloat32, int64_t padded_vocab = 0) = 0;

  // ---- optimizer ----------------------------------------------------------------------------
  // One torch.optim.AdamW step over n parameters, step = 1 for the first: decoupled weight
  // decay (param -= lr * weight_decay * param), then the bias-corrected Adam update.
  // m and v are the moment buffers (zero before step 1), updated in place.
  // param_row_amax: the rows' amaxes of the updated param (see RowAmaxes), for the fp8 casts
  // of a weight in the next forward to take instead of reading the weight for them.
  virtual absl::Status adamw_step(const AdamWHyperparams& h, int64_t step, float* param, const float* grad, float* m,
                                  float* v, int64_t n, const RowAmaxes& param_row_amax = {}) = 0;
  // Σ x², accumulated in double: summed over every gradient buffer, the global grad norm.
  // Returns to the host (a CUDA implementation synchronises its stream).
  virtual absl::StatusOr<double> sum_of_squares(const float* x, int64_t n) = 0;
  // Σ over the buffers, in order, of each buffer's sum_of_squares (the same doubles, added
  // on the host in the same order): the global grad norm with ONE return to the host for
  // all gradient buffers instead of one per buffer. Every buffer is checked first.
  virtual absl::StatusOr<double> total_sum_of_squares(const std::vector<FloatSpan>& buffers) = 0;
  // The gradients' norm for clipping, queued like a kernel, without the return to the
  // host: total_sum_of_squares' double written to *sum_of_squares, and the factor AdamW
  // scales the gradients by written to *clip_scale: max_norm / norm where the norm exceeds
  // max_norm > 0, else 1, and NaN when the sum is not finite (the update is then skipped;
  // AdamWHyperparams::grad_scale_in). Both are one value in this implementation's memory.
  virtual absl::Status queue_grad_norm(const std::vector<FloatSpan>& buffers, double max_norm,
                                       double* sum_of_squares, float* clip_scale) = 0;
  // queue_grad_norm's factor alone, from a sum of squares already in this implementation's
  // memory: FSDP's ranks sum their shards' sums on the device first, then each derives the
  // same factor from the total. Queued like a kernel; the same arithmetic to the bit.
  virtual absl::Status queue_clip_scale(const double* sum_of_squares, double max_norm, float* clip_scale) = 0;
};

// The CUDA implementation on CUDA device `device`, queuing every kernel on `stream` (a
// cudaStream_t of that device; null for the default stream), which should be the stream
// of the Backend that shares its memory. Kernels only queue work, except where a method
// says it returns to the host (sum_of_squares). Fails with Unavailable, saying why, when
// the build has no CUDA or no GPU is present. Reductions are deterministic here too: a
// fixed decomposition and a fixed order of partial sums, never floating-point atomics.
//
// `options` picks among the attention kernels (the defaults are the fastest measured).
struct CudaModelOpsOptions {
  // Which kernels take attention with bf16 activations and head_dim 64 or 128 (every other
  // call takes the fp32 SIMT kernels).
  enum class Attention {
    kTensorCores,  // Hopper's wgmma on sm_90, mma.sync on other GPUs of compute capability 8+
    kMma,          // mma.sync on every GPU, sm_90 too
    kSimt,         // the fp32 SIMT kernels for every call
  };
  Attention attention = Attention::kTensorCores;
};
absl::StatusOr<std::unique_ptr<ModelOps>> make_cuda_model_ops(int device = 0, void* stream = nullptr,
                                                              const CudaModelOpsOptions& options = {});

// The attention kernels by name, as fp8-train and the benchmarks take them from
// FP8_CUDA_ATTENTION: "wgmma" (or empty: the default, kTensorCores), "mma" or "simt".
// InvalidArgument names a bad value.
absl::StatusOr<CudaModelOpsOptions::Attention> parse_cuda_attention_kernels(std::string_view name);

// The CPU implementation: threads from the kernels' pool, OpenBLAS for the attention
// GEMMs. Thread-safe; a process-wide instance. While attention runs its units on several
// pool threads it holds OpenBLAS to one thread, process-wide (kernels/ops/blas_threads.h
// says why): a GEMM issued meanwhile from another thread runs single-threaded.
ModelOps& cpu_model_ops();

}  // namespace fp8
