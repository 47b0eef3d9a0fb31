// Σ x² in double, deterministically: a fixed number of blocks (a function of n alone) each
// write one partial sum, then one block adds the partials in block order. Every thread
// sums whole groups of 4 elements, group t, t + stride, ..., so the order of additions is
// the same whether the vector path (x 16-byte aligned) or the scalar one loads them.
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/ops/kernel_util.cuh"
#include "cuda/ops/model_kernels.h"

namespace fp8::cuda {
namespace {

using model::kThreads;

// Partials per call: enough blocks to keep every SM of an H100 streaming, few enough that
// the final block's pass over them is short.
constexpr int64_t kMaxPartials = 1024;

int64_t partial_count(int64_t n) {
  const int64_t blocks = model::ceil_div(model::ceil_div(n, 4), kThreads);
  return blocks < kMaxPartials ? blocks : kMaxPartials;
}

template <bool kVec>
__global__ void __launch_bounds__(kThreads)
    partial_sum_of_squares_kernel(const float* __restrict__ x, int64_t n, double* __restrict__ partial) {
  const int64_t groups = model::ceil_div(n, 4);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  double sum = 0.0;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; g < groups; g += stride) {
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
  sum = model::block_sum(sum);
  if (threadIdx.x == 0) partial[blockIdx.x] = sum;
}

__global__ void __launch_bounds__(kThreads)
    combine_partials_kernel(const double* __restrict__ partial, int64_t count, double* __restrict__ result) {
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += kThreads) sum += partial[i];
  sum = model::block_sum(sum);
  if (threadIdx.x == 0) *result = sum;
}

}  // namespace

size_t sum_of_squares_scratch_bytes(int64_t n) {
  model::ScratchCarver carve(nullptr);
  carve.take<double>(static_cast<size_t>(partial_count(n)));
  return carve.used();
}

LaunchResult launch_sum_of_squares(const float* x, int64_t n, double* result, void* scratch, cudaStream_t stream) {
  if (n <= 0) {
    const cudaError_t e = cudaMemsetAsync(result, 0, sizeof(double), stream);
    return {e, e == cudaSuccess ? nullptr : "cudaMemsetAsync"};
  }
  model::ScratchCarver carve(scratch);
  double* partial = carve.take<double>(static_cast<size_t>(partial_count(n)));
  const auto blocks = static_cast<unsigned>(partial_count(n));
  if (model::aligned16(x)) {
    partial_sum_of_squares_kernel<true><<<blocks, kThreads, 0, stream>>>(x, n, partial);
  } else {
    partial_sum_of_squares_kernel<false><<<blocks, kThreads, 0, stream>>>(x, n, partial);
  }
  if (auto r = model::after_launch("sum_of_squares kernel"); !r.ok()) return r;
  combine_partials_kernel<<<1, kThreads, 0, stream>>>(partial, blocks, result);
  return model::after_launch("sum_of_squares combine kernel");
}

}  // namespace fp8::cuda
