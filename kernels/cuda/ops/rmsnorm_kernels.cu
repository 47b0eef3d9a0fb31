// RMSNorm and its backward over rows of x [rows, dim], with the CPU's arithmetic
// (kernels/ops/rmsnorm.cc): the mean square and Σ g·w·x in double, everything per element
// in float in the same order (this file is compiled with -fmad=false, so nothing fuses).
//
// A row's threads each own the groups of 4 columns t, t + kThreads, ... of it, for every
// pass over the row, so a thread only ever touches its own columns and the row's one
// reduction (block_sum) is the only cross-thread step.
//
// Backward: grad_weight sums over rows. A fixed number of row chunks (a function of rows
// alone) each run on one block, which walks its rows in order, writes grad_x and sums
// g·x·inv_rms per column into its own partial vector (in shared memory when it fits);
// a second kernel adds the partial vectors to grad_weight in chunk order.
//
// x, out, grad_out and grad_x are fp32 or bf16 (the element type T), read and written in
// the same groups of 4 either way (one 16-byte or 8-byte access where aligned), so the
// sums run in the same order for both types; weight, inv_rms, grad_weight and the
// partials are fp32.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/ops/kernel_util.cuh"
#include "cuda/ops/model_kernels.h"

namespace fp8::cuda {
namespace {

using model::kThreads;

constexpr int64_t kMaxRowBlocks = int64_t{1} << 20;  // the forward loops past this many rows
// Row chunks of the backward: enough blocks to fill an H100 several times over (each
// walks its rows one after another, a block reduction per row, so the blocks in flight
// are what keeps memory busy: 512 chunks ran at ~40% of the bandwidth on an H200), few
// enough that the partial vectors stay small next to x (2048 x dim floats; 16 MB at dim
// 2048 against x's 32 MB in bf16 at 8192 rows).
constexpr int64_t kMaxChunks = 2048;
// Partial vectors up to this size live in shared memory (below the 48 KiB that needs no
// opt-in, leaving room for several blocks per SM); longer ones accumulate in scratch.
constexpr int64_t kMaxSharedPartialFloats = 8192;

struct ChunkPlan {
  int64_t rows_per_chunk;
  int64_t chunks;
};

ChunkPlan chunk_plan(int64_t rows) {
  const int64_t per = model::ceil_div(rows, kMaxChunks);
  return {per, model::ceil_div(rows, per)};
}

// row_amax (may be null): the amax of each output row as stored, i.e. after rounding to
// T, for a following fp8 cast (QuantizeArgs::row_amax) to skip its own read of `out`.
template <typename T, bool kVec>
__global__ void __launch_bounds__(kThreads)
    rmsnorm_forward_kernel(const T* __restrict__ x, const float* __restrict__ weight, int64_t rows, int64_t dim,
                           float eps, T* __restrict__ out, float* __restrict__ inv_rms, float* __restrict__ row_amax) {
  const int64_t groups = model::ceil_div(dim, 4);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * dim;
    double sum_squares = 0.0;
    for (int64_t g = threadIdx.x; g < groups; g += kThreads) {
      float v[4];
      model::load_group<kVec>(xr, g, dim, 0.0f, v);
#pragma unroll
      for (int k = 0; k < 4; ++k) sum_squares += static_cast<double>(v[k]) * static_cast<double>(v[k]);
    }
    sum_squares = model::block_sum(sum_squares);
    const double mean_square = sum_squares / static_cast<double>(dim);
    const float inv = static_cast<float>(1.0 / sqrt(mean_square + static_cast<double>(eps)));
    if (threadIdx.x == 0) inv_rms[r] = inv;
    T* yr = out + r * dim;
    uint32_t amax_bits = 0;
    for (int64_t g = threadIdx.x; g < groups; g += kThreads) {
      float v[4], w[4], y[4];
      model::load_group<kVec>(xr, g, dim, 0.0f, v);
      model::load_group<kVec>(weight, g, dim, 0.0f, w);
#pragma unroll
      for (int k = 0; k < 4; ++k) y[k] = v[k] * inv * w[k];
      model::store_group<kVec>(yr, g, dim, y);
      if (row_amax != nullptr) amax_bits = model::group_amax_bits<T>(amax_bits, g, dim, y);
    }
    if (row_amax != nullptr) {  // the same for the whole grid: every thread reaches the barrier or none
      amax_bits = model::block_max_bits(amax_bits);
      if (threadIdx.x == 0) row_amax[r] = __uint_as_float(amax_bits);
    }
  }
}

// One block per row chunk. `partial` is [chunks, dim]; the block's own row of it is where
// its column sums end, and where they accumulate unless kSharedPartial.
template <typename T, bool kVec, bool kSharedPartial>
__global__ void __launch_bounds__(kThreads)
    rmsnorm_backward_kernel(const T* __restrict__ x, const float* __restrict__ weight,
                            const float* __restrict__ inv_rms, const T* __restrict__ grad_out, int64_t rows,
                            int64_t dim, int64_t rows_per_chunk, T* __restrict__ grad_x, bool accumulate_grad_x,
                            float* __restrict__ grad_x_row_amax, float* __restrict__ partial) {
  extern __shared__ float shared_partial[];
  const int64_t groups = model::ceil_div(dim, 4);
  const int64_t first = static_cast<int64_t>(blockIdx.x) * rows_per_chunk;
  const int64_t last = first + rows_per_chunk < rows ? first + rows_per_chunk : rows;
  float* const own_partial = partial + static_cast<int64_t>(blockIdx.x) * dim;
  float* const acc = kSharedPartial ? shared_partial : own_partial;
  for (int64_t g = threadIdx.x; g < groups; g += kThreads) {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      if (4 * g + k < dim) acc[4 * g + k] = 0.0f;
    }
  }
  for (int64_t r = first; r < last; ++r) {
    const T* xr = x + r * dim;
    const T* gr = grad_out + r * dim;
    const float inv = inv_rms[r];
    double gwx = 0.0;
    for (int64_t g = threadIdx.x; g < groups; g += kThreads) {
      float v[4], go[4], w[4];
      model::load_group<kVec>(xr, g, dim, 0.0f, v);
      model::load_group<kVec>(gr, g, dim, 0.0f, go);
      model::load_group<kVec>(weight, g, dim, 0.0f, w);
#pragma unroll
      for (int k = 0; k < 4; ++k) gwx += static_cast<double>(go[k] * w[k]) * static_cast<double>(v[k]);
    }
    gwx = model::block_sum(gwx);
    // The CPU's expression, operand for operand (inv promoted to double).
    const float coeff = static_cast<float>(gwx * inv * inv * inv / static_cast<double>(dim));
    T* dxr = grad_x + r * dim;
    uint32_t amax_bits = 0;
    for (int64_t g = threadIdx.x; g < groups; g += kThreads) {
      float v[4], go[4], w[4], dx[4];
      model::load_group<kVec>(xr, g, dim, 0.0f, v);
      model::load_group<kVec>(gr, g, dim, 0.0f, go);
      model::load_group<kVec>(weight, g, dim, 0.0f, w);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        dx[k] = inv * (go[k] * w[k]) - coeff * v[k];
        if (4 * g + k < dim) acc[4 * g + k] += go[k] * v[k] * inv;
      }
      if (accumulate_grad_x) {  // the same for the whole grid: no divergence
        float held[4];
        model::load_group<kVec>(static_cast<const T*>(dxr), g, dim, 0.0f, held);
#pragma unroll
        for (int k = 0; k < 4; ++k) dx[k] = held[k] + dx[k];
      }
      model::store_group<kVec>(dxr, g, dim, dx);
      amax_bits = model::group_amax_bits<T>(amax_bits, g, dim, dx);
    }
    if (grad_x_row_amax != nullptr) {  // the same for the whole grid
      amax_bits = model::block_max_bits(amax_bits);
      if (threadIdx.x == 0) grad_x_row_amax[r] = __uint_as_float(amax_bits);
    }
  }
  if constexpr (kSharedPartial) {
    for (int64_t g = threadIdx.x; g < groups; g += kThreads) {
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        if (4 * g + k < dim) own_partial[4 * g + k] = acc[4 * g + k];
      }
    }
  }
}

