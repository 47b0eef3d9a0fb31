// Rotary position embedding over x [batch, seq, heads, head_dim], forward or inverse, with
// the host-built cos/sin tables [seq, head_dim / 2] (ops::RopeTable: double-precision
// angles rounded once) and the CPU's per-pair rotation, ops::rotate_pair. This file is
// compiled with -fmad=false, so x0·c − x1·s rounds as on the CPU: results are bit-identical.
//
// x is fp32 or bf16 (the element type T): bf16 pairs are widened, rotated in fp32 and each
// result rounded once, so bf16 is bit-identical to the CPU's bf16 path as well.
//
// A work item is one pair, or two adjacent pairs as one access (a float4, or 8 bytes of
// bf16) when head_dim % 4 == 0 and both tensors are aligned for it. Each item's values are
// read before they are written by the one thread that owns it, so out may equal in. With
// the rows' amaxes asked for, a block takes a row instead (row_kernels_device.cuh).
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/ops/kernel_util.cuh"
#include "cuda/ops/model_kernels.h"
#include "cuda/ops/row_kernels_device.cuh"
#include "cuda/ops/row_sweep.cuh"
#include "ops/model_arith.h"

namespace fp8::cuda {
namespace {

using model::kThreads;

using row_kernels::mod;

// Rows are (batch, position) pairs: rows = batch * seq, each of heads * head_dim floats.
template <typename T, bool kVec>
__global__ void __launch_bounds__(kThreads)
    rope_kernel(int64_t rows, int64_t seq, int64_t row_floats, int64_t pairs, const float* __restrict__ cos_table,
                const float* __restrict__ sin_table, float sin_sign, const T* in, T* out) {
  const model::SweepPos p = model::sweep_pos();
  constexpr int64_t kItemFloats = kVec ? 4 : 2;
  if (p.item >= row_floats / kItemFloats) return;
  const int64_t offset = p.item * kItemFloats;                  // within the row
  const int64_t pair = mod(p.item * (kItemFloats / 2), pairs);  // within the head
  for (int64_t r = p.row; r < rows; r += p.row_stride) {
    const int64_t t = mod(r, seq) * pairs + pair;
    const T* x = in + r * row_floats + offset;
    T* y = out + r * row_floats + offset;
    if constexpr (kVec) {
      float v[4], w[4];
      model::load4(x, v);
      ops::rotate_pair(v[0], v[1], cos_table[t], sin_sign * sin_table[t], &w[0], &w[1]);
      ops::rotate_pair(v[2], v[3], cos_table[t + 1], sin_sign * sin_table[t + 1], &w[2], &w[3]);
      model::store4(y, w);
    } else {
      const float x0 = model::load_act(x), x1 = model::load_act(x + 1);
      float y0, y1;
      ops::rotate_pair(x0, x1, cos_table[t], sin_sign * sin_table[t], &y0, &y1);
      model::store_act(y, y0);
      model::store_act(y + 1, y1);
    }
  }
}

constexpr int64_t kMaxRowBlocks = int64_t{1} << 20;

}  // namespace

LaunchResult launch_rope(const RopeDims& d, const float* cos, const float* sin, bool inverse, const void* in, void* out,
                         float* row_amax, HpType act, cudaStream_t stream) {
  const int64_t rows = d.batch * d.seq;
  const int64_t row_floats = d.heads * d.head_dim;  // elements per row, whatever their type
  const int64_t pairs = d.head_dim / 2;
  if (rows <= 0 || row_floats <= 0 || pairs <= 0) return {};
  // The inverse rotation is the rotation by the negated angle: same cosine, negated sine.
  const float sin_sign = inverse ? -1.0f : 1.0f;
  return model::with_act(act, [&](auto tag) -> LaunchResult {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(in);
    T* y = static_cast<T*>(out);
    if (row_amax != nullptr) {
      const unsigned blocks = model::clamp_grid(rows, kMaxRowBlocks);
      if (row_floats % model::kPer16Bytes<T> == 0 && model::aligned16(x) && model::aligned16(y)) {
        row_kernels::rope_rows_kernel<T, true>
            <<<blocks, kThreads, 0, stream>>>(rows, d.seq, row_floats, d.head_dim, cos, sin, sin_sign, x, y, row_amax);
      } else {
        row_kernels::rope_rows_kernel<T, false>
            <<<blocks, kThreads, 0, stream>>>(rows, d.seq, row_floats, d.head_dim, cos, sin, sin_sign, x, y, row_amax);
      }
      return model::after_launch("rope rows kernel");
    }
    const bool vec = d.head_dim % 4 == 0 && model::aligned_for<T, 4>(x) && model::aligned_for<T, 4>(y);
    const model::RowSweep sweep = model::row_sweep(rows, row_floats / (vec ? 4 : 2));
    if (!sweep.ok) return model::kTooLarge;
    if (vec) {
      rope_kernel<T, true>
          <<<sweep.grid, sweep.block, 0, stream>>>(rows, d.seq, row_floats, pairs, cos, sin, sin_sign, x, y);
    } else {
      rope_kernel<T, false>
          <<<sweep.grid, sweep.block, 0, stream>>>(rows, d.seq, row_floats, pairs, cos, sin, sin_sign, x, y);
    }
    return model::after_launch("rope kernel");
  });
}

}  // namespace fp8::cuda
