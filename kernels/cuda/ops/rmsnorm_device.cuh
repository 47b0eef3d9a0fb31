// The RMSNorm kernels (rmsnorm_kernels.cu launches them), in a header of their own so that
// tests/ops/rmsnorm_emulation_test.cc runs them on the CPU under the CUDA emulation
// (tests/ops/emulation/). RMSNorm and its backward over rows of x [rows, dim], with the
// CPU's arithmetic (kernels/ops/rmsnorm.cc): the mean square and Σ g·w·x in double,
// everything per element in float in the same order (the .cu is compiled with
// -fmad=false, so nothing fuses).
//
// A row's threads each own the groups of 16 bytes of activations (4 fp32 or 8 bf16:
// one access each when kVec) g = t, t + kThreads, ... of it, for every pass over the row,
// so a thread only ever touches its own columns and the row's one reduction (block_sum) is
// the only cross-thread step. The double sums' order differs from the CPU's sequential
// one (and between fp32 and bf16), which the float results absorb but for an occasional
// last bit.
//
// Backward: grad_weight sums over rows. A fixed number of row chunks (a function of rows
// alone, rmsnorm_kernels.cu) each run on one block, which walks its rows in order, writes
// grad_x and sums g·x·inv_rms per column into its own partial vector (in shared memory
// when it fits); a second kernel (rmsnorm_kernels.cu's) adds the partial vectors to
// grad_weight in chunk order.
//
// x, out, grad_out and grad_x are fp32 or bf16 (the element type T); weight, inv_rms,
// grad_weight and the partials are fp32.
#pragma once

#include <cmath>
#include <cstdint>

#include "cuda/ops/kernel_util.cuh"