// grad_weight[j] += Σ_chunks partial[c, j]. A block is 32 columns x 8 lanes of chunks:
// lane y sums chunks y, y + 8, ... in order, then the column's 8 lane sums are added in
// lane order onto grad_weight, all in double, rounded once.
constexpr int kColumnsPerBlock = 32;
constexpr int kChunkLanes = kThreads / kColumnsPerBlock;

__global__ void __launch_bounds__(kThreads)
    rmsnorm_weight_grad_kernel(const float* __restrict__ partial, int64_t chunks, int64_t dim,
                               float* __restrict__ grad_weight) {
  __shared__ double lane_sum[kChunkLanes][kColumnsPerBlock];
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kColumnsPerBlock + threadIdx.x;
  double sum = 0.0;
  if (j < dim) {
    for (int64_t c = threadIdx.y; c < chunks; c += kChunkLanes) sum += static_cast<double>(partial[c * dim + j]);
  }
  lane_sum[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && j < dim) {
    double total = static_cast<double>(grad_weight[j]);
#pragma unroll
    for (int y = 0; y < kChunkLanes; ++y) total += lane_sum[y][threadIdx.x];
    grad_weight[j] = static_cast<float>(total);
  }
}

template <typename T, bool kVec>
void queue_backward(bool shared_partial, const T* x, const float* weight, const float* inv_rms, const T* grad_out,
                    int64_t rows, int64_t dim, const ChunkPlan& plan, T* grad_x, bool accumulate_grad_x,
                    float* grad_x_row_amax, float* partial, cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>(plan.chunks);
  if (shared_partial) {
    const size_t shared_bytes = static_cast<size_t>(dim) * sizeof(float);
    rmsnorm_backward_kernel<T, kVec, true><<<blocks, kThreads, shared_bytes, stream>>>(
        x, weight, inv_rms, grad_out, rows, dim, plan.rows_per_chunk, grad_x, accumulate_grad_x, grad_x_row_amax,
        partial);
  } else {
    rmsnorm_backward_kernel<T, kVec, false><<<blocks, kThreads, 0, stream>>>(
        x, weight, inv_rms, grad_out, rows, dim, plan.rows_per_chunk, grad_x, accumulate_grad_x, grad_x_row_amax,
        partial);
  }
}

}  // namespace

