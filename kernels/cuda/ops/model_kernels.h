// Host entry points for the CUDA model-op kernels: the GPU side of fp8::ModelOps
// (fp8/model_ops.h) except attention, whose launchers are in attention_kernels.h.
//
// Plain C++ (no absl, no fp8.h) so that host .cc files queue these without nvcc and nvcc
// never parses absl. Every launcher only enqueues work on `stream` and assumes its
// arguments were validated by the caller (ops::validate_*). Each returns the first failed
// CUDA call, named, or {cudaSuccess, nullptr}. Layouts and semantics are model_ops.h's;
// per-element arithmetic is ops/model_arith.h's, the functions the CPU runs.
//
// Values in device memory cannot be validated before launch: a token id outside
// [0, vocab) gives a zero row forward and is skipped backward; a target outside
// [0, vocab) counts as ignored. Nothing is ever read or written out of bounds for them.
//
// Activations (every `void*` / `const void*` below) are of element type `act`: fp32, or
// bf16 as raw bits (HpType, cast_kernels.h, standing for fp8::DType, which nvcc must not
// see). Parameters, their gradients, inv_rms, lse and the loss are fp32 whatever `act`.
// Kernels load bf16 widened to float and round each stored bf16 once, to nearest even
// (arith.h's float_to_bf16, as the CPU), and compute in fp32 in between: the CPU's bf16
// path (fp32 kernels on widened copies) is what they match.
//
// Deterministic: no floating-point atomics. Every reduction has a decomposition fixed by
// the shape alone and combines partial results in a fixed order, so the same call gives
// the same bits on every run (and whatever the pointers' alignment).
//
// `scratch` arguments are device memory of at least the matching *_scratch_bytes, 256-byte
// aligned, not used by anything else until the launched work completes (stream order).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "cuda/cast_kernels.h"  // LaunchResult, HpType
#include "ops/model_arith.h"    // AdamWCoefficients

