// Elementwise and reduction kernels of the CUDA backend, and their launchers. The cast
// kernels themselves (flat and tiled, with their loads, reductions and scale sources) are
// in cast_kernels_device.cuh, which says how they work.
#include "cuda/cast_kernels.h"

#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "cuda/cast_kernels_device.cuh"
#include "fp8/arith.h"

namespace fp8::cuda {
namespace {

using namespace cast_device;

// ---- range counts (count_cast_range) ----------------------------------------------------------

// The range count's grid is capped so that per-thread and per-block 32-bit sums cannot
// wrap: each thread then covers total / (kMaxRangeBlocks * kThreads) elements, and a block
// sums 256 of those, below 2^32 for any matrix under 2^43 elements. 2048 blocks of 256
// threads still fill a 132-SM GPU at 8 resident blocks an SM twice over.
constexpr int64_t kMaxRangeBlocks = 2048;

// Grid-stride over 16-element chunks of the dense matrix, loaded like the flat cast's; the
// scale of each element follows its row (A = kRow) or column (A = kColumn), walked
// element by element because a chunk may cross rows when cols % 16 != 0. Measuring is
// opt-in and off the hot path, so the walk favours plainness over the flat cast's split.
template <typename T, Format F, Axis A>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    range_count_kernel(const T* __restrict__ in, int64_t total, int64_t cols, const float* __restrict__ scale,
                       unsigned long long* __restrict__ counts) {
  uint32_t saturated = 0, underflow = 0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads * kChunk;
#pragma unroll 1
  for (int64_t e0 = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) * kChunk; e0 < total;
       e0 += stride) {
    const int n = static_cast<int>(total - e0 < kChunk ? total - e0 : kChunk);
    float v[kChunk];
    load_chunk(in + e0, n, v);
    Pos pos{0, 0};
    if (A != Axis::kTensor) pos = position(e0, cols);
    int64_t r = pos.row;
    int64_t c = pos.col;
    float s = A == Axis::kColumn ? 0.0f : __ldg(scale + (A == Axis::kTensor ? 0 : r));
#pragma unroll
    for (int i = 0; i < kChunk; ++i) {
      if (i < n) {
        const float si = A == Axis::kColumn ? __ldg(scale + c) : s;
        const float y = v[i] * si;
        saturated += fp8_saturates(y, F) ? 1u : 0u;
        underflow += fp8_underflows(v[i], y, F) ? 1u : 0u;
        if (A != Axis::kTensor && ++c == cols) {
          c = 0;
          ++r;
          // The next row's scale, unless this was the matrix's last element.
          if (A == Axis::kRow && i + 1 < n) s = __ldg(scale + r);
        }
      }
    }
  }
  block_sum2_atomic(counts, saturated, underflow);
}

// ---- small kernels -----------------------------------------------------------------------------

__global__ void compute_scales_kernel(const float* __restrict__ amax, int64_t n, Format f, bool pow2,
                                      float* __restrict__ scale, float* __restrict__ inv_scale) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= n) return;
  const float s = scale_from_amax(amax[i], f, pow2);
  scale[i] = s;
  if (inv_scale != nullptr) inv_scale[i] = inverse_scale(s);
}

