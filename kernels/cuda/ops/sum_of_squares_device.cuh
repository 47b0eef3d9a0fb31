// Σ x² in double, deterministically: a fixed number of blocks (a function of n alone) each
// write one partial sum, then one block adds the partials in block order. Every thread
// sums whole groups of 4 elements, group t, t + stride, ..., so the order of additions is
// the same whether the vector path (x 16-byte aligned) or the scalar one loads them.
//
// The same sums for many buffers at once (the grad norm's, one per gradient: a few hundred
// a step) come from two launches per SquaresTable of buffers instead of two per buffer:
// each block of many_partial_sums_kernel finds its buffer and does what block b of that
// buffer's own launch would, and block i of many_combine_kernel what buffer i's combine
// would. So every buffer's sum is the same double either way.
//
// Device code for sum_of_squares_kernels.cu, in a header of its own so that the CPU
// emulation (tests/ops/sum_of_squares_emulation_test.cc) runs the same source.
#pragma once

#include <cstdint>

#include "cuda/ops/kernel_util.cuh"
#include "ops/model_arith.h"

namespace fp8::cuda::squares {

using model::kThreads;

// Partials per buffer: enough blocks to keep every SM of a large GPU streaming, few enough that
// the final block's pass over them is short.
constexpr int64_t kMaxPartials = 1024;

__host__ __device__ inline int64_t partial_count(int64_t n) {
  const int64_t blocks = model::ceil_div(model::ceil_div(n, 4), kThreads);
  return blocks < kMaxPartials ? blocks : kMaxPartials;
}

// Block b of `blocks` over x[0, n): its threads' groups of 4, summed over the block.
template <bool kVec>
__device__ __forceinline__ double block_partial(const float* __restrict__ x, int64_t n, int64_t b, int64_t blocks) {
  const int64_t groups = model::ceil_div(n, 4);
  const int64_t stride = blocks * kThreads;
  double sum = 0.0;
  for (int64_t g = b * kThreads + threadIdx.x; g < groups; g += stride) {
    float v[4];
    // A vector load needs a whole group; the last one may be partial when n % 4 != 0.
    if (kVec && 4 * g + 4 <= n) {
      model::load_group<true>(x, g, n, 0.0f, v);
    } else {
      model::load_group<false>(x, g, n, 0.0f, v);
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) sum += static_cast<double>(v[k]) * static_cast<double>(v[k]);
  }
  return model::block_sum(sum);
}

// The sum of partial[0, count), one block.
__device__ __forceinline__ double block_combine(const double* __restrict__ partial, int64_t count) {
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += kThreads) sum += partial[i];
  return model::block_sum(sum);
}

template <bool kVec>
__global__ void __launch_bounds__(kThreads)
    partial_sum_of_squares_kernel(const float* __restrict__ x, int64_t n, double* __restrict__ partial) {
  const double sum = block_partial<kVec>(x, n, blockIdx.x, gridDim.x);
  if (threadIdx.x == 0) partial[blockIdx.x] = sum;
}

__global__ void __launch_bounds__(kThreads)
    combine_partials_kernel(const double* __restrict__ partial, int64_t count, double* __restrict__ result) {
  const double sum = block_combine(partial, count);
  if (threadIdx.x == 0) *result = sum;
}

// Up to kMax buffers, passed by value (well inside a kernel's 4 KB of parameters): buffer
// i's partials are partials[first_block[i], first_block[i + 1]), partial_count(n[i]) of
// them, and aligned bit i says x[i] is 16-byte aligned.
struct SquaresTable {
  static constexpr int kMax = 64;
  const float* x[kMax];
  int64_t n[kMax];
  int64_t first_block[kMax + 1];
  uint64_t aligned;
  int count;
};

// The table of buffers first .. first + min(kMax, count - first) - 1 (a negative n counts
// as empty).
inline SquaresTable make_table(const float* const* xs, const int64_t* ns, int first, int count) {
  SquaresTable t{};
  t.count = count - first < SquaresTable::kMax ? count - first : SquaresTable::kMax;
  for (int i = 0; i < t.count; ++i) {
    t.x[i] = xs[first + i];
    t.n[i] = ns[first + i] > 0 ? ns[first + i] : 0;
    t.first_block[i + 1] = t.first_block[i] + partial_count(t.n[i]);
    if (model::aligned16(t.x[i])) t.aligned |= uint64_t{1} << i;
  }
  return t;
}

// One block per partial of every buffer in the table (grid: first_block[count]).
__global__ void __launch_bounds__(kThreads)
    many_partial_sums_kernel(const SquaresTable t, double* __restrict__ partials) {
  const int64_t block = blockIdx.x;
  int i = 0;
  while (block >= t.first_block[i + 1]) ++i;  // blocks of an empty buffer: none
  const int64_t b = block - t.first_block[i], blocks = t.first_block[i + 1] - t.first_block[i];
  const double sum = (t.aligned >> i & 1u) != 0 ? block_partial<true>(t.x[i], t.n[i], b, blocks)
                                                 : block_partial<false>(t.x[i], t.n[i], b, blocks);
  if (threadIdx.x == 0) partials[block] = sum;
}

// One block per buffer (grid: count): results[i] = buffer i's sum.
__global__ void __launch_bounds__(kThreads)
    many_combine_kernel(const SquaresTable t, const double* __restrict__ partials, double* __restrict__ results) {
  const int i = static_cast<int>(blockIdx.x);
  const double sum = block_combine(partials + t.first_block[i], t.first_block[i + 1] - t.first_block[i]);
  if (threadIdx.x == 0) results[i] = sum;
}

// The grad norm's last step, one thread: the buffers' sums added in order (as the host adds
// total_sum_of_squares' doubles), and the clipping factor from their total.
__global__ void grad_norm_finish_kernel(const double* __restrict__ sums, int count, double max_norm,
                                        double* __restrict__ sum_of_squares, float* __restrict__ clip_scale) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  double total = 0.0;
  for (int i = 0; i < count; ++i) total += sums[i];
  *sum_of_squares = total;
  *clip_scale = ops::clip_scale_from_sum_of_squares(total, max_norm);
}

// The clipping factor alone, from a total summed elsewhere (FSDP's ranks), one thread.
__global__ void clip_scale_kernel(const double* __restrict__ sum_of_squares, double max_norm,
                                  float* __restrict__ clip_scale) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  *clip_scale = ops::clip_scale_from_sum_of_squares(*sum_of_squares, max_norm);
}

}  // namespace fp8::cuda::squares
