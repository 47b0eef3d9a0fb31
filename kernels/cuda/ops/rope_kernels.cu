// Rotary position embedding over x [batch, seq, heads, head_dim], forward or inverse, with
// the host-built cos/sin tables [seq, head_dim / 2] (ops::RopeTable: double-precision
// angles rounded once) and the CPU's per-pair rotation, ops::rotate_pair. This file is
// compiled with -fmad=false, so x0·c − x1·s rounds as on the CPU: results are bit-identical.
//
// x is fp32 or bf16 (the element type T): bf16 pairs are widened, rotated in fp32 and each
// result rounded once, so bf16 is bit-identical to the CPU's bf16 path as well.
//
// The kernels are row_kernels_device.cuh's: a sweep over pairs, or 16-byte groups of them,
// and, with the rows' amaxes asked for, a block a row.
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/ops/kernel_util.cuh"
#include "cuda/ops/model_kernels.h"
#include "cuda/ops/row_kernels_device.cuh"
#include "cuda/ops/row_sweep.cuh"

namespace fp8::cuda {
namespace {

using model::kThreads;
using row_kernels::kMaxRowBlocks;

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
    const bool vec = d.head_dim % model::kPer16Bytes<T> == 0 && model::aligned16(x) && model::aligned16(y);
    const model::RowSweep sweep = model::row_sweep(rows, row_floats / (vec ? model::kPer16Bytes<T> : 2));
    if (!sweep.ok) return model::kTooLarge;
    if (vec) {
      row_kernels::rope_kernel<T, true>
          <<<sweep.grid, sweep.block, 0, stream>>>(rows, d.seq, row_floats, pairs, cos, sin, sin_sign, x, y);
    } else {
      row_kernels::rope_kernel<T, false>
          <<<sweep.grid, sweep.block, 0, stream>>>(rows, d.seq, row_floats, pairs, cos, sin, sin_sign, x, y);
    }
    return model::after_launch("rope kernel");
  });
}

}  // namespace fp8::cuda