template <typename OutT, Format F, Axis A>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    dequantize_kernel(const uint8_t* __restrict__ in, int64_t total, int64_t cols, const float* __restrict__ scale,
                      OutT* __restrict__ out) {
  const int64_t e0 = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) * kChunk;
  if (e0 >= total) return;
  const int n = static_cast<int>(total - e0 < kChunk ? total - e0 : kChunk);

  uint8_t q[kChunk];
  if (n == kChunk) {
    const uint4 x = __ldg(reinterpret_cast<const uint4*>(in + e0));
    const uint32_t w[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
    for (int i = 0; i < kChunk; ++i) q[i] = static_cast<uint8_t>(w[i / 4] >> (8 * (i % 4)));
  } else {
#pragma unroll
    for (int i = 0; i < kChunk; ++i) q[i] = i < n ? in[e0 + i] : 0;
  }

  Pos pos{0, 0};
  if (A != Axis::kTensor) pos = position(e0, cols);
  float y[kChunk];
  if (A == Axis::kTensor || pos.col + n <= cols) {
    const float s = A == Axis::kColumn ? 0.0f : __ldg(scale + (A == Axis::kTensor ? 0 : pos.row));
#pragma unroll
    for (int i = 0; i < kChunk; ++i) {
      const float si = A == Axis::kColumn ? (i < n ? __ldg(scale + pos.col + i) : 1.0f) : s;
      y[i] = dequantize_value(q[i], F, si);
    }
  } else {
    int64_t r = pos.row;
    int64_t c = pos.col;
#pragma unroll
    for (int i = 0; i < kChunk; ++i) {
      y[i] = 0.0f;
      if (i < n) {
        const float si = __ldg(scale + (A == Axis::kRow ? r : c));
        y[i] = dequantize_value(q[i], F, si);
        if (++c == cols) {
          c = 0;
          ++r;
        }
      }
    }
  }

  OutT* dst = out + e0;
  if constexpr (std::is_same_v<OutT, float>) {
    if (n == kChunk) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        reinterpret_cast<float4*>(dst)[j] = make_float4(y[4 * j], y[4 * j + 1], y[4 * j + 2], y[4 * j + 3]);
      }
    } else {
#pragma unroll
      for (int i = 0; i < kChunk; ++i) {
        if (i < n) dst[i] = y[i];
      }
    }
  } else {
    if (n == kChunk) {
      uint32_t w[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        w[j] = static_cast<uint32_t>(float_to_bf16(y[2 * j])) |
               (static_cast<uint32_t>(float_to_bf16(y[2 * j + 1])) << 16);
      }
      reinterpret_cast<uint4*>(dst)[0] = make_uint4(w[0], w[1], w[2], w[3]);
      reinterpret_cast<uint4*>(dst)[1] = make_uint4(w[4], w[5], w[6], w[7]);
    } else {
#pragma unroll
      for (int i = 0; i < kChunk; ++i) {
        if (i < n) dst[i] = float_to_bf16(y[i]);
      }
    }
  }
}

// 8 elements per thread: one 16-byte access on the bf16 side, two on the fp32 side.
// kVec is false when a pointer is not 16-byte aligned (the backend's own conversions of a
// caller's bias, which validation does not align), and the thread goes element by element.
template <bool kVec>
__global__ void __launch_bounds__(kThreads)
    f32_to_bf16_kernel(const float* __restrict__ in, bf16_bits* __restrict__ out, int64_t n) {
  const int64_t i0 = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) * 8;
  if (i0 >= n) return;
  if (kVec && n - i0 >= 8) {
    const float4 a = __ldg(reinterpret_cast<const float4*>(in + i0));
    const float4 b = __ldg(reinterpret_cast<const float4*>(in + i0 + 4));
    const auto pack = [](float lo, float hi) {
      return static_cast<uint32_t>(float_to_bf16(lo)) | (static_cast<uint32_t>(float_to_bf16(hi)) << 16);
    };
    *reinterpret_cast<uint4*>(out + i0) = make_uint4(pack(a.x, a.y), pack(a.z, a.w), pack(b.x, b.y), pack(b.z, b.w));
  } else {
    const int64_t end = n - i0 < 8 ? n : i0 + 8;
    for (int64_t i = i0; i < end; ++i) out[i] = float_to_bf16(in[i]);
  }
}

template <bool kVec>
__global__ void __launch_bounds__(kThreads)
    bf16_to_f32_kernel(const bf16_bits* __restrict__ in, float* __restrict__ out, int64_t n) {
  const int64_t i0 = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) * 8;
  if (i0 >= n) return;
  if (kVec && n - i0 >= 8) {
    float v[8];
    Hp<bf16_bits>::load_vec(in + i0, v);
    reinterpret_cast<float4*>(out + i0)[0] = make_float4(v[0], v[1], v[2], v[3]);
    reinterpret_cast<float4*>(out + i0)[1] = make_float4(v[4], v[5], v[6], v[7]);
  } else {
    const int64_t end = n - i0 < 8 ? n : i0 + 8;
    for (int64_t i = i0; i < end; ++i) out[i] = bf16_to_float(in[i]);
  }
}

// Any shape and alignment (else transpose_words_kernel): one 32 x 32 byte tile per block of
// 32 x 8 threads, each thread moving four bytes; the tile row is padded by one byte so the
// column reads hit distinct banks. Grid: x over column tiles, y over row tiles (looping
// past 65535).
constexpr int kByteTile = 32;
constexpr int kByteTileRowsPerPass = 8;
__global__ void transpose_bytes_kernel(const uint8_t* __restrict__ src, int64_t rows, int64_t cols,
                                       uint8_t* __restrict__ dst) {
  __shared__ uint8_t tile[kByteTile][kByteTile + 1];
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kByteTile;
  for (int64_t r0 = static_cast<int64_t>(blockIdx.y) * kByteTile; r0 < rows;
       r0 += static_cast<int64_t>(gridDim.y) * kByteTile) {
    for (int i = threadIdx.y; i < kByteTile; i += kByteTileRowsPerPass) {
      const int64_t r = r0 + i, c = c0 + threadIdx.x;
      if (r < rows && c < cols) tile[i][threadIdx.x] = src[r * cols + c];
    }
    __syncthreads();
    for (int i = threadIdx.y; i < kByteTile; i += kByteTileRowsPerPass) {
      const int64_t c = c0 + i, r = r0 + threadIdx.x;  // dst row c, column r
      if (c < cols && r < rows) dst[c * rows + r] = tile[threadIdx.x][i];
    }
    __syncthreads();
  }
}

