// The launch shape of kernels that sweep a [rows, items] grid of independent work items
// (a row's items being its columns, or its float4 groups): threads along x cover one row's
// items, and when a row has fewer items than a block has threads, the block's spare
// threads take further rows along y instead of idling. Rows beyond the grid's y extent
// (65535 blocks) are reached by looping.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/ops/kernel_util.cuh"

namespace fp8::cuda::model {

struct RowSweep {
  dim3 grid;
  dim3 block;
  bool ok = false;  // false when the items of one row need more than 2^31 - 1 blocks
};

inline RowSweep row_sweep(int64_t rows, int64_t items) {
  RowSweep s;
  const int64_t tx = items >= kThreads ? kThreads : ceil_div(items, 32) * 32;
  const int64_t ty = kThreads / tx;
  const int64_t gx = ceil_div(items, tx);
  if (gx > INT_MAX) return s;
  s.block = dim3(static_cast<unsigned>(tx), static_cast<unsigned>(ty));
  s.grid = dim3(static_cast<unsigned>(gx), clamp_grid(ceil_div(rows, ty), kMaxGridY));
  s.ok = true;
  return s;
}

// The row and item of this thread's first work item, and the stride to its next row.
struct SweepPos {
  int64_t row;
  int64_t row_stride;
  int64_t item;
};

__device__ __forceinline__ SweepPos sweep_pos() {
  return {static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y, static_cast<int64_t>(gridDim.y) * blockDim.y,
          static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x};
}

}  // namespace fp8::cuda::model
