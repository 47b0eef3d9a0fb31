// The model-op kernels that also write each row's amax (for the fp8 cast that reads the
// row, QuantizeArgs::row_amax): SwiGLU and its backward, AdamW, RoPE, a bare row amax; and
// RoPE without amaxes. Launched by elementwise_kernels.cu and rope_kernels.cu; in a header
// of their own so that tests/ops/row_kernels_emulation_test.cc runs this same source on
// the CPU under the CUDA emulation (tests/ops/emulation/), against the CPU ops.
//
// A team a row (a block, or a warp: BlockRows, WarpRows; looping past the grid), its
// threads owning groups of 16 bytes of it (4 fp32 or 8 bf16: one access each when kVec,
// i.e. the row length a multiple of the group and every pointer 16-byte aligned), then one
// reduction of the amax. The per-element functions are the CPU's (ops/model_arith.h) and
// an amax is a max, so the values and amaxes do not depend on the grouping. Inputs may
// alias outputs: a thread reads its groups before it writes them.
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

// The by-rows kernels' grid: they loop past this many blocks' rows.
constexpr int64_t kMaxRowBlocks = int64_t{1} << 20;

// Who sweeps a row: the kernels' Team. BlockRows: a block a row, each thread one group of
// 16 bytes at a time, the row's max through the block's barrier (with rows of 64 groups,
// e.g. a 512-wide bf16 row, three quarters of the threads idle). WarpRows
// (FP8_CUDA_WARP_ROWS=1, timed beside BlockRows by bench_train): a warp a row and
// kThreads / 32 rows a block, each lane loading kBatch groups before it computes any, the
// max by warp shuffles. The values and amaxes are the same bits either way: per-element
// functions, and an amax is a max.
struct BlockRows {
  static constexpr int kSize = kThreads;
  static constexpr int kBatch = 1;
  static constexpr int kRowsPerBlock = 1;
  __device__ static int64_t first_row() { return blockIdx.x; }
  __device__ static int64_t row_stride() { return gridDim.x; }
  __device__ static int member() { return static_cast<int>(threadIdx.x); }
  __device__ static uint32_t max_bits(uint32_t v) { return model::block_max_bits(v); }
};

struct WarpRows {
  static constexpr int kSize = 32;
  static constexpr int kBatch = 2;
  static constexpr int kRowsPerBlock = kThreads / 32;
  __device__ static int64_t first_row() {
    return static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + static_cast<int64_t>(threadIdx.x >> 5);
  }
  __device__ static int64_t row_stride() { return static_cast<int64_t>(gridDim.x) * kRowsPerBlock; }
  __device__ static int member() { return static_cast<int>(threadIdx.x & 31); }
  __device__ static uint32_t max_bits(uint32_t v) { return __reduce_max_sync(model::kFullMask, v); }
};

__device__ __forceinline__ int64_t mod(int64_t a, int64_t b) {
  if (((a | b) >> 32) == 0) return static_cast<uint32_t>(a) % static_cast<uint32_t>(b);
  return a % b;
}

// A team member's groups of one row, Team::kBatch at a time: load(i, g) for each group g
// of a batch (i its slot in the batch), then use(i, g) for each, so that a batch's loads
// are in flight before any is used, and a thread reads its groups before it writes them.
template <typename Team, typename Load, typename Use>
__device__ __forceinline__ void sweep_row_groups(int64_t groups, Load&& load, Use&& use) {
  for (int64_t g0 = Team::member(); g0 < groups; g0 += Team::kBatch * Team::kSize) {
#pragma unroll
    for (int i = 0; i < Team::kBatch; ++i) {
      const int64_t g = g0 + i * Team::kSize;
      if (g < groups) load(i, g);
    }
#pragma unroll
    for (int i = 0; i < Team::kBatch; ++i) {
      const int64_t g = g0 + i * Team::kSize;
      if (g < groups) use(i, g);
    }
  }
}