__global__ void broadcast_kernel(const float* __restrict__ scalar, float* __restrict__ out, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i < n) out[i] = *scalar;
}

// A grid-stride pass; out's old value, the product and the bias meet in fp32 and round once.
template <typename OutT>
__global__ void add_product_kernel(OutT* __restrict__ out, const float* __restrict__ product, float beta, int64_t n,
                                   const void* __restrict__ bias, bool bias_bf16, int64_t bias_period) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    float b = 0.0f;
    if (bias != nullptr) {
      const int64_t j = i % bias_period;
      b = bias_bf16 ? bf16_to_float(static_cast<const bf16_bits*>(bias)[j]) : static_cast<const float*>(bias)[j];
    }
    if constexpr (std::is_same_v<OutT, float>) {
      out[i] = beta * out[i] + product[i] + b;
    } else {
      out[i] = float_to_bf16(beta * bf16_to_float(out[i]) + product[i] + b);
    }
  }
}

// Grid: x over column blocks, y over rows (looping past 65535); no per-element division.
template <typename OutT>
__global__ void bias_fill_kernel(OutT* __restrict__ out, int64_t m, int64_t n, const float* __restrict__ bias,
                                 float beta) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (j >= n) return;
  const float b = bias != nullptr ? bias[j] : 0.0f;
  for (int64_t i = blockIdx.y; i < m; i += gridDim.y) {
    OutT* p = out + i * n + j;
    float v = b;
    if (beta != 0.0f) {
      if constexpr (std::is_same_v<OutT, float>) {
        v = beta * *p + b;
      } else {
        v = beta * bf16_to_float(*p) + b;
      }
    }
    if constexpr (std::is_same_v<OutT, float>) {
      *p = v;
    } else {
      *p = float_to_bf16(v);
    }
  }
}

// ---- launch helpers --------------------------------------------------------------------------------

LaunchResult after_launch(const char* kernel) {
  const cudaError_t e = cudaGetLastError();
  return {e, e == cudaSuccess ? nullptr : kernel};
}

// kernel<<<grid, kThreads, 0, stream>>>(args...), with programmatic stream serialization
// when `early`: the kernel may then start before the launch ahead of it has finished.
// Casts whose scales come from the launch just before them start early: their blocks load
// their first tiles before wait_for_prerequisite_grid.
template <typename... Params, typename... Args>
LaunchResult launch_kernel(const char* name, void (*kernel)(Params...), dim3 grid, cudaStream_t stream, bool early,
                           Args... args) {
  if (!early) {
    kernel<<<grid, kThreads, 0, stream>>>(args...);
    return after_launch(name);
  }
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  const cudaError_t e = cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...);
  if (e != cudaSuccess) {
    cudaGetLastError();  // the error is returned here; do not leave it for the next check
    return {e, name};
  }
  return after_launch(name);
}

