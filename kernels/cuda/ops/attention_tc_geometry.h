// The tensor-core attention's geometry as its kernels (attention_mma_device.cuh) read it,
// and the launch helpers of attention_tc_kernels.cu. Internal to kernels/cuda/ops.
#pragma once

#include <cuda_runtime_api.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "cuda/cast_kernels.h"           // LaunchResult
#include "cuda/ops/attention_kernels.h"  // AttentionLaunch

namespace fp8::cuda::attention_tc {

// Rows of a block's own tile (queries, or keys for grad_kv) and of each tile it streams.
inline constexpr int kTile = 64;

// What every kernel needs to know about the call.
struct Geometry {
  int64_t n_heads;
  int64_t group;   // n_heads / n_kv_heads
  int64_t ld_q;    // elements between consecutive positions of q, out, grad_out, grad_q
  int64_t ld_kv;   // ... of k, v, grad_k, grad_v
  int64_t heads;   // batch·n_heads or batch·n_kv_heads: the grid's fastest-moving index
  int seq;
  int tiles;       // kTile-row tiles per sequence
  float scale;     // 1 / sqrt(head_dim)
};

// False when the blocks would not fit in gridDim.x or a position near seq in int.
inline bool make_geometry(const AttentionLaunch& d, int64_t heads, Geometry* g, unsigned* blocks) {
  if (d.seq > INT_MAX - 2 * kTile) return false;
  const int64_t tiles = (d.seq + kTile - 1) / kTile;
  if (tiles * heads > INT_MAX) return false;
  g->n_heads = d.n_heads;
  g->group = d.n_heads / d.n_kv_heads;
  g->ld_q = d.n_heads * d.head_dim;
  g->ld_kv = d.n_kv_heads * d.head_dim;
  g->heads = heads;
  g->seq = static_cast<int>(d.seq);
  g->tiles = static_cast<int>(tiles);
  // As the CPU and the SIMT kernels compute it: in double, rounded once.
  g->scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d.head_dim)));
  *blocks = static_cast<unsigned>(tiles * heads);
  return true;
}

inline const LaunchResult kTooLarge{cudaErrorInvalidConfiguration,
                                    "tensor-core attention grid (too many heads and tiles for one launch)"};

inline LaunchResult after_launch(const char* kernel) {
  const cudaError_t e = cudaGetLastError();
  return {e, e == cudaSuccess ? nullptr : kernel};
}

// Lets the kernel take `bytes` of dynamic shared memory, and asks for the largest shared
// memory carve-out of L1: the kernels stage their operands in shared memory themselves,
// and the driver's own choice can leave room for fewer blocks than registers allow (as ncu
// showed for grad_kv; see bench/RESULTS.md).
template <typename Kernel>
LaunchResult allow_shared_memory(Kernel* kernel, size_t bytes, const char* call) {
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  if (e == cudaSuccess) {
    e = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
  }
  return {e, e == cudaSuccess ? nullptr : call};
}

// head_dim is 64 or 128 (tensor_core_attention_applies).
template <typename Fn>
LaunchResult with_head_dim(int64_t head_dim, Fn&& fn) {
  return head_dim == 64 ? fn(std::integral_constant<int, 64>{}) : fn(std::integral_constant<int, 128>{});
}

}  // namespace fp8::cuda::attention_tc