// out = ops::swiglu(gate, up), one rounding on store.
template <typename T, bool kVec, typename Team = BlockRows>
__global__ void __launch_bounds__(kThreads)
    swiglu_rows_kernel(const T* gate, const T* up, int64_t rows, int64_t cols, T* out, float* __restrict__ row_amax) {
  constexpr int kG = model::kPer16Bytes<T>;
  constexpr int kB = Team::kBatch;
  const int64_t groups = model::ceil_div(cols, kG);
  for (int64_t r = Team::first_row(); r < rows; r += Team::row_stride()) {
    const int64_t base = r * cols;
    uint32_t amax_bits = 0;
    float a[kB][kG], b[kB][kG];
    sweep_row_groups<Team>(
        groups,
        [&](int i, int64_t g) {
          model::load_group16<kVec>(gate + base, g, cols, 0.0f, a[i]);
          model::load_group16<kVec>(up + base, g, cols, 0.0f, b[i]);
        },
        [&](int i, int64_t g) {
          float y[kG];
#pragma unroll
          for (int k = 0; k < kG; ++k) y[k] = ops::swiglu(a[i][k], b[i][k]);
          model::store_group16<kVec>(out + base, g, cols, y);
          amax_bits = model::group16_amax_bits<T>(amax_bits, g, cols, y);
        });
    amax_bits = Team::max_bits(amax_bits);
    if (Team::member() == 0) row_amax[r] = __uint_as_float(amax_bits);
  }
}

// Each row's amax of x alone, for an op whose own kernel does not make it (the SIMT
// attention). Unlike the cast kernels' amax pass, it takes any alignment.
template <typename T, bool kVec, typename Team = BlockRows>
__global__ void __launch_bounds__(kThreads)
    row_amax_kernel(const T* x, int64_t rows, int64_t cols, float* __restrict__ row_amax) {
  constexpr int kG = model::kPer16Bytes<T>;
  constexpr int kB = Team::kBatch;
  const int64_t groups = model::ceil_div(cols, kG);
  for (int64_t r = Team::first_row(); r < rows; r += Team::row_stride()) {
    const int64_t base = r * cols;
    uint32_t amax_bits = 0;
    float a[kB][kG];
    sweep_row_groups<Team>(
        groups, [&](int i, int64_t g) { model::load_group16<kVec>(x + base, g, cols, 0.0f, a[i]); },
        [&](int i, int64_t g) { amax_bits = model::group16_amax_bits<T>(amax_bits, g, cols, a[i]); });
    amax_bits = Team::max_bits(amax_bits);
    if (Team::member() == 0) row_amax[r] = __uint_as_float(amax_bits);
  }
}

// The backward: ops::swiglu_grad per element, and the rows' amaxes of whichever of
// grad_gate and grad_up asks for them (null: not wanted).
template <typename T, bool kVec, typename Team = BlockRows>
__global__ void __launch_bounds__(kThreads)
    swiglu_backward_rows_kernel(const T* gate, const T* up, const T* grad_out, int64_t rows, int64_t cols,
                                T* grad_gate, T* grad_up, float* __restrict__ grad_gate_row_amax,
                                float* __restrict__ grad_up_row_amax) {
  constexpr int kG = model::kPer16Bytes<T>;
  constexpr int kB = Team::kBatch;
  const int64_t groups = model::ceil_div(cols, kG);
  for (int64_t r = Team::first_row(); r < rows; r += Team::row_stride()) {
    const int64_t base = r * cols;
    uint32_t gate_bits = 0, up_bits = 0;
    float a[kB][kG], b[kB][kG], d[kB][kG];
    sweep_row_groups<Team>(
        groups,
        [&](int i, int64_t g) {
          model::load_group16<kVec>(gate + base, g, cols, 0.0f, a[i]);
          model::load_group16<kVec>(up + base, g, cols, 0.0f, b[i]);
          model::load_group16<kVec>(grad_out + base, g, cols, 0.0f, d[i]);
        },
        [&](int i, int64_t g) {
          float dg[kG], du[kG];
#pragma unroll
          for (int k = 0; k < kG; ++k) ops::swiglu_grad(a[i][k], b[i][k], d[i][k], &dg[k], &du[k]);
          model::store_group16<kVec>(grad_gate + base, g, cols, dg);
          model::store_group16<kVec>(grad_up + base, g, cols, du);
          gate_bits = model::group16_amax_bits<T>(gate_bits, g, cols, dg);
          up_bits = model::group16_amax_bits<T>(up_bits, g, cols, du);
        });
    // Each condition is the same for the whole grid.
    if (grad_gate_row_amax != nullptr) {
      gate_bits = Team::max_bits(gate_bits);
      if (Team::member() == 0) grad_gate_row_amax[r] = __uint_as_float(gate_bits);
    }
    if (grad_up_row_amax != nullptr) {
      up_bits = Team::max_bits(up_bits);
      if (Team::member() == 0) grad_up_row_amax[r] = __uint_as_float(up_bits);
    }
  }
}