LaunchResult zero(float* p, int64_t count, cudaStream_t stream) {
  if (count == 0) return {};
  const cudaError_t e = cudaMemsetAsync(p, 0, static_cast<size_t>(count) * sizeof(float), stream);
  return {e, e == cudaSuccess ? nullptr : "cudaMemsetAsync"};
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Blocks for `items` items of `per_block` each; 0 when the grid would exceed CUDA's limit.
unsigned blocks_for(int64_t items, int64_t per_block) {
  const int64_t b = ceil_div(items, per_block);
  return b > INT_MAX ? 0u : static_cast<unsigned>(b);
}

const LaunchResult kTooLarge{cudaErrorInvalidConfiguration, "grid size (matrix too large for one launch)"};

int64_t count_for(Axis axis, int64_t rows, int64_t cols) {
  return axis == Axis::kTensor ? 1 : axis == Axis::kRow ? rows : cols;
}

// Runtime -> compile-time dispatch. Each calls fn with a tag whose type names the choice.
template <typename Fn>
LaunchResult with_type(HpType t, Fn&& fn) {
  return t == HpType::kFloat32 ? fn(float{}) : fn(bf16_bits{});
}

template <typename Fn>
LaunchResult with_format(Format f, Fn&& fn) {
  return f == Format::kE4M3 ? fn(std::integral_constant<Format, Format::kE4M3>{})
                            : fn(std::integral_constant<Format, Format::kE5M2>{});
}

template <typename Fn>
LaunchResult with_flag(bool b, Fn&& fn) {
  return b ? fn(std::true_type{}) : fn(std::false_type{});
}

template <typename Fn>
LaunchResult with_axis(Axis a, Fn&& fn) {
  switch (a) {
    case Axis::kTensor: return fn(std::integral_constant<Axis, Axis::kTensor>{});
    case Axis::kRow: return fn(std::integral_constant<Axis, Axis::kRow>{});
    case Axis::kColumn: break;
  }
  return fn(std::integral_constant<Axis, Axis::kColumn>{});
}

template <typename T, Format F, Axis A, bool kQuantize, bool kAmax, bool kCount = false>
LaunchResult launch_flat(const void* in, int64_t rows, int64_t cols, const ScaleSource& scale, bool saturate,
                         uint8_t* out, float* amax, uint64_t* counts, cudaStream_t stream) {
  const int64_t total = rows * cols;
  const unsigned blocks = blocks_for(ceil_div(total, kChunk), kThreads);
  if (blocks == 0) return kTooLarge;
  return launch_kernel(kQuantize ? "flat cast kernel" : "amax kernel",
                       flat_cast_kernel<T, F, A, kQuantize, kAmax, kCount>, dim3(blocks), stream,
                       kQuantize && scale.amax != nullptr,
                       static_cast<const T*>(in), total, cols, scale, saturate, out, reinterpret_cast<unsigned*>(amax),
                       reinterpret_cast<unsigned long long*>(counts));
}

// Row tiles a block of the tiled kernel takes at once (tiled_min_blocks says why): two for
// bf16 input, one for fp32, whose loads already fill the memory pipe.
template <typename T>
constexpr int kTiledRowTiles = std::is_same_v<T, float> ? 1 : 2;

template <typename T, Format F, Axis A, bool kQuantize, bool kAmax, bool kCount, int kRowTiles, bool kDual>
LaunchResult launch_tiled_groups(const void* in, int64_t rows, int64_t cols, const ScaleSource& scale, bool saturate,
                                 uint8_t* out, uint8_t* out_t, float* amax, uint64_t* counts,
                                 const ColumnHalf& column, cudaStream_t stream) {
  const unsigned gx = blocks_for(cols, kTile);
  if (gx == 0) return kTooLarge;
  const int64_t groups = ceil_div(rows, static_cast<int64_t>(kTile) * kRowTiles);
  const dim3 grid(gx, static_cast<unsigned>(groups < kMaxGridY ? groups : kMaxGridY));
  return launch_kernel(kQuantize ? (kDual ? "dual cast kernel" : "tiled cast kernel")
                                 : (kDual ? "row and column amax kernel" : "columnwise amax kernel"),
                       tiled_cast_kernel<T, F, A, kQuantize, kAmax, kRowTiles, kCount, kDual>, grid, stream,
                       kQuantize && scale.amax != nullptr, static_cast<const T*>(in), rows, cols,
                       scale, saturate, out, out_t, reinterpret_cast<unsigned*>(amax),
                       reinterpret_cast<unsigned long long*>(counts), column);
}

template <typename T, Format F, Axis A, bool kQuantize, bool kAmax, bool kCount = false, bool kDual = false>
LaunchResult launch_tiled(const void* in, int64_t rows, int64_t cols, const ScaleSource& scale, bool saturate,
                          uint8_t* out, uint8_t* out_t, float* amax, uint64_t* counts, cudaStream_t stream,
                          const ColumnHalf& column = {}) {
  return launch_tiled_groups<T, F, A, kQuantize, kAmax, kCount, kTiledRowTiles<T>, kDual>(
      in, rows, cols, scale, saturate, out, out_t, amax, counts, column, stream);
}

ScaleSource scale_source_of(const CastLaunch& a) {
  ScaleSource scale;
  scale.scale = a.scale;
  scale.amax = a.scale_amax;
  scale.pow2 = a.pow2_scale;
  scale.scale_out = a.scale_out;
  scale.inv_scale_out = a.inv_scale_out;
  return scale;
}

LaunchResult zero_counts(uint64_t* counts, cudaStream_t stream) {
  if (counts == nullptr) return {};
  const cudaError_t e = cudaMemsetAsync(counts, 0, 2 * sizeof(uint64_t), stream);
  return {e, e == cudaSuccess ? nullptr : "cudaMemsetAsync(range counts)"};
}

// A rowwise cast and its columnwise twin in one tiled pass (CastLaunch::columnwise).
LaunchResult launch_dual_cast(const CastLaunch& a, cudaStream_t stream) {
  if (a.axis != Axis::kRow || a.out_t != nullptr || a.amax != nullptr || a.columnwise.scale == nullptr) {
    return {cudaErrorInvalidValue,
            "dual cast kernel (a rowwise cast, out_t and amax null, with the columnwise half's scales)"};
  }
  if (auto r = zero_counts(a.range_counts, stream); !r.ok()) return r;
  if (auto r = zero_counts(a.columnwise.range_counts, stream); !r.ok()) return r;
  if (a.rows == 0 || a.cols == 0) return {};
  const ScaleSource scale = scale_source_of(a);
  ColumnHalf column;
  column.scale = a.columnwise.scale;
  column.counts = reinterpret_cast<unsigned long long*>(a.columnwise.range_counts);
  const bool count = a.range_counts != nullptr || a.columnwise.range_counts != nullptr;
  return with_type(a.type, [&](auto type_tag) {
    using T = decltype(type_tag);
    return with_format(a.format, [&](auto format_tag) {
      constexpr Format F = decltype(format_tag)::value;
      return with_flag(count, [&](auto count_tag) {
        constexpr bool kCount = decltype(count_tag)::value;
        return launch_tiled<T, F, Axis::kRow, true, false, kCount, true>(a.input, a.rows, a.cols, scale, a.saturate,
                                                                         a.out, a.columnwise.out_t, nullptr,
                                                                         a.range_counts, stream, column);
      });
    });
  });
}

}  // namespace

