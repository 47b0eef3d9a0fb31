// Mean cross-entropy over rows of logits [rows, vocab], and its backward, with the CPU's
// arithmetic (kernels/ops/cross_entropy.cc): each row's max subtracted in float, the
// exponentials summed in double, the loss summed and divided in double.
//
// Forward: one block per row writes lse[r] and the row's loss term (0 when the row does
// not count) into scratch; one block then adds the terms in row order and divides by the
// number of counted rows, both read from device memory.
// Backward: one block counts the counted rows and writes grad_loss / counted to scratch;
// the gradient kernel reads it there. Nothing returns to the host.
//
// A target counts when it is in [0, vocab): kIgnoreTarget (-1), and any other id the host
// could not check, contribute nothing and get a zero gradient row. Rows are `ld` elements
// apart; the columns from vocab to ld pad them, outside the softmax, with a zero gradient.
//
// logits and grad_logits are fp32 or bf16 (the element type T), widened on load and each
// gradient rounded once on store; lse and the loss are fp32.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/ops/kernel_util.cuh"
#include "cuda/ops/model_kernels.h"
#include "cuda/ops/row_sweep.cuh"

namespace fp8::cuda {
namespace {

using model::kThreads;

constexpr int64_t kMaxRowBlocks = int64_t{1} << 20;  // the row kernel loops past this many rows

__device__ __forceinline__ bool counts(int32_t target, int64_t vocab) { return target >= 0 && target < vocab; }

template <typename T, bool kVec>
__global__ void __launch_bounds__(kThreads)
    cross_entropy_rows_kernel(const T* __restrict__ logits, const int32_t* __restrict__ targets, int64_t rows,
                              int64_t vocab, int64_t ld, float* __restrict__ lse, double* __restrict__ row_loss) {
  const int64_t groups = model::ceil_div(vocab, 4);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* row = logits + r * ld;
    float max = -INFINITY;
    for (int64_t g = threadIdx.x; g < groups; g += kThreads) {
      float v[4];
      model::load_group<kVec>(row, g, vocab, -INFINITY, v);
#pragma unroll
      for (int k = 0; k < 4; ++k) max = fmaxf(max, v[k]);
    }
    max = model::block_max(max);
    double sum = 0.0;
    for (int64_t g = threadIdx.x; g < groups; g += kThreads) {
      float v[4];
      model::load_group<kVec>(row, g, vocab, 0.0f, v);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        if (kVec || 4 * g + k < vocab) sum += exp(static_cast<double>(v[k] - max));
      }
    }
    sum = model::block_sum(sum);
    if (threadIdx.x == 0) {
      const double row_lse = static_cast<double>(max) + log(sum);
      lse[r] = static_cast<float>(row_lse);
      const int32_t target = targets[r];
      row_loss[r] = counts(target, vocab) ? row_lse - static_cast<double>(model::load_act(row + target)) : 0.0;
    }
  }
}

// Sums over the whole of `rows` in one block: each thread a fixed stride of rows, then
// block_sum. Returns (Σ row_loss, counted rows); row_loss may be null for the count alone.
struct LossSum {
  double loss;
  long long counted;
};

__device__ __forceinline__ LossSum sum_rows(const double* __restrict__ row_loss, const int32_t* __restrict__ targets,
                                            int64_t rows, int64_t vocab) {
  double loss = 0.0;
  long long counted = 0;
  for (int64_t r = threadIdx.x; r < rows; r += kThreads) {
    if (row_loss != nullptr) loss += row_loss[r];
    counted += counts(targets[r], vocab) ? 1 : 0;
  }
  return {model::block_sum(loss), model::block_sum(counted)};
}

__global__ void __launch_bounds__(kThreads)
    cross_entropy_mean_kernel(const double* __restrict__ row_loss, const int32_t* __restrict__ targets, int64_t rows,
                              int64_t vocab, float* __restrict__ loss) {
  const LossSum s = sum_rows(row_loss, targets, rows, vocab);
  if (threadIdx.x == 0) *loss = s.counted == 0 ? 0.0f : static_cast<float>(s.loss / static_cast<double>(s.counted));
}

__global__ void __launch_bounds__(kThreads)
    cross_entropy_scale_kernel(const int32_t* __restrict__ targets, int64_t rows, int64_t vocab, float grad_loss,
                               float* __restrict__ scale) {
  const LossSum s = sum_rows(nullptr, targets, rows, vocab);
  if (threadIdx.x == 0) {
    *scale =
        s.counted == 0 ? 0.0f : static_cast<float>(static_cast<double>(grad_loss) / static_cast<double>(s.counted));
  }
}