namespace fp8::cuda::rmsnorm_device {
// Internal linkage: each including file (the launchers' .cu, the CPU emulation test) has
// its own copy, so the emulated host versions never meet the device build's at link time.
namespace {

using model::kThreads;

// The block's dynamic shared memory: the backward's partial vector when it fits.
#if !defined(FP8_CUDA_EMULATION)
__device__ __forceinline__ unsigned char* dynamic_shared_bytes() {
  extern __shared__ __align__(16) unsigned char rmsnorm_smem[];
  return rmsnorm_smem;
}
#else
__device__ __forceinline__ unsigned char* dynamic_shared_bytes() { return fp8_emulated_shared_bytes(); }
#endif

// row_amax (may be null): the amax of each output row as stored, i.e. after rounding to
// T, for a following fp8 cast (QuantizeArgs::row_amax) to skip its own read of `out`.
template <typename T, bool kVec>
__global__ void __launch_bounds__(kThreads)
    rmsnorm_forward_kernel(const T* __restrict__ x, const float* __restrict__ weight, int64_t rows, int64_t dim,
                           float eps, T* __restrict__ out, float* __restrict__ inv_rms, float* __restrict__ row_amax) {
  constexpr int kG = model::kPer16Bytes<T>;
  const int64_t groups = model::ceil_div(dim, kG);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * dim;
    double sum_squares = 0.0;
    for (int64_t g = threadIdx.x; g < groups; g += kThreads) {
      float v[kG];
      model::load_group16<kVec>(xr, g, dim, 0.0f, v);
#pragma unroll
      for (int k = 0; k < kG; ++k) sum_squares += static_cast<double>(v[k]) * static_cast<double>(v[k]);
    }
    sum_squares = model::block_sum(sum_squares);
    const double mean_square = sum_squares / static_cast<double>(dim);
    const float inv = static_cast<float>(1.0 / sqrt(mean_square + static_cast<double>(eps)));
    if (threadIdx.x == 0) inv_rms[r] = inv;
    T* yr = out + r * dim;
    uint32_t amax_bits = 0;
    for (int64_t g = threadIdx.x; g < groups; g += kThreads) {
      float v[kG], w[kG], y[kG];
      model::load_group16<kVec>(xr, g, dim, 0.0f, v);
      model::load_floats<kVec>(weight, g, dim, 0.0f, w);
#pragma unroll
      for (int k = 0; k < kG; ++k) y[k] = v[k] * inv * w[k];
      model::store_group16<kVec>(yr, g, dim, y);
      if (row_amax != nullptr) amax_bits = model::group16_amax_bits<T>(amax_bits, g, dim, y);
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
  constexpr int kG = model::kPer16Bytes<T>;
  float* const shared_partial = reinterpret_cast<float*>(dynamic_shared_bytes());
  const int64_t groups = model::ceil_div(dim, kG);
  const int64_t first = static_cast<int64_t>(blockIdx.x) * rows_per_chunk;
  const int64_t last = first + rows_per_chunk < rows ? first + rows_per_chunk : rows;
  float* const own_partial = partial + static_cast<int64_t>(blockIdx.x) * dim;
  float* const acc = kSharedPartial ? shared_partial : own_partial;
  for (int64_t g = threadIdx.x; g < groups; g += kThreads) {
#pragma unroll
    for (int k = 0; k < kG; ++k) {
      if (kG * g + k < dim) acc[kG * g + k] = 0.0f;
    }
  }
  for (int64_t r = first; r < last; ++r) {
    const T* xr = x + r * dim;
    const T* gr = grad_out + r * dim;
    const float inv = inv_rms[r];
    double gwx = 0.0;
    for (int64_t g = threadIdx.x; g < groups; g += kThreads) {
      float v[kG], go[kG], w[kG];
      model::load_group16<kVec>(xr, g, dim, 0.0f, v);
      model::load_group16<kVec>(gr, g, dim, 0.0f, go);
      model::load_floats<kVec>(weight, g, dim, 0.0f, w);
#pragma unroll
      for (int k = 0; k < kG; ++k) gwx += static_cast<double>(go[k] * w[k]) * static_cast<double>(v[k]);
    }
    gwx = model::block_sum(gwx);
    // The CPU's expression, operand for operand (inv promoted to double).
    const float coeff = static_cast<float>(gwx * inv * inv * inv / static_cast<double>(dim));
    T* dxr = grad_x + r * dim;
    uint32_t amax_bits = 0;
    for (int64_t g = threadIdx.x; g < groups; g += kThreads) {
      float v[kG], go[kG], w[kG], dx[kG];
      model::load_group16<kVec>(xr, g, dim, 0.0f, v);
      model::load_group16<kVec>(gr, g, dim, 0.0f, go);
      model::load_floats<kVec>(weight, g, dim, 0.0f, w);
#pragma unroll
      for (int k = 0; k < kG; ++k) {
        dx[k] = inv * (go[k] * w[k]) - coeff * v[k];
        if (kG * g + k < dim) acc[kG * g + k] += go[k] * v[k] * inv;
      }
      if (accumulate_grad_x) {  // the same for the whole grid: no divergence
        float held[kG];
        model::load_group16<kVec>(static_cast<const T*>(dxr), g, dim, 0.0f, held);
#pragma unroll
        for (int k = 0; k < kG; ++k) dx[k] = held[k] + dx[k];
      }
      model::store_group16<kVec>(dxr, g, dim, dx);
      amax_bits = model::group16_amax_bits<T>(amax_bits, g, dim, dx);
    }
    if (grad_x_row_amax != nullptr) {  // the same for the whole grid
      amax_bits = model::block_max_bits(amax_bits);
      if (threadIdx.x == 0) grad_x_row_amax[r] = __uint_as_float(amax_bits);
    }
  }
  if constexpr (kSharedPartial) {
    for (int64_t g = threadIdx.x; g < groups; g += kThreads) {
#pragma unroll
      for (int k = 0; k < kG; ++k) {
        if (kG * g + k < dim) own_partial[kG * g + k] = acc[kG * g + k];
      }
    }
  }
}

}  // namespace
}  // namespace fp8::cuda::rmsnorm_device
