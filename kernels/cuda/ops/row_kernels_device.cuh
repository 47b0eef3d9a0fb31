// The model-op kernels that also write each row's amax (for the fp8 cast that reads the
// row, QuantizeArgs::row_amax): SwiGLU and its backward, AdamW, RoPE, a bare row amax; and
// RoPE without amaxes. Launched by elementwise_kernels.cu and rope_kernels.cu; in a header
// of their own so that tests/ops/row_kernels_emulation_test.cc runs this same source on
// the CPU under the CUDA emulation (tests/ops/emulation/), against the CPU ops.
//
// One block a row (looping past the grid), its threads owning groups of 16 bytes of it
// (4 fp32 or 8 bf16: one access each when kVec, i.e. the row length a multiple of the
// group and every pointer 16-byte aligned), then one block reduction of the amax. The
// per-element functions are the CPU's (ops/model_arith.h) and an amax is a max, so the
// values and amaxes do not depend on the grouping. Inputs may alias outputs: a thread
// reads its group before it writes it.
#pragma once

#include <cstdint>

#include "cuda/ops/kernel_util.cuh"
#include "cuda/ops/row_sweep.cuh"
#include "ops/model_arith.h"

namespace fp8::cuda::row_kernels {
// Internal linkage: each including file (the launchers' .cu, the CPU emulation test) has
// its own copy, so the emulated host versions never meet the device build's at link time.
namespace {

using model::kThreads;

// The by-rows kernels' grid (a block a row): they loop past this many rows.
constexpr int64_t kMaxRowBlocks = int64_t{1} << 20;

__device__ __forceinline__ int64_t mod(int64_t a, int64_t b) {
  if (((a | b) >> 32) == 0) return static_cast<uint32_t>(a) % static_cast<uint32_t>(b);
  return a % b;
}

// out = ops::swiglu(gate, up), one rounding on store.
template <typename T, bool kVec>
__global__ void __launch_bounds__(kThreads)
    swiglu_rows_kernel(const T* gate, const T* up, int64_t rows, int64_t cols, T* out, float* __restrict__ row_amax) {
  constexpr int kG = model::kPer16Bytes<T>;
  const int64_t groups = model::ceil_div(cols, kG);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t base = r * cols;
    uint32_t amax_bits = 0;
    for (int64_t g = threadIdx.x; g < groups; g += kThreads) {
      float a[kG], b[kG], y[kG];
      model::load_group16<kVec>(gate + base, g, cols, 0.0f, a);
      model::load_group16<kVec>(up + base, g, cols, 0.0f, b);
#pragma unroll
      for (int k = 0; k < kG; ++k) y[k] = ops::swiglu(a[k], b[k]);
      model::store_group16<kVec>(out + base, g, cols, y);
      amax_bits = model::group16_amax_bits<T>(amax_bits, g, cols, y);
    }
    amax_bits = model::block_max_bits(amax_bits);
    if (threadIdx.x == 0) row_amax[r] = __uint_as_float(amax_bits);
  }
}

// Each row's amax of x alone, for an op whose own kernel does not make it (the SIMT
// attention). Unlike the cast kernels' amax pass, it takes any alignment.
template <typename T, bool kVec>
__global__ void __launch_bounds__(kThreads)
    row_amax_kernel(const T* x, int64_t rows, int64_t cols, float* __restrict__ row_amax) {
  constexpr int kG = model::kPer16Bytes<T>;
  const int64_t groups = model::ceil_div(cols, kG);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t base = r * cols;
    uint32_t amax_bits = 0;
    for (int64_t g = threadIdx.x; g < groups; g += kThreads) {
      float a[kG];
      model::load_group16<kVec>(x + base, g, cols, 0.0f, a);
      amax_bits = model::group16_amax_bits<T>(amax_bits, g, cols, a);
    }
    amax_bits = model::block_max_bits(amax_bits);
    if (threadIdx.x == 0) row_amax[r] = __uint_as_float(amax_bits);
  }
}