// ops::adamw_update per element, and each row's amax of the updated parameter. fp32.
// scale_in (may be null): the gradients' factor from device memory instead of
// c.grad_scale; NaN there leaves everything as it was (no update, no amaxes written).
template <bool kVec, typename Team = BlockRows>
__global__ void __launch_bounds__(kThreads)
    adamw_rows_kernel(ops::AdamWCoefficients c, const float* scale_in, float* param, const float* grad, float* m,
                      float* v, int64_t rows, int64_t cols, float* __restrict__ param_row_amax) {
  if (scale_in != nullptr) c.grad_scale = __ldg(scale_in);
  if (c.grad_scale != c.grad_scale) return;  // NaN
  constexpr int kG = model::kPer16Bytes<float>;
  constexpr int kB = Team::kBatch;
  const int64_t groups = model::ceil_div(cols, kG);
  for (int64_t r = Team::first_row(); r < rows; r += Team::row_stride()) {
    const int64_t base = r * cols;
    uint32_t amax_bits = 0;
    float p[kB][kG], d[kB][kG], mo[kB][kG], ve[kB][kG];
    sweep_row_groups<Team>(
        groups,
        [&](int i, int64_t g) {
          model::load_group16<kVec>(param + base, g, cols, 0.0f, p[i]);
          model::load_group16<kVec>(grad + base, g, cols, 0.0f, d[i]);
          model::load_group16<kVec>(m + base, g, cols, 0.0f, mo[i]);
          model::load_group16<kVec>(v + base, g, cols, 0.0f, ve[i]);
        },
        [&](int i, int64_t g) {
#pragma unroll
          for (int k = 0; k < kG; ++k) ops::adamw_update(c, d[i][k], &p[i][k], &mo[i][k], &ve[i][k]);
          model::store_group16<kVec>(param + base, g, cols, p[i]);
          model::store_group16<kVec>(m + base, g, cols, mo[i]);
          model::store_group16<kVec>(v + base, g, cols, ve[i]);
          amax_bits = model::group16_amax_bits<float>(amax_bits, g, cols, p[i]);
        });
    amax_bits = Team::max_bits(amax_bits);
    if (Team::member() == 0) param_row_amax[r] = __uint_as_float(amax_bits);
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
template <typename T, bool kVec, typename Team = BlockRows>
__global__ void __launch_bounds__(kThreads)
    rope_rows_kernel(int64_t rows, int64_t seq, int64_t cols, int64_t head_dim, const float* __restrict__ cos_table,
                     const float* __restrict__ sin_table, float sin_sign, const T* in, T* out,
                     float* __restrict__ row_amax) {
  constexpr int kG = model::kPer16Bytes<T>;
  constexpr int kB = Team::kBatch;
  const int64_t pairs = head_dim / 2;
  const int64_t groups = model::ceil_div(cols, kG);
  for (int64_t r = Team::first_row(); r < rows; r += Team::row_stride()) {
    const int64_t base = r * cols;
    const int64_t table_row = mod(r, seq) * pairs;
    uint32_t amax_bits = 0;
    float v[kB][kG];
    sweep_row_groups<Team>(
        groups, [&](int i, int64_t g) { model::load_group16<kVec>(in + base, g, cols, 0.0f, v[i]); },
        [&](int i, int64_t g) {
          float w[kG];
#pragma unroll
          for (int q = 0; q < kG / 2; ++q) {
            const int64_t t = table_row + mod(kG * g + 2 * q, head_dim) / 2;
            ops::rotate_pair(v[i][2 * q], v[i][2 * q + 1], cos_table[t], sin_sign * sin_table[t], &w[2 * q],
                             &w[2 * q + 1]);
          }
          model::store_group16<kVec>(out + base, g, cols, w);
          amax_bits = model::group16_amax_bits<T>(amax_bits, g, cols, w);
        });
    amax_bits = Team::max_bits(amax_bits);
    if (Team::member() == 0) row_amax[r] = __uint_as_float(amax_bits);
  }
}

}  // namespace
}  // namespace fp8::cuda::row_kernels