LaunchResult launch_amax(const void* x, HpType type, int64_t rows, int64_t cols, Axis axis, float* out,
                         cudaStream_t stream) {
  const int64_t n = rows * cols;
  if (axis == Axis::kTensor && n > 0 && n <= kSmallAmaxElements) {
    // One block writes the amax: one launch where zeroing and a folding kernel take two.
    return with_type(type, [&](auto tag) {
      using T = decltype(tag);
      small_amax_kernel<T><<<1, kThreads, 0, stream>>>(static_cast<const T*>(x), n, reinterpret_cast<unsigned*>(out));
      return after_launch("small amax kernel");
    });
  }
  if (auto r = zero(out, count_for(axis, rows, cols), stream); !r.ok()) return r;
  if (rows == 0 || cols == 0) return {};
  return with_type(type, [&](auto tag) {
    using T = decltype(tag);
    constexpr Format kAny = Format::kE4M3;  // no quantization: the format is unused
    switch (axis) {
      case Axis::kTensor: return launch_flat<T, kAny, Axis::kTensor, false, true>(x, rows, cols, {}, true, nullptr,
                                                                                 out, nullptr, stream);
      case Axis::kRow: return launch_flat<T, kAny, Axis::kRow, false, true>(x, rows, cols, {}, true, nullptr, out,
                                                                           nullptr, stream);
      case Axis::kColumn: break;
    }
    return launch_tiled<T, kAny, Axis::kColumn, false, true>(x, rows, cols, {}, true, nullptr, nullptr, out, nullptr,
                                                             stream);
  });
}

LaunchResult launch_row_and_column_amax(const void* x, HpType type, int64_t rows, int64_t cols, float* row_amax,
                                        float* col_amax, cudaStream_t stream) {
  if (auto r = zero(row_amax, rows, stream); !r.ok()) return r;
  if (auto r = zero(col_amax, cols, stream); !r.ok()) return r;
  if (rows == 0 || cols == 0) return {};
  ColumnHalf column;
  column.amax = reinterpret_cast<unsigned*>(col_amax);
  return with_type(type, [&](auto tag) {
    using T = decltype(tag);
    constexpr Format kAny = Format::kE4M3;  // no quantization: the format is unused
    return launch_tiled<T, kAny, Axis::kRow, false, true, false, true>(x, rows, cols, {}, true, nullptr, nullptr,
                                                                       row_amax, nullptr, stream, column);
  });
}

