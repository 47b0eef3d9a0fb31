// Host entry points for the CUDA causal self-attention kernels (grouped-query attention),
// the GPU side of ModelOps::attention_forward / attention_backward (fp8/model_ops.h).
//
// Plain C++ (no absl, no fp8.h) so that host .cc files queue these without nvcc and nvcc
// never parses absl. Every launcher only enqueues work on `stream` and assumes its
// arguments were validated by the caller (ops::validate_attention_*), including
// head_dim <= kMaxAttentionHeadDim. Each returns the first failed CUDA call, named.
//
// Layouts (as in model_ops.h): q, out, grad_out, grad_q [batch, seq, n_heads, head_dim];
// k, v, grad_k, grad_v [batch, seq, n_kv_heads, head_dim]; lse [batch, n_heads, seq].
// Query head h reads kv head h / (n_heads / n_kv_heads). Any head_dim up to
// kMaxAttentionHeadDim and any seq work. Pointers need only their element's alignment:
// rows move 4 columns per access (16 bytes of fp32, 8 of bf16) when head_dim % 4 == 0 and
// every activation pointer of the call allows it, element by element otherwise.
//
// Activations (every `void*` / `const void*`) are of element type `act`: fp32, or bf16 as
// raw bits (HpType, standing for fp8::DType); lse and the scratch are fp32. bf16 is widened
// on load into the fp32 tiles and each result rounded once on store (arith.h's
// float_to_bf16), so the arithmetic is the fp32 kernels' whatever `act`.
//
// With bf16 activations, head_dim 64 or 128 and 16-byte aligned pointers the launchers
// run the tensor-core kernels instead (attention_tc_kernels.h: bf16 products with fp32
// accumulation, FlashAttention-2's precision); everything below describes the SIMT kernels,
// which take every other call (and all of them under AttentionKernels::kSimt).
//
// Flash-attention style: the forward keeps only each row's log-sum-exp; the backward
// recomputes the probabilities tile by tile. Deterministic: no floating-point atomics;
// grad_k / grad_v are summed over the query heads of a group and over query tiles in a
// fixed order by the block that owns the key tile, grad_q by the block that owns the
// query tile.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/cast_kernels.h"  // LaunchResult, HpType

namespace fp8::cuda {

// The largest head_dim the kernels take (the model ops reject larger ones up front).
inline constexpr int64_t kMaxAttentionHeadDim = 256;

// Which kernels take the calls the tensor cores can run (CudaModelOpsOptions::Attention).
enum class AttentionKernels { kTensorCores, kMma, kSimt };

// One attention call: its dimensions and the kernels chosen for it.
struct AttentionLaunch {
  int64_t batch = 0;
  int64_t seq = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  AttentionKernels kernels = AttentionKernels::kTensorCores;
};

// out = softmax(q·kᵀ / sqrt(head_dim) + causal mask)·v; lse = each score row's log-sum-exp.
// row_amax (may be null): [batch · seq], each row's amax of out as stored, reduced by the
// tensor-core kernel as it stores out, or by an amax pass after the SIMT kernels.
LaunchResult launch_attention_forward(const AttentionLaunch& d, const void* q, const void* k, const void* v, void* out,
                                      float* lse, float* row_amax, HpType act, cudaStream_t stream);

// Bytes of device scratch attention_backward needs for these dimensions: the per-row
// delta_i = grad_out_i · out_i, [batch, n_heads, seq] floats, rounded up to 256 bytes.
size_t attention_backward_scratch_bytes(const AttentionLaunch& d);

// grad_q, grad_k, grad_v are written (=), never accumulated. `scratch` holds at least
// attention_backward_scratch_bytes(d) bytes, 256-byte aligned.
LaunchResult launch_attention_backward(const AttentionLaunch& d, const void* q, const void* k, const void* v,
                                       const void* out, const float* lse, const void* grad_out, void* grad_q,
                                       void* grad_k, void* grad_v, void* scratch, HpType act, cudaStream_t stream);

// Attention of new queries against a KV cache (ModelOps::kv_cache_attention_forward and
// KvCacheAttentionShape: q, out [batch, seq, n_heads, head_dim] at positions
// [past, past + seq); k_cache, v_cache [batch, cache_len, n_kv_heads, head_dim]). The SIMT
// kernel of kv_cache_attention_kernels.cu, whatever the activations' type; forward only.
struct KvCacheAttentionLaunch {
  int64_t batch = 0;
  int64_t seq = 0;
  int64_t past = 0;
  int64_t cache_len = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
};
LaunchResult launch_kv_cache_attention_forward(const KvCacheAttentionLaunch& d, const void* q, const void* k_cache,
                                               const void* v_cache, void* out, HpType act, cudaStream_t stream);

}  // namespace fp8::cuda