namespace fp8::cuda {

// ---- embedding -------------------------------------------------------------------------------

LaunchResult launch_embedding_forward(const int32_t* tokens, int64_t n, const float* table, int64_t vocab, int64_t dim,
                                      void* out, HpType act, cudaStream_t stream);

// Token positions travel through the sort as 32-bit values.
inline constexpr int64_t kMaxEmbeddingBackwardTokens = 0xffffffffLL;

// The scratch of launch_embedding_backward (sort keys and values, CUB's temporary storage),
// n <= kMaxEmbeddingBackwardTokens. Returns CUB's error if it cannot size its sort.
LaunchResult embedding_backward_scratch_bytes(int64_t n, int64_t vocab, size_t* bytes);

// grad_table[tokens[i]] += grad_out[i] bit-identically to the CPU: (token, position) pairs
// are stably radix-sorted by token, then each run of one token adds its rows into the
// table row in increasing position order, one thread per column (bf16 rows widened
// first, as the CPU adds them).
LaunchResult launch_embedding_backward(const int32_t* tokens, int64_t n, const void* grad_out, int64_t vocab,
                                       int64_t dim, float* grad_table, void* scratch, size_t scratch_bytes, HpType act,
                                       cudaStream_t stream);

// ---- RMSNorm ---------------------------------------------------------------------------------

// row_amax (may be null): max |out[r, :]| per row, as stored.
LaunchResult launch_rmsnorm_forward(const void* x, const float* weight, int64_t rows, int64_t dim, float eps, void* out,
                                    float* inv_rms, float* row_amax, HpType act, cudaStream_t stream);

size_t rmsnorm_backward_scratch_bytes(int64_t rows, int64_t dim);

// grad_x written (added to, with accumulate_grad_x), and grad_x_row_amax[r] (may be null)
// = max |grad_x[r, :]| as stored; grad_weight += Σ_rows grad_out * x * inv_rms through
// per-row-chunk partial vectors in scratch, added up in chunk order.
LaunchResult launch_rmsnorm_backward(const void* x, const float* weight, const float* inv_rms, const void* grad_out,
                                     int64_t rows, int64_t dim, void* grad_x, bool accumulate_grad_x,
                                     float* grad_x_row_amax, float* grad_weight, void* scratch, HpType act,
                                     cudaStream_t stream);

// ---- rotary position embedding ---------------------------------------------------------------

struct RopeDims {
  int64_t batch = 0;
  int64_t seq = 0;
  int64_t heads = 0;
  int64_t head_dim = 0;
};

// out = rotate(in) (or its inverse) with the tables cos, sin [seq, head_dim / 2] in device
// memory (ops::RopeTable's layout and values). out may equal in. row_amax (may be null):
// [batch · seq], each row's amax of out as stored (a block a row then).
LaunchResult launch_rope(const RopeDims& d, const float* cos, const float* sin, bool inverse, const void* in, void* out,
                         float* row_amax, HpType act, cudaStream_t stream);

// ---- elementwise -------------------------------------------------------------------------------
// n elements each; outputs may equal inputs where model_ops.h allows it (add, accumulate,
// scale, the AdamW state), since each element is read before it is written. scale and
// AdamW work on fp32 parameters and gradients only.

LaunchResult launch_add(const void* a, const void* b, int64_t n, void* out, HpType act, cudaStream_t stream);
// y = y + x, rounded once into y's type: in bf16, y = bf16(float(y) + float(x)).
LaunchResult launch_accumulate(const void* x, int64_t n, void* y, HpType act, cudaStream_t stream);
LaunchResult launch_swiglu_forward(const void* gate, const void* up, int64_t n, void* out, HpType act,
                                   cudaStream_t stream);
// row_amax[r] = max |x[r, :]| for x [rows, cols] of the activation type, at any alignment.
LaunchResult launch_row_amax(const void* x, int64_t rows, int64_t cols, float* row_amax, HpType act,
                             cudaStream_t stream);
// The same over [rows, cols], also writing row_amax[r] = max |out[r, :]| as stored.
LaunchResult launch_swiglu_forward_rows(const void* gate, const void* up, int64_t rows, int64_t cols, void* out,
                                        float* row_amax, HpType act, cudaStream_t stream);
LaunchResult launch_swiglu_backward(const void* gate, const void* up, const void* grad_out, int64_t n, void* grad_gate,
                                    void* grad_up, HpType act, cudaStream_t stream);
// The same over [rows, cols], also writing grad_gate_row_amax[r] = max |grad_gate[r, :]| and
// grad_up_row_amax[r] = max |grad_up[r, :]| as stored (either may be null).
LaunchResult launch_swiglu_backward_rows(const void* gate, const void* up, const void* grad_out, int64_t rows,
                                         int64_t cols, void* grad_gate, void* grad_up, float* grad_gate_row_amax,
                                         float* grad_up_row_amax, HpType act, cudaStream_t stream);
// grad_scale_in (device memory, may be null): read instead of c.grad_scale, NaN skipping
// the update (AdamWHyperparams::grad_scale_in).
LaunchResult launch_adamw(const ops::AdamWCoefficients& c, const float* grad_scale_in, float* param, const float* grad,
                          float* m, float* v, int64_t n, cudaStream_t stream);
// The same over [rows, cols], also writing param_row_amax[r] = max |param[r, :]| after the
// update.
LaunchResult launch_adamw_rows(const ops::AdamWCoefficients& c, const float* grad_scale_in, float* param,
                               const float* grad, float* m, float* v, int64_t rows, int64_t cols,
                               float* param_row_amax, cudaStream_t stream);

// ---- reductions ---------------------------------------------------------------------------------

size_t sum_of_squares_scratch_bytes(int64_t n);

// *result (device memory) = Σ x² accumulated in double: per-block partials, then one
// block adds them in block order.
LaunchResult launch_sum_of_squares(const float* x, int64_t n, double* result, void* scratch, cudaStream_t stream);

// ModelOps::queue_grad_norm: each buffer's sum, the double launch_sum_of_squares gives
// (two launches per 64 buffers instead of two per buffer), added in order into
// *sum_of_squares, and the clipping factor into *clip_scale (device memory),
// with no return to the host. scratch: grad_norm_scratch_bytes() of the same buffers.
size_t grad_norm_scratch_bytes(const int64_t* ns, int count);
LaunchResult launch_grad_norm(const float* const* xs, const int64_t* ns, int count, double max_norm,
                              double* sum_of_squares, float* clip_scale, void* scratch, cudaStream_t stream);
// ModelOps::queue_clip_scale: *clip_scale from *sum_of_squares, one thread.
LaunchResult launch_clip_scale(const double* sum_of_squares, double max_norm, float* clip_scale,
                               cudaStream_t stream);

// ---- cross-entropy ---------------------------------------------------------------------------------

size_t cross_entropy_forward_scratch_bytes(int64_t rows);

// Rows of logits (and grad_logits) are `ld` elements apart, their first `vocab` the
// vocabulary's; the rest is padding outside the softmax.
//
// lse[r] = log Σ exp(logits[r]) (max subtracted, summed in double); *loss (device memory)
// = the mean of lse[r] - logits[r, target_r] over the counted rows, 0 if none.
LaunchResult launch_cross_entropy_forward(const void* logits, const int32_t* targets, int64_t rows, int64_t vocab,
                                          int64_t ld, float* loss, float* lse, void* scratch, HpType act,
                                          cudaStream_t stream);

size_t cross_entropy_backward_scratch_bytes();

// grad_logits = grad_loss / counted * (softmax - onehot(target)), zero rows where ignored
// and zero padding. `counted` is counted on the device, never read back.
LaunchResult launch_cross_entropy_backward(const void* logits, const int32_t* targets, const float* lse, int64_t rows,
                                           int64_t vocab, int64_t ld, float grad_loss, void* grad_logits,
                                           void* scratch, HpType act, cudaStream_t stream);

// Whether this build's model-op kernel image runs on the current device: cudaSuccess or the
// runtime's reason.
cudaError_t probe_model_kernel_image();

}  // namespace fp8::cuda