LaunchResult launch_rmsnorm_forward(const void* x, const float* weight, int64_t rows, int64_t dim, float eps, void* out,
                                    float* inv_rms, float* row_amax, HpType act, cudaStream_t stream) {
  if (rows <= 0 || dim <= 0) return {};
  const unsigned blocks = model::clamp_grid(rows, kMaxRowBlocks);
  return model::with_act(act, [&](auto tag) {
    using T = decltype(tag);
    const T* xt = static_cast<const T*>(x);
    T* yt = static_cast<T*>(out);
    const bool vec =
        dim % 4 == 0 && model::aligned_for<T, 4>(xt) && model::aligned16(weight) && model::aligned_for<T, 4>(yt);
    if (vec) {
      rmsnorm_forward_kernel<T, true>
          <<<blocks, kThreads, 0, stream>>>(xt, weight, rows, dim, eps, yt, inv_rms, row_amax);
    } else {
      rmsnorm_forward_kernel<T, false>
          <<<blocks, kThreads, 0, stream>>>(xt, weight, rows, dim, eps, yt, inv_rms, row_amax);
    }
    return model::after_launch("rmsnorm forward kernel");
  });
}

size_t rmsnorm_backward_scratch_bytes(int64_t rows, int64_t dim) {
  model::ScratchCarver carve(nullptr);
  carve.take<float>(static_cast<size_t>(chunk_plan(rows).chunks * dim));
  return carve.used();
}

LaunchResult launch_rmsnorm_backward(const void* x, const float* weight, const float* inv_rms, const void* grad_out,
                                     int64_t rows, int64_t dim, void* grad_x, bool accumulate_grad_x,
                                     float* grad_x_row_amax, float* grad_weight, void* scratch, HpType act,
                                     cudaStream_t stream) {
  if (rows <= 0 || dim <= 0) return {};
  const int64_t column_blocks = model::ceil_div(dim, kColumnsPerBlock);
  if (column_blocks > INT_MAX) return model::kTooLarge;
  const ChunkPlan plan = chunk_plan(rows);
  model::ScratchCarver carve(scratch);
  float* partial = carve.take<float>(static_cast<size_t>(plan.chunks * dim));
  const bool shared_partial = dim <= kMaxSharedPartialFloats;
  const LaunchResult queued = model::with_act(act, [&](auto tag) {
    using T = decltype(tag);
    const T* xt = static_cast<const T*>(x);
    const T* gt = static_cast<const T*>(grad_out);
    T* dxt = static_cast<T*>(grad_x);
    const bool vec = dim % 4 == 0 && model::aligned_for<T, 4>(xt) && model::aligned16(weight) &&
                     model::aligned_for<T, 4>(gt) && model::aligned_for<T, 4>(dxt);
    if (vec) {
      queue_backward<T, true>(shared_partial, xt, weight, inv_rms, gt, rows, dim, plan, dxt, accumulate_grad_x,
                              grad_x_row_amax, partial, stream);
    } else {
      queue_backward<T, false>(shared_partial, xt, weight, inv_rms, gt, rows, dim, plan, dxt, accumulate_grad_x,
                               grad_x_row_amax, partial, stream);
    }
    return model::after_launch("rmsnorm backward kernel");
  });
  if (!queued.ok()) return queued;
  rmsnorm_weight_grad_kernel<<<static_cast<unsigned>(column_blocks), dim3(kColumnsPerBlock, kChunkLanes), 0, stream>>>(
      partial, plan.chunks, dim, grad_weight);
  return model::after_launch("rmsnorm weight gradient kernel");
}

}  // namespace fp8::cuda