LaunchResult launch_compute_scales(const float* amax, int64_t n, Format format, bool pow2, float* scale,
                                   float* inv_scale, cudaStream_t stream) {
  if (n == 0) return {};
  const unsigned blocks = blocks_for(n, kThreads);
  if (blocks == 0) return kTooLarge;
  compute_scales_kernel<<<blocks, kThreads, 0, stream>>>(amax, n, format, pow2, scale, inv_scale);
  return after_launch("compute_scales kernel");
}

LaunchResult launch_cast(const CastLaunch& a, cudaStream_t stream) {
  if (a.scale_amax != nullptr && a.axis == Axis::kColumn) {
    return {cudaErrorInvalidValue, "cast kernel (scales from amaxes are for tensorwise and rowwise casts)"};
  }
  if (a.columnwise.out_t != nullptr) return launch_dual_cast(a, stream);
  ScaleSource scale = scale_source_of(a);
  if (a.amax != nullptr) {
    if (auto r = zero(a.amax, count_for(a.axis, a.rows, a.cols), stream); !r.ok()) return r;
  }
  if (auto r = zero_counts(a.range_counts, stream); !r.ok()) return r;
  if (a.rows == 0 || a.cols == 0) return {};
  // The tiled kernel is needed for the transpose, and for columnwise amax (a reduction
  // down columns); everything else streams through the flat kernel.
  const bool tiled = a.out_t != nullptr || (a.amax != nullptr && a.axis == Axis::kColumn);
  if (scale.amax != nullptr && a.axis == Axis::kRow && !tiled && a.cols % kChunk != 0) {
    // Rows that end inside the flat kernel's chunks: the kernel reads those rows' scales
    // rather than deriving them, so they are derived first.
    if (a.scale_out == nullptr) return {cudaErrorInvalidValue, "cast kernel (rowwise scales need scale_out)"};
    if (auto r = launch_compute_scales(a.scale_amax, a.rows, a.format, a.pow2_scale, a.scale_out, a.inv_scale_out,
                                       stream);
        !r.ok()) {
      return r;
    }
    scale = ScaleSource{};
    scale.scale = a.scale_out;
  }
  return with_type(a.type, [&](auto type_tag) {
    using T = decltype(type_tag);
    return with_format(a.format, [&](auto format_tag) {
      constexpr Format F = decltype(format_tag)::value;
      return with_axis(a.axis, [&](auto axis_tag) {
        constexpr Axis A = decltype(axis_tag)::value;
        return with_flag(a.range_counts != nullptr, [&](auto count_tag) {
          constexpr bool kCount = decltype(count_tag)::value;
          if (tiled) {
            return a.amax != nullptr
                       ? launch_tiled<T, F, A, true, true, kCount>(a.input, a.rows, a.cols, scale, a.saturate, a.out,
                                                                   a.out_t, a.amax, a.range_counts, stream)
                       : launch_tiled<T, F, A, true, false, kCount>(a.input, a.rows, a.cols, scale, a.saturate,
                                                                    a.out, a.out_t, nullptr, a.range_counts, stream);
          }
          if constexpr (A != Axis::kColumn) {
            if (a.amax != nullptr) {
              return launch_flat<T, F, A, true, true, kCount>(a.input, a.rows, a.cols, scale, a.saturate, a.out,
                                                              a.amax, a.range_counts, stream);
            }
          }
          return launch_flat<T, F, A, true, false, kCount>(a.input, a.rows, a.cols, scale, a.saturate, a.out,
                                                           nullptr, a.range_counts, stream);
        });
      });
    });
  });
}

LaunchResult launch_range_count(const void* input, HpType type, int64_t rows, int64_t cols, Format format, Axis axis,
                                const float* scale, uint64_t* counts, cudaStream_t stream) {
  static_assert(sizeof(uint64_t) == sizeof(unsigned long long), "counts are 64-bit atomics");
  const cudaError_t e = cudaMemsetAsync(counts, 0, 2 * sizeof(uint64_t), stream);
  if (e != cudaSuccess) return {e, "cudaMemsetAsync"};
  const int64_t total = rows * cols;
  if (total == 0) return {};
  const int64_t needed = ceil_div(ceil_div(total, kChunk), kThreads);
  const auto blocks = static_cast<unsigned>(needed < kMaxRangeBlocks ? needed : kMaxRangeBlocks);
  auto* dst = reinterpret_cast<unsigned long long*>(counts);
  return with_type(type, [&](auto type_tag) {
    using T = decltype(type_tag);
    return with_format(format, [&](auto format_tag) {
      constexpr Format F = decltype(format_tag)::value;
      return with_axis(axis, [&](auto axis_tag) {
        constexpr Axis A = decltype(axis_tag)::value;
        range_count_kernel<T, F, A><<<blocks, kThreads, 0, stream>>>(static_cast<const T*>(input), total, cols, scale,
                                                                     dst);
        return after_launch("range count kernel");
      });
    });
  });
}