// The backward: ops::swiglu_grad per element, and the rows' amaxes of whichever of
// grad_gate and grad_up asks for them (null: not wanted).
template <typename T, bool kVec>
__global__ void __launch_bounds__(kThreads)
    swiglu_backward_rows_kernel(const T* gate, const T* up, const T* grad_out, int64_t rows, int64_t cols,
                                T* grad_gate, T* grad_up, float* __restrict__ grad_gate_row_amax,
                                float* __restrict__ grad_up_row_amax) {
  constexpr int kG = model::kPer16Bytes<T>;
  const int64_t groups = model::ceil_div(cols, kG);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t base = r * cols;
    uint32_t gate_bits = 0, up_bits = 0;
    for (int64_t g = threadIdx.x; g < groups; g += kThreads) {
      float a[kG], b[kG], d[kG], dg[kG], du[kG];
      model::load_group16<kVec>(gate + base, g, cols, 0.0f, a);
      model::load_group16<kVec>(up + base, g, cols, 0.0f, b);
      model::load_group16<kVec>(grad_out + base, g, cols, 0.0f, d);
#pragma unroll
      for (int k = 0; k < kG; ++k) ops::swiglu_grad(a[k], b[k], d[k], &dg[k], &du[k]);
      model::store_group16<kVec>(grad_gate + base, g, cols, dg);
      model::store_group16<kVec>(grad_up + base, g, cols, du);
      gate_bits = model::group16_amax_bits<T>(gate_bits, g, cols, dg);
      up_bits = model::group16_amax_bits<T>(up_bits, g, cols, du);
    }
    // Each condition is the same for the whole grid.
    if (grad_gate_row_amax != nullptr) {
      gate_bits = model::block_max_bits(gate_bits);
      if (threadIdx.x == 0) grad_gate_row_amax[r] = __uint_as_float(gate_bits);
    }
    if (grad_up_row_amax != nullptr) {
      up_bits = model::block_max_bits(up_bits);
      if (threadIdx.x == 0) grad_up_row_amax[r] = __uint_as_float(up_bits);
    }
  }
}

// ops::adamw_update per element, and each row's amax of the updated parameter. fp32.
// scale_in (may be null): the gradients' factor from device memory instead of
// c.grad_scale; NaN there leaves everything as it was (no update, no amaxes written).
template <bool kVec>
__global__ void __launch_bounds__(kThreads)
    adamw_rows_kernel(ops::AdamWCoefficients c, const float* scale_in, float* param, const float* grad, float* m,
                      float* v, int64_t rows, int64_t cols, float* __restrict__ param_row_amax) {
  if (scale_in != nullptr) c.grad_scale = __ldg(scale_in);
  if (c.grad_scale != c.grad_scale) return;  // NaN
  constexpr int kG = model::kPer16Bytes<float>;
  const int64_t groups = model::ceil_div(cols, kG);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t base = r * cols;
    uint32_t amax_bits = 0;
    for (int64_t g = threadIdx.x; g < groups; g += kThreads) {
      float p[kG], d[kG], mo[kG], ve[kG];
      model::load_group16<kVec>(param + base, g, cols, 0.0f, p);
      model::load_group16<kVec>(grad + base, g, cols, 0.0f, d);
      model::load_group16<kVec>(m + base, g, cols, 0.0f, mo);
      model::load_group16<kVec>(v + base, g, cols, 0.0f, ve);
#pragma unroll
      for (int k = 0; k < kG; ++k) ops::adamw_update(c, d[k], &p[k], &mo[k], &ve[k]);
      model::store_group16<kVec>(param + base, g, cols, p);
      model::store_group16<kVec>(m + base, g, cols, mo);
      model::store_group16<kVec>(v + base, g, cols, ve);
      amax_bits = model::group16_amax_bits<float>(amax_bits, g, cols, p);
    }
    amax_bits = model::block_max_bits(amax_bits);
    if (threadIdx.x == 0) param_row_amax[r] = __uint_as_float(amax_bits);
  }
}

