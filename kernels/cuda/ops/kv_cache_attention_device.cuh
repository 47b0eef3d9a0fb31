// The kernel of ModelOps::kv_cache_attention_forward: attention of new queries against a
// KV cache, the GPU side of generation. Launched by kv_cache_attention_kernels.cu; in a
// header of its own so that tests/ops/kv_cache_attention_emulation_test.cc runs this same
// source on the CPU under the CUDA emulation (tests/ops/emulation/), against the CPU op.
//
// One block per (batch, query, head): the block streams the visible keys in tiles of
// kKeyTile with an online softmax (the running max and sum rescale what came before), so
// any context length fits in a fixed amount of shared memory. A warp computes a key's
// score with its lanes over head_dim; each thread owns head_dim / kCacheThreads output
// columns and reads the value rows coalesced. The visible keys and values are read once.
//
// Deterministic: the score of a key is one fixed shuffle tree, and every thread combines
// a tile's probabilities in key order, so the same call gives the same bits.
#pragma once

#include <cmath>
#include <cstdint>

#include "cuda/ops/activation_access.cuh"
#include "cuda/ops/attention_kernels.h"
#include "cuda/ops/kernel_util.cuh"

namespace fp8::cuda::kv_cache {
// Internal linkage: each including file (the launcher's .cu, the CPU emulation test) has
// its own copy, so the emulated host versions never meet the device build's at link time.
namespace {

constexpr int kCacheThreads = 128;
constexpr int kCacheWarps = kCacheThreads / 32;
constexpr int kKeyTile = 128;
constexpr int kColumnsPerThread = static_cast<int>(kMaxAttentionHeadDim) / kCacheThreads;
static_assert(kMaxAttentionHeadDim % kCacheThreads == 0, "each thread owns whole columns");

template <typename T>
__global__ void __launch_bounds__(kCacheThreads)
    kv_cache_attention_kernel(KvCacheAttentionLaunch d, float scale, const T* __restrict__ q,
                              const T* __restrict__ k_cache, const T* __restrict__ v_cache, T* __restrict__ out) {
  __shared__ float q_row[kMaxAttentionHeadDim];
  __shared__ float p[kKeyTile];
  const int64_t unit = blockIdx.x;
  const int64_t h = unit % d.n_heads;
  const int64_t i = (unit / d.n_heads) % d.seq;
  const int64_t b = unit / d.n_heads / d.seq;
  const int64_t ld_q = d.n_heads * d.head_dim;
  const int64_t ld_kv = d.n_kv_heads * d.head_dim;
  const int64_t kv = h / (d.n_heads / d.n_kv_heads);
  const int64_t visible = d.past + i + 1;
  const T* k_head = k_cache + b * d.cache_len * ld_kv + kv * d.head_dim;
  const T* v_head = v_cache + b * d.cache_len * ld_kv + kv * d.head_dim;
  const int64_t q_offset = (b * d.seq + i) * ld_q + h * d.head_dim;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;

  for (int64_t c = tid; c < d.head_dim; c += kCacheThreads) q_row[c] = model::load_act(q + q_offset + c) * scale;
  __syncthreads();

  float running_max = -INFINITY, running_sum = 0.0f;
  float acc[kColumnsPerThread] = {};
  for (int64_t first = 0; first < visible; first += kKeyTile) {
    const int n = static_cast<int>(visible - first < kKeyTile ? visible - first : kKeyTile);
    for (int j = warp; j < n; j += kCacheWarps) {
      const T* k_row = k_head + (first + j) * ld_kv;
      float dot = 0.0f;
      for (int64_t c = lane; c < d.head_dim; c += 32) dot += q_row[c] * model::load_act(k_row + c);
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1) dot += __shfl_xor_sync(model::kFullMask, dot, offset);
      if (lane == 0) p[j] = dot;
    }
    __syncthreads();
    float tile_max = -INFINITY;
    for (int j = 0; j < n; ++j) tile_max = fmaxf(tile_max, p[j]);
    const float new_max = fmaxf(running_max, tile_max);
    const float correction = expf(running_max - new_max);  // 0 for the first tile
    __syncthreads();  // every thread has read the scores before they turn into weights
    for (int j = tid; j < n; j += kCacheThreads) p[j] = expf(p[j] - new_max);
    __syncthreads();
    float tile_sum = 0.0f;
    for (int j = 0; j < n; ++j) tile_sum += p[j];
    running_sum = running_sum * correction + tile_sum;
#pragma unroll
    for (int r = 0; r < kColumnsPerThread; ++r) {
      const int64_t c = tid + r * kCacheThreads;
      if (c >= d.head_dim) break;
      float sum = 0.0f;
      for (int j = 0; j < n; ++j) sum += p[j] * model::load_act(v_head + (first + j) * ld_kv + c);
      acc[r] = acc[r] * correction + sum;
    }
    running_max = new_max;
    __syncthreads();  // the next tile's scores overwrite p
  }
#pragma unroll
  for (int r = 0; r < kColumnsPerThread; ++r) {
    const int64_t c = tid + r * kCacheThreads;
    if (c < d.head_dim) model::store_act(out + q_offset + c, acc[r] / running_sum);
  }
}

}  // namespace
}  // namespace fp8::cuda::kv_cache