LaunchResult launch_dequantize(const uint8_t* input, Format format, int64_t rows, int64_t cols, Axis axis,
                               const float* scale, HpType out_type, void* out, cudaStream_t stream) {
  const int64_t total = rows * cols;
  if (total == 0) return {};
  const unsigned blocks = blocks_for(ceil_div(total, kChunk), kThreads);
  if (blocks == 0) return kTooLarge;
  return with_type(out_type, [&](auto type_tag) {
    using OutT = decltype(type_tag);
    return with_format(format, [&](auto format_tag) {
      constexpr Format F = decltype(format_tag)::value;
      return with_axis(axis, [&](auto axis_tag) {
        constexpr Axis A = decltype(axis_tag)::value;
        dequantize_kernel<OutT, F, A><<<blocks, kThreads, 0, stream>>>(input, total, cols, scale,
                                                                       static_cast<OutT*>(out));
        return after_launch("dequantize kernel");
      });
    });
  });
}

LaunchResult launch_block_cast(const BlockCastLaunch& a, cudaStream_t stream) {
  if (auto r = zero_counts(a.range_counts, stream); !r.ok()) return r;
  // An empty matrix has no tiles or blocks, so no scale entries either.
  if (a.rows == 0 || a.cols == 0) return {};
  const unsigned stripes = blocks_for(a.cols, kScaleTile);
  if (stripes == 0) return kTooLarge;
  const int64_t bands = ceil_div(a.rows, kScaleTile);
  const dim3 grid(stripes, static_cast<unsigned>(bands < kMaxGridY ? bands : kMaxGridY));
  BlockCastArgs args;
  args.scale = a.scale;
  args.pow2 = a.pow2_scale;
  args.saturate = a.saturate;
  args.out = a.out;
  args.amax = a.amax;
  args.scale_out = a.scale_out;
  args.inv_scale_out = a.inv_scale_out;
  args.counts = reinterpret_cast<unsigned long long*>(a.range_counts);
  return with_type(a.type, [&](auto type_tag) {
    using T = decltype(type_tag);
    return with_format(a.format, [&](auto format_tag) {
      constexpr Format F = decltype(format_tag)::value;
      return with_flag(a.square, [&](auto square_tag) {
        constexpr bool kSquare = decltype(square_tag)::value;
        block_cast_kernel<T, F, kSquare><<<grid, kThreads, 0, stream>>>(static_cast<const T*>(a.input), a.rows,
                                                                        a.cols, args);
        return after_launch("block cast kernel");
      });
    });
  });
}

LaunchResult launch_block_dequantize(const uint8_t* input, Format format, int64_t rows, int64_t cols, bool square,
                                     const float* scale, HpType out_type, void* out, cudaStream_t stream) {
  const int64_t total = rows * cols;
  if (total == 0) return {};
  // Grid-stride: enough blocks to fill the GPU, each thread then looping.
  const int64_t needed = ceil_div(total, kThreads);
  const auto blocks = static_cast<unsigned>(needed < kMaxRangeBlocks ? needed : kMaxRangeBlocks);
  return with_type(out_type, [&](auto type_tag) {
    using OutT = decltype(type_tag);
    return with_format(format, [&](auto format_tag) {
      constexpr Format F = decltype(format_tag)::value;
      return with_flag(square, [&](auto square_tag) {
        constexpr bool kSquare = decltype(square_tag)::value;
        block_dequantize_kernel<OutT, F, kSquare><<<blocks, kThreads, 0, stream>>>(input, rows, cols, scale,
                                                                                  static_cast<OutT*>(out));
        return after_launch("block dequantize kernel");
      });
    });
  });
}