// RoPE without amaxes, swept over [rows, items] (row_sweep.cuh): an item is one pair, or
// when kVec (head_dim a multiple of 16 bytes' worth, both tensors 16-byte aligned) 16
// bytes of one head (2 fp32 or 4 bf16 pairs) as one access. Rows are (batch, position)
// pairs, each of heads · head_dim elements. Each item is read before the one thread that
// owns it writes it, so out may equal in.
template <typename T, bool kVec>
__global__ void __launch_bounds__(kThreads)
    rope_kernel(int64_t rows, int64_t seq, int64_t row_floats, int64_t pairs, const float* __restrict__ cos_table,
                const float* __restrict__ sin_table, float sin_sign, const T* in, T* out) {
  constexpr int kItem = kVec ? model::kPer16Bytes<T> : 2;  // elements an item
  const model::SweepPos p = model::sweep_pos();
  if (p.item >= row_floats / kItem) return;
  const int64_t offset = p.item * kItem;               // within the row
  const int64_t pair = mod(p.item * (kItem / 2), pairs);  // within the head
  for (int64_t r = p.row; r < rows; r += p.row_stride) {
    const int64_t t = mod(r, seq) * pairs + pair;
    const T* x = in + r * row_floats + offset;
    T* y = out + r * row_floats + offset;
    if constexpr (kVec) {
      float v[kItem], w[kItem];
      model::load16(x, v);
#pragma unroll
      for (int q = 0; q < kItem / 2; ++q) {
        ops::rotate_pair(v[2 * q], v[2 * q + 1], cos_table[t + q], sin_sign * sin_table[t + q], &w[2 * q],
                         &w[2 * q + 1]);
      }
      model::store16(y, w);
    } else {
      const float x0 = model::load_act(x), x1 = model::load_act(x + 1);
      float y0, y1;
      ops::rotate_pair(x0, x1, cos_table[t], sin_sign * sin_table[t], &y0, &y1);
      model::store_act(y, y0);
      model::store_act(y + 1, y1);
    }
  }
}

// RoPE over rows of cols = heads · head_dim elements (rows = batch · seq), forward or
// inverse (sin_sign -1), each pair by ops::rotate_pair with its position's table entry.
// head_dim is even, so no pair straddles two groups, though a group may straddle heads:
// each pair finds its own entry. A partial last group's missing pairs rotate zeros that
// are neither stored nor counted.
template <typename T, bool kVec>
__global__ void __launch_bounds__(kThreads)
    rope_rows_kernel(int64_t rows, int64_t seq, int64_t cols, int64_t head_dim, const float* __restrict__ cos_table,
                     const float* __restrict__ sin_table, float sin_sign, const T* in, T* out,
                     float* __restrict__ row_amax) {
  constexpr int kG = model::kPer16Bytes<T>;
  const int64_t pairs = head_dim / 2;
  const int64_t groups = model::ceil_div(cols, kG);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t base = r * cols;
    const int64_t table_row = mod(r, seq) * pairs;
    uint32_t amax_bits = 0;
    for (int64_t g = threadIdx.x; g < groups; g += kThreads) {
      float v[kG], w[kG];
      model::load_group16<kVec>(in + base, g, cols, 0.0f, v);
#pragma unroll
      for (int p = 0; p < kG / 2; ++p) {
        const int64_t t = table_row + mod(kG * g + 2 * p, head_dim) / 2;
        ops::rotate_pair(v[2 * p], v[2 * p + 1], cos_table[t], sin_sign * sin_table[t], &w[2 * p], &w[2 * p + 1]);
      }
      model::store_group16<kVec>(out + base, g, cols, w);
      amax_bits = model::group16_amax_bits<T>(amax_bits, g, cols, w);
    }
    amax_bits = model::block_max_bits(amax_bits);
    if (threadIdx.x == 0) row_amax[r] = __uint_as_float(amax_bits);
  }
}

}  // namespace
}  // namespace fp8::cuda::row_kernels