// grad[r, j] = scale * e^(logits[r, j] - lse[r]) - (j == target ? scale : 0), zero rows
// where the target does not count and zero padding. Items are groups of 4 logits (kVec:
// vocab and ld multiples of 4, so that no group straddles the padding) or single logits.
template <typename T, bool kVec>
__global__ void __launch_bounds__(kThreads)
    cross_entropy_grad_kernel(const T* __restrict__ logits, const int32_t* __restrict__ targets,
                              const float* __restrict__ lse, int64_t rows, int64_t vocab, int64_t ld,
                              const float* __restrict__ scale_ptr, T* __restrict__ grad) {
  const model::SweepPos p = model::sweep_pos();
  constexpr int kItem = kVec ? 4 : 1;
  if (p.item * kItem >= ld) return;
  const bool padding = p.item * kItem >= vocab;
  const float scale = *scale_ptr;
  for (int64_t r = p.row; r < rows; r += p.row_stride) {
    const int32_t target = targets[r];
    const int64_t j0 = r * ld + p.item * kItem;
    float g[kItem];
    if (padding || !counts(target, vocab)) {
#pragma unroll
      for (int k = 0; k < kItem; ++k) g[k] = 0.0f;
    } else {
      const float row_lse = lse[r];
      float v[kItem];
      if constexpr (kVec) {
        model::load4(logits + j0, v);
      } else {
        v[0] = model::load_act(logits + j0);
      }
#pragma unroll
      for (int k = 0; k < kItem; ++k) {
        g[k] = scale * expf(v[k] - row_lse);
        if (p.item * kItem + k == target) g[k] -= scale;
      }
    }
    if constexpr (kVec) {
      model::store4(grad + j0, g);
    } else {
      model::store_act(grad + j0, g[0]);
    }
  }
}

}  // namespace

size_t cross_entropy_forward_scratch_bytes(int64_t rows) {
  model::ScratchCarver carve(nullptr);
  carve.take<double>(static_cast<size_t>(rows));
  return carve.used();
}

LaunchResult launch_cross_entropy_forward(const void* logits, const int32_t* targets, int64_t rows, int64_t vocab,
                                          int64_t ld, float* loss, float* lse, void* scratch, HpType act,
                                          cudaStream_t stream) {
  if (rows <= 0 || vocab <= 0) return {};
  model::ScratchCarver carve(scratch);
  double* row_loss = carve.take<double>(static_cast<size_t>(rows));
  const unsigned blocks = model::clamp_grid(rows, kMaxRowBlocks);
  const LaunchResult rows_queued = model::with_act(act, [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(logits);
    if (vocab % 4 == 0 && ld % 4 == 0 && model::aligned_for<T, 4>(x)) {
      cross_entropy_rows_kernel<T, true><<<blocks, kThreads, 0, stream>>>(x, targets, rows, vocab, ld, lse, row_loss);
    } else {
      cross_entropy_rows_kernel<T, false>
          <<<blocks, kThreads, 0, stream>>>(x, targets, rows, vocab, ld, lse, row_loss);
    }
    return model::after_launch("cross_entropy forward kernel");
  });
  if (!rows_queued.ok()) return rows_queued;
  cross_entropy_mean_kernel<<<1, kThreads, 0, stream>>>(row_loss, targets, rows, vocab, loss);
  return model::after_launch("cross_entropy mean kernel");
}

size_t cross_entropy_backward_scratch_bytes() {
  model::ScratchCarver carve(nullptr);
  carve.take<float>(1);
  return carve.used();
}

LaunchResult launch_cross_entropy_backward(const void* logits, const int32_t* targets, const float* lse, int64_t rows,
                                           int64_t vocab, int64_t ld, float grad_loss, void* grad_logits,
                                           void* scratch, HpType act, cudaStream_t stream) {
  if (rows <= 0 || vocab <= 0) return {};
  return model::with_act(act, [&](auto tag) -> LaunchResult {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(logits);
    T* grad = static_cast<T*>(grad_logits);
    const bool vec =
        vocab % 4 == 0 && ld % 4 == 0 && model::aligned_for<T, 4>(x) && model::aligned_for<T, 4>(grad);
    const model::RowSweep sweep = model::row_sweep(rows, vec ? ld / 4 : ld);
    if (!sweep.ok) return model::kTooLarge;
    model::ScratchCarver carve(scratch);
    float* scale = carve.take<float>(1);
    cross_entropy_scale_kernel<<<1, kThreads, 0, stream>>>(targets, rows, vocab, grad_loss, scale);
    if (auto r = model::after_launch("cross_entropy scale kernel"); !r.ok()) return r;
    if (vec) {
      cross_entropy_grad_kernel<T, true>
          <<<sweep.grid, sweep.block, 0, stream>>>(x, targets, lse, rows, vocab, ld, scale, grad);
    } else {
      cross_entropy_grad_kernel<T, false>
          <<<sweep.grid, sweep.block, 0, stream>>>(x, targets, lse, rows, vocab, ld, scale, grad);
    }
    return model::after_launch("cross_entropy backward kernel");
  });
}

}  // namespace fp8::cuda