LaunchResult launch_convert(const void* in, HpType in_type, void* out, HpType out_type, int64_t n,
                            cudaStream_t stream) {
  if (n == 0 || in_type == out_type) return {};
  const unsigned blocks = blocks_for(ceil_div(n, 8), kThreads);
  if (blocks == 0) return kTooLarge;
  const bool vec = ((reinterpret_cast<uintptr_t>(in) | reinterpret_cast<uintptr_t>(out)) & 15u) == 0;
  if (in_type == HpType::kFloat32) {
    const auto* src = static_cast<const float*>(in);
    auto* dst = static_cast<bf16_bits*>(out);
    if (vec) {
      f32_to_bf16_kernel<true><<<blocks, kThreads, 0, stream>>>(src, dst, n);
    } else {
      f32_to_bf16_kernel<false><<<blocks, kThreads, 0, stream>>>(src, dst, n);
    }
  } else {
    const auto* src = static_cast<const bf16_bits*>(in);
    auto* dst = static_cast<float*>(out);
    if (vec) {
      bf16_to_f32_kernel<true><<<blocks, kThreads, 0, stream>>>(src, dst, n);
    } else {
      bf16_to_f32_kernel<false><<<blocks, kThreads, 0, stream>>>(src, dst, n);
    }
  }
  return after_launch("convert kernel");
}

LaunchResult launch_broadcast(const float* scalar, float* out, int64_t n, cudaStream_t stream) {
  if (n == 0) return {};
  const unsigned blocks = blocks_for(n, kThreads);
  if (blocks == 0) return kTooLarge;
  broadcast_kernel<<<blocks, kThreads, 0, stream>>>(scalar, out, n);
  return after_launch("broadcast kernel");
}

LaunchResult launch_transpose_bytes(const uint8_t* src, int64_t rows, int64_t cols, uint8_t* dst,
                                    cudaStream_t stream) {
  if (rows == 0 || cols == 0) return {};
  const bool words = rows % 4 == 0 && cols % 4 == 0 && reinterpret_cast<uintptr_t>(src) % 4 == 0 &&
                     reinterpret_cast<uintptr_t>(dst) % 4 == 0;
  if (words) {
    const unsigned wx = blocks_for(cols, kWordTile);
    if (wx == 0) return kTooLarge;
    const int64_t tiles = ceil_div(rows, static_cast<int64_t>(kWordTile));
    const dim3 grid(wx, static_cast<unsigned>(tiles < kMaxGridY ? tiles : kMaxGridY));
    transpose_words_kernel<<<grid, kThreads, 0, stream>>>(src, rows, cols, dst);
    return after_launch("transpose_words kernel");
  }
  const unsigned gx = blocks_for(cols, kByteTile);
  if (gx == 0) return kTooLarge;
  const int64_t row_tiles = (rows + kByteTile - 1) / kByteTile;
  const dim3 grid(gx, static_cast<unsigned>(row_tiles < kMaxGridY ? row_tiles : kMaxGridY));
  transpose_bytes_kernel<<<grid, dim3(kByteTile, kByteTileRowsPerPass), 0, stream>>>(src, rows, cols, dst);
  return after_launch("transpose_bytes kernel");
}

LaunchResult launch_bias_fill(void* out, HpType out_type, int64_t m, int64_t n, const float* bias, float beta,
                              cudaStream_t stream) {
  if (m == 0 || n == 0) return {};
  const unsigned gx = blocks_for(n, kThreads);
  if (gx == 0) return kTooLarge;
  const dim3 grid(gx, static_cast<unsigned>(m < kMaxGridY ? m : kMaxGridY));
  if (out_type == HpType::kFloat32) {
    bias_fill_kernel<float><<<grid, kThreads, 0, stream>>>(static_cast<float*>(out), m, n, bias, beta);
  } else {
    bias_fill_kernel<bf16_bits><<<grid, kThreads, 0, stream>>>(static_cast<bf16_bits*>(out), m, n, bias, beta);
  }
  return after_launch("bias fill kernel");
}

LaunchResult launch_add_product(void* out, HpType out_type, const float* product, float beta, int64_t n,
                                const void* bias, HpType bias_type, int64_t bias_period, cudaStream_t stream) {
  if (n == 0) return {};
  const int64_t wanted = ceil_div(n, kThreads);
  const auto blocks = static_cast<unsigned>(wanted < 4096 ? wanted : 4096);  // grid-stride beyond
  const bool bias_bf16 = bias_type == HpType::kBFloat16;
  if (out_type == HpType::kFloat32) {
    add_product_kernel<float><<<blocks, kThreads, 0, stream>>>(static_cast<float*>(out), product, beta, n, bias,
                                                               bias_bf16, bias_period);
  } else {
    add_product_kernel<bf16_bits><<<blocks, kThreads, 0, stream>>>(static_cast<bf16_bits*>(out), product, beta, n,
                                                                   bias, bias_bf16, bias_period);
  }
  return after_launch("add product kernel");
}

cudaError_t probe_kernel_image() {
  cudaFuncAttributes attributes;
  return cudaFuncGetAttributes(&attributes, compute_scales_kernel);
}

}  // namespace fp8::cuda
