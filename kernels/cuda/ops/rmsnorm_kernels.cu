// The RMSNorm launchers; the kernels, and how they split the work, are rmsnorm_device.cuh's.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/ops/kernel_util.cuh"
#include "cuda/ops/rmsnorm_device.cuh"
#include "cuda/ops/model_kernels.h"

namespace fp8::cuda {
namespace {

using model::kThreads;
using namespace rmsnorm_device;

constexpr int64_t kMaxRowBlocks = int64_t{1} << 20;  // the forward loops past this many rows
// Row chunks of the backward: enough blocks to keep memory busy (each walks its rows one
// after another, a block reduction per row; 512 chunks left much of the bandwidth idle),
// few enough that the partial vectors stay small next to x (2048 x dim floats; 16 MB at
// dim 2048 against x's 32 MB in bf16 at 8192 rows).
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
    const bool vec = dim % model::kPer16Bytes<T> == 0 && model::aligned16(xt) && model::aligned16(weight) &&
                     model::aligned16(yt);
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
    const bool vec = dim % model::kPer16Bytes<T> == 0 && model::aligned16(xt) && model::aligned16(weight) &&
                     model::aligned16(gt) && model::aligned16(dxt);
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
