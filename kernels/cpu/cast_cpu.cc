#include "cpu/cast_cpu.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "cpu/cast_avx2.h"
#include "cpu/parallel.h"
#include "cpu/transpose.h"

namespace fp8::cpu {
namespace {

// The portable loops: the whole cast on CPUs without AVX2, and the tails that the AVX2
// kernels (cast_avx2.h) leave. They are the shared per-element code of fp8/arith.h,
// compiled twice (an AVX2 clone is picked at load time where the CPU has it).
#define FP8_VECTOR_CLONES __attribute__((target_clones("avx2", "default")))

// Rows shorter than this share a chunk with their neighbours; casts are memory bound,
// so a chunk should move at least a few hundred KiB to be worth a thread wake-up.
constexpr int64_t kElementsPerChunk = 1 << 16;
// Transposed output is produced in tiles of this many rows and columns.
constexpr int64_t kTile = 64;
// bf16 inputs are widened into a stack buffer of this many values at a time.
constexpr int64_t kSpan = 1024;

int64_t rows_grain(int64_t cols) { return std::max<int64_t>(1, kElementsPerChunk / std::max<int64_t>(cols, 1)); }

// ---- span kernels: one contiguous run of fp32 values ----------------------------------

template <Format F>
[[gnu::always_inline]] inline uint32_t cast_span_impl(const float* x, int64_t n, float scale, bool sat,
                                                      uint8_t* out) {
  uint32_t acc = 0;
  for (int64_t i = 0; i < n; ++i) {
    acc = amax_bits_update(acc, x[i]);
    out[i] = float_to_fp8(x[i] * scale, F, sat);
  }
  return acc;
}

template <Format F>
[[gnu::always_inline]] inline void cast_span_colscale_impl(const float* x, int64_t n, const float* scale, bool sat,
                                                           uint8_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = float_to_fp8(x[i] * scale[i], F, sat);
}

FP8_VECTOR_CLONES uint32_t cast_span_e4m3(const float* x, int64_t n, float s, bool sat, uint8_t* o) {
  return cast_span_impl<Format::kE4M3>(x, n, s, sat, o);
}
FP8_VECTOR_CLONES uint32_t cast_span_e5m2(const float* x, int64_t n, float s, bool sat, uint8_t* o) {
  return cast_span_impl<Format::kE5M2>(x, n, s, sat, o);
}
FP8_VECTOR_CLONES void cast_span_colscale_e4m3(const float* x, int64_t n, const float* s, bool sat, uint8_t* o) {
  cast_span_colscale_impl<Format::kE4M3>(x, n, s, sat, o);
}
FP8_VECTOR_CLONES void cast_span_colscale_e5m2(const float* x, int64_t n, const float* s, bool sat, uint8_t* o) {
  cast_span_colscale_impl<Format::kE5M2>(x, n, s, sat, o);
}

// Range counts (count_cast_range): plain sums of the arith.h predicates, which are
// comparisons on bit patterns, so these loops vectorise like the casts.
struct RangeTally {
  int64_t saturated = 0;
  int64_t underflow = 0;
  RangeTally& operator+=(const RangeTally& o) {
    saturated += o.saturated;
    underflow += o.underflow;
    return *this;
  }
};

template <Format F>
[[gnu::always_inline]] inline RangeTally count_span_impl(const float* x, int64_t n, float scale) {
  int64_t sat = 0, under = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float y = x[i] * scale;
    sat += fp8_saturates(y, F);
    under += fp8_underflows(x[i], y, F);
  }
  return {sat, under};
}

template <Format F>
[[gnu::always_inline]] inline RangeTally count_span_colscale_impl(const float* x, int64_t n, const float* scale) {
  int64_t sat = 0, under = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float y = x[i] * scale[i];
    sat += fp8_saturates(y, F);
    under += fp8_underflows(x[i], y, F);
  }
  return {sat, under};
}

FP8_VECTOR_CLONES RangeTally count_span_e4m3(const float* x, int64_t n, float s) {
  return count_span_impl<Format::kE4M3>(x, n, s);
}
FP8_VECTOR_CLONES RangeTally count_span_e5m2(const float* x, int64_t n, float s) {
  return count_span_impl<Format::kE5M2>(x, n, s);
}
FP8_VECTOR_CLONES RangeTally count_span_colscale_e4m3(const float* x, int64_t n, const float* s) {
  return count_span_colscale_impl<Format::kE4M3>(x, n, s);
}
FP8_VECTOR_CLONES RangeTally count_span_colscale_e5m2(const float* x, int64_t n, const float* s) {
  return count_span_colscale_impl<Format::kE5M2>(x, n, s);
}

FP8_VECTOR_CLONES uint32_t amax_span(const float* x, int64_t n) {
  uint32_t acc = 0;
  for (int64_t i = 0; i < n; ++i) acc = amax_bits_update(acc, x[i]);
  return acc;
}

FP8_VECTOR_CLONES void amax_cols_update(const float* x, int64_t n, uint32_t* acc) {
  for (int64_t i = 0; i < n; ++i) acc[i] = amax_bits_update(acc[i], x[i]);
}

FP8_VECTOR_CLONES void widen_bf16_span(const uint16_t* in, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_float(in[i]);
}

FP8_VECTOR_CLONES void narrow_bf16_span(const float* in, int64_t n, uint16_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = float_to_bf16(in[i]);
}

// Visits `count` consecutive elements of a fp32 or bf16 matrix from flat offset `begin`
// as fp32 pieces of at most kSpan values, calling fn(values, offset from begin, count).
// fp32 data is visited in place, in one piece.
template <class Fn>
void for_each_piece(const MatrixRef& x, int64_t begin, int64_t count, Fn&& fn) {
  if (x.dtype == DType::kFloat32) {
    fn(static_cast<const float*>(x.data) + begin, int64_t{0}, count);
    return;
  }
  const uint16_t* p = static_cast<const uint16_t*>(x.data) + begin;
  float buf[kSpan];
  for (int64_t i = 0; i < count; i += kSpan) {
    const int64_t n = std::min(kSpan, count - i);
    widen_bf16_span(p + i, n, buf);
    fn(static_cast<const float*>(buf), i, n);
  }
}

uint32_t cast_span(Format f, const float* x, int64_t n, float s, bool sat, uint8_t* o) {
  return f == Format::kE4M3 ? cast_span_e4m3(x, n, s, sat, o) : cast_span_e5m2(x, n, s, sat, o);
}

void cast_span_colscale(Format f, const float* x, int64_t n, const float* s, bool sat, uint8_t* o) {
  if (f == Format::kE4M3) {
    cast_span_colscale_e4m3(x, n, s, sat, o);
  } else {
    cast_span_colscale_e5m2(x, n, s, sat, o);
  }
}

RangeTally count_span(Format f, const float* x, int64_t n, float s) {
  return f == Format::kE4M3 ? count_span_e4m3(x, n, s) : count_span_e5m2(x, n, s);
}

RangeTally count_span_colscale(Format f, const float* x, int64_t n, const float* s) {
  return f == Format::kE4M3 ? count_span_colscale_e4m3(x, n, s) : count_span_colscale_e5m2(x, n, s);
}

const bool kHaveAvx2 = avx2::available();

// Casts elements [c0, c0 + n) of row `row` into out[0, n). With `per_col`, `scale`
// points at column c0's scale; otherwise *scale applies to all. Returns the amax bits of
// the input values (not meaningful with per_col; column amaxes are a separate pass).
uint32_t cast_row_span(const CastArgs& a, int64_t row, int64_t c0, int64_t n, const float* scale, bool per_col,
                       uint8_t* out) {
  const MatrixRef& x = a.input;
  const int64_t off = row * x.cols + c0;
  uint32_t acc = 0;
  int64_t done = 0;
  if (kHaveAvx2) {
    if (x.dtype == DType::kFloat32) {
      const float* p = static_cast<const float*>(x.data) + off;
      done = per_col ? avx2::cast_f32_colscale(p, n, scale, a.format, a.saturate, out)
                     : avx2::cast_f32(p, n, *scale, a.format, a.saturate, out, &acc);
    } else {
      const uint16_t* p = static_cast<const uint16_t*>(x.data) + off;
      done = per_col ? avx2::cast_bf16_colscale(p, n, scale, a.format, a.saturate, out)
                     : avx2::cast_bf16(p, n, *scale, a.format, a.saturate, out, &acc);
    }
  }
  // The tail, or everything on a CPU without AVX2.
  for_each_piece(x, off + done, n - done, [&](const float* v, int64_t i, int64_t m) {
    uint8_t* o = out + done + i;
    if (per_col) {
      cast_span_colscale(a.format, v, m, scale + done + i, a.saturate, o);
    } else {
      acc = std::max(acc, cast_span(a.format, v, m, *scale, a.saturate, o));
    }
  });
  return acc;
}

// max |x| bits over `count` elements from flat offset `begin`.
uint32_t amax_flat(const MatrixRef& x, int64_t begin, int64_t count) {
  uint32_t acc = 0;
  int64_t done = 0;
  if (x.dtype == DType::kBFloat16 && kHaveAvx2) {
    done = avx2::amax_bf16(static_cast<const uint16_t*>(x.data) + begin, count, &acc);
  }
  for_each_piece(x, begin + done, count - done, [&](const float* v, int64_t, int64_t m) { acc = std::max(acc, amax_span(v, m)); });
  return acc;
}

// Folds row `row` into per-column amax accumulators.
void amax_cols_row(const MatrixRef& x, int64_t row, uint32_t* col_acc) {
  for_each_piece(x, row * x.cols, x.cols, [&](const float* v, int64_t i, int64_t m) { amax_cols_update(v, m, col_acc + i); });
}

// Casts whole rows [r0, r1) into dst (row stride = cols), recording per-row amaxes
// when the granularity is rowwise. Returns the amax bits of all the rows.
uint32_t cast_rows(const CastArgs& a, int64_t r0, int64_t r1, uint8_t* dst, uint32_t* col_acc) {
  const int64_t cols = a.input.cols;
  uint32_t acc = 0;
  for (int64_t r = r0; r < r1; ++r) {
    const bool per_col = a.granularity == Granularity::kColumnwise;
    const float* scale = a.granularity == Granularity::kRowwise ? a.scale + r : a.scale;
    const uint32_t row_acc = cast_row_span(a, r, 0, cols, scale, per_col, dst + (r - r0) * cols);
    if (per_col) {
      if (col_acc != nullptr) amax_cols_row(a.input, r, col_acc);
    } else {
      if (a.amax_out != nullptr && a.granularity == Granularity::kRowwise) a.amax_out[r] = bits_float(row_acc);
      acc = std::max(acc, row_acc);
    }
  }
  return acc;
}

const std::array<float, 256>& fp8_table(Format f) {
  static const auto tables = [] {
    std::array<std::array<float, 256>, 2> t{};
    for (int code = 0; code < 256; ++code) {
      t[0][code] = fp8_to_float(static_cast<uint8_t>(code), Format::kE4M3);
      t[1][code] = fp8_to_float(static_cast<uint8_t>(code), Format::kE5M2);
    }
    return t;
  }();
  return tables[f == Format::kE4M3 ? 0 : 1];
}

// ---- block granularities (kBlock1x128, kBlock128x128) ------------------------------------
// Work is split by bands of 128 rows, so that a 128x128 block's amax is reduced by one
// thread; within a row, each 128-column tile goes through the same span kernels as a
// rowwise cast with the tile's scale.

void amax_blocks(const MatrixRef& x, Granularity g, float* out) {
  const int64_t rows = x.rows, cols = x.cols, tiles = scale_blocks(cols);
  const int64_t bands = scale_blocks(rows);
  if (g == Granularity::kBlock128x128) {
    // Padding entries (fp8.h) hold an all-zero block's amax.
    std::fill(out, out + scale_count(g, rows, cols), 0.0f);
  }
  const int64_t grain = std::max<int64_t>(1, kElementsPerChunk / std::max<int64_t>(kScaleBlock * cols, 1));
  parallel_for(bands, grain, [&](int64_t, int64_t b0, int64_t b1) {
    std::vector<uint32_t> acc(static_cast<size_t>(tiles));
    for (int64_t band = b0; band < b1; ++band) {
      std::fill(acc.begin(), acc.end(), 0u);
      for (int64_t r = band * kScaleBlock; r < std::min(rows, (band + 1) * kScaleBlock); ++r) {
        for (int64_t t = 0; t < tiles; ++t) {
          const int64_t c0 = t * kScaleBlock, n = std::min(kScaleBlock, cols - c0);
          const uint32_t bits = amax_flat(x, r * cols + c0, n);
          if (g == Granularity::kBlock1x128) {
            out[scale_index(g, rows, cols, r, c0)] = bits_float(bits);
          } else {
            acc[static_cast<size_t>(t)] = std::max(acc[static_cast<size_t>(t)], bits);
          }
        }
      }
      if (g == Granularity::kBlock128x128) {
        for (int64_t t = 0; t < tiles; ++t) {
          out[scale_index(g, rows, cols, band * kScaleBlock, t * kScaleBlock)] = bits_float(acc[static_cast<size_t>(t)]);
        }
      }
    }
  });
}

// The codes of a block-scaled cast (validation refuses out_t at these granularities).
void cast_blocks(const CastArgs& a) {
  const int64_t rows = a.input.rows, cols = a.input.cols;
  const int64_t grain = std::max<int64_t>(1, kElementsPerChunk / std::max<int64_t>(kScaleBlock * cols, 1));
  parallel_for(scale_blocks(rows), grain, [&](int64_t, int64_t b0, int64_t b1) {
    for (int64_t r = b0 * kScaleBlock; r < std::min(rows, b1 * kScaleBlock); ++r) {
      for (int64_t c0 = 0; c0 < cols; c0 += kScaleBlock) {
        const float* scale = a.scale + scale_index(a.granularity, rows, cols, r, c0);
        cast_row_span(a, r, c0, std::min(kScaleBlock, cols - c0), scale, /*per_col=*/false, a.out + r * cols + c0);
      }
    }
  });
}

RangeTally count_blocks(const CastRangeArgs& a) {
  const MatrixRef& x = a.input;
  const int64_t rows = x.rows, cols = x.cols;
  const int64_t grain = std::max<int64_t>(1, kElementsPerChunk / std::max<int64_t>(kScaleBlock * cols, 1));
  std::vector<RangeTally> partial(static_cast<size_t>(std::max<int64_t>(plan_chunks(scale_blocks(rows), grain), 1)));
  parallel_for(scale_blocks(rows), grain, [&](int64_t chunk, int64_t b0, int64_t b1) {
    RangeTally& t = partial[static_cast<size_t>(chunk)];
    for (int64_t r = b0 * kScaleBlock; r < std::min(rows, b1 * kScaleBlock); ++r) {
      for (int64_t c0 = 0; c0 < cols; c0 += kScaleBlock) {
        const float s = a.scale[scale_index(a.granularity, rows, cols, r, c0)];
        for_each_piece(x, r * cols + c0, std::min(kScaleBlock, cols - c0),
                       [&](const float* v, int64_t, int64_t m) { t += count_span(a.format, v, m, s); });
      }
    }
  });
  RangeTally total;
  for (const RangeTally& t : partial) total += t;
  return total;
}

}  // namespace

void amax(const MatrixRef& x, Granularity g, float* out) {
  const int64_t rows = x.rows, cols = x.cols;
  if (is_block_granularity(g)) {
    amax_blocks(x, g, out);
    return;
  }
  if (g == Granularity::kRowwise) {
    parallel_for(rows, rows_grain(cols), [&](int64_t, int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) out[r] = bits_float(amax_flat(x, r * cols, cols));
    });
    return;
  }
  if (g == Granularity::kTensorwise) {
    const int64_t n = rows * cols;
    std::vector<uint32_t> partial(static_cast<size_t>(std::max<int64_t>(plan_chunks(n, kElementsPerChunk), 1)), 0u);
    parallel_for(n, kElementsPerChunk, [&](int64_t chunk, int64_t b, int64_t e) { partial[chunk] = amax_flat(x, b, e - b); });
    out[0] = bits_float(*std::max_element(partial.begin(), partial.end()));
    return;
  }
  const int64_t chunks = std::max<int64_t>(plan_chunks(rows, rows_grain(cols)), 1);
  std::vector<uint32_t> partial(static_cast<size_t>(chunks * cols), 0u);
  parallel_for(rows, rows_grain(cols), [&](int64_t chunk, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) amax_cols_row(x, r, partial.data() + chunk * cols);
  });
  for (int64_t j = 0; j < cols; ++j) {
    uint32_t acc = 0;
    for (int64_t c = 0; c < chunks; ++c) acc = std::max(acc, partial[c * cols + j]);
    out[j] = bits_float(acc);
  }
}

void compute_scales(const float* amax, int64_t n, Format f, bool pow2, float* scale, float* inv_scale) {
  for (int64_t i = 0; i < n; ++i) scale[i] = scale_from_amax(amax[i], f, pow2);
  if (inv_scale != nullptr) {
    for (int64_t i = 0; i < n; ++i) inv_scale[i] = inverse_scale(scale[i]);
  }
}

void cast(const CastArgs& a) {
  const int64_t rows = a.input.rows, cols = a.input.cols;
  if (rows * cols == 0) {
    if (a.amax_out != nullptr) {
      const int64_t n = scale_count(a.granularity, rows, cols);
      std::fill(a.amax_out, a.amax_out + n, 0.0f);
    }
    return;
  }
  if (is_block_granularity(a.granularity)) {
    // A pass of its own for the amaxes: the recorded amaxes of block-scaled casts are not
    // on a hot path yet.
    cast_blocks(a);
    if (a.amax_out != nullptr) amax_blocks(a.input, a.granularity, a.amax_out);
    return;
  }
  const bool want_col_amax = a.amax_out != nullptr && a.granularity == Granularity::kColumnwise;
  // Chunks own whole tiles of kTile rows: the transpose of a tile is written by one thread.
  const int64_t row_tiles = (rows + kTile - 1) / kTile;
  const int64_t grain = std::max<int64_t>(1, rows_grain(cols) / kTile);
  const int64_t chunks = std::max<int64_t>(plan_chunks(row_tiles, grain), 1);
  std::vector<uint32_t> tensor_amax(static_cast<size_t>(chunks), 0u);
  std::vector<uint32_t> col_amax(want_col_amax ? static_cast<size_t>(chunks * cols) : 0u, 0u);

  parallel_for(row_tiles, grain, [&](int64_t chunk, int64_t t0, int64_t t1) {
    uint32_t* col_acc = want_col_amax ? col_amax.data() + chunk * cols : nullptr;
    // Without a row-major output the tile is staged in scratch before its transpose.
    std::vector<uint8_t> staging(a.out == nullptr ? static_cast<size_t>(kTile * cols) : 0u);
    uint32_t acc = 0;
    for (int64_t r0 = t0 * kTile; r0 < std::min(rows, t1 * kTile); r0 += kTile) {
      const int64_t r1 = std::min(rows, r0 + kTile);
      uint8_t* dst = a.out != nullptr ? a.out + r0 * cols : staging.data();
      acc = std::max(acc, cast_rows(a, r0, r1, dst, col_acc));
      if (a.out_t != nullptr) transpose_bytes(dst, cols, r1 - r0, cols, a.out_t + r0, rows);
    }
    tensor_amax[chunk] = acc;
  });

  if (a.amax_out == nullptr) return;
  if (a.granularity == Granularity::kTensorwise) {
    a.amax_out[0] = bits_float(*std::max_element(tensor_amax.begin(), tensor_amax.end()));
  } else if (want_col_amax) {
    for (int64_t c = 0; c < cols; ++c) {
      uint32_t acc = 0;
      for (int64_t k = 0; k < chunks; ++k) acc = std::max(acc, col_amax[k * cols + c]);
      a.amax_out[c] = bits_float(acc);
    }
  }
}

void count_cast_range(const CastRangeArgs& a) {
  const MatrixRef& x = a.input;
  const int64_t rows = x.rows, cols = x.cols, n = rows * cols;
  RangeTally total;
  if (n > 0 && is_block_granularity(a.granularity)) {
    total = count_blocks(a);
  } else if (n > 0 && a.granularity == Granularity::kTensorwise) {
    // One scale: split the flat matrix, so that a single long row still uses every thread.
    std::vector<RangeTally> partial(static_cast<size_t>(std::max<int64_t>(plan_chunks(n, kElementsPerChunk), 1)));
    parallel_for(n, kElementsPerChunk, [&](int64_t chunk, int64_t b, int64_t e) {
      for_each_piece(x, b, e - b, [&](const float* v, int64_t, int64_t m) {
        partial[static_cast<size_t>(chunk)] += count_span(a.format, v, m, a.scale[0]);
      });
    });
    for (const RangeTally& t : partial) total += t;
  } else if (n > 0) {
    // Per-row or per-column scales: whole rows per chunk, as the casts split them.
    const bool per_col = a.granularity == Granularity::kColumnwise;
    std::vector<RangeTally> partial(static_cast<size_t>(std::max<int64_t>(plan_chunks(rows, rows_grain(cols)), 1)));
    parallel_for(rows, rows_grain(cols), [&](int64_t chunk, int64_t r0, int64_t r1) {
      RangeTally& t = partial[static_cast<size_t>(chunk)];
      for (int64_t r = r0; r < r1; ++r) {
        for_each_piece(x, r * cols, cols, [&](const float* v, int64_t i, int64_t m) {
          t += per_col ? count_span_colscale(a.format, v, m, a.scale + i) : count_span(a.format, v, m, a.scale[r]);
        });
      }
    });
    for (const RangeTally& t : partial) total += t;
  }
  a.counts->saturated = static_cast<uint64_t>(total.saturated);
  a.counts->underflow = static_cast<uint64_t>(total.underflow);
}

void dequantize(const DequantizeArgs& a) {
  const auto& table = fp8_table(a.format);
  const int64_t rows = a.rows, cols = a.cols;
  parallel_for(rows, rows_grain(cols), [&](int64_t, int64_t r0, int64_t r1) {
    float buf[kSpan];
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t* q = a.input + r * cols;
      for (int64_t c0 = 0; c0 < cols; c0 += kSpan) {
        const int64_t n = std::min(kSpan, cols - c0);
        for (int64_t i = 0; i < n; ++i) {
          const float s = a.granularity == Granularity::kTensorwise ? a.scale[0]
                          : a.granularity == Granularity::kRowwise  ? a.scale[r]
                          : a.granularity == Granularity::kColumnwise
                              ? a.scale[c0 + i]
                              : a.scale[scale_index(a.granularity, rows, cols, r, c0 + i)];
          buf[i] = canonicalize_nan(table[q[c0 + i]] / s);
        }
        if (a.out_dtype == DType::kFloat32) {
          std::memcpy(static_cast<float*>(a.out) + r * cols + c0, buf, static_cast<size_t>(n) * sizeof(float));
        } else {
          narrow_bf16_span(buf, n, static_cast<uint16_t*>(a.out) + r * cols + c0);
        }
      }
    }
  });
}

void convert(const void* in, DType in_dtype, void* out, DType out_dtype, int64_t n) {
  parallel_for(n, kElementsPerChunk, [&](int64_t, int64_t b, int64_t e) {
    if (in_dtype == out_dtype) {
      const size_t w = dtype_size(in_dtype);
      std::memcpy(static_cast<char*>(out) + b * w, static_cast<const char*>(in) + b * w, static_cast<size_t>(e - b) * w);
    } else if (in_dtype == DType::kFloat32) {
      narrow_bf16_span(static_cast<const float*>(in) + b, e - b, static_cast<uint16_t*>(out) + b);
    } else {
      widen_bf16_span(static_cast<const uint16_t*>(in) + b, e - b, static_cast<float*>(out) + b);
    }
  });
}

void widen_fp8(const uint8_t* in, Format f, int64_t n, float* out) {
  static const bool kF16c = avx2::widen_available();
  const int64_t done = kF16c ? avx2::widen_fp8(in, n, f, out) : 0;
  const auto& table = fp8_table(f);
  for (int64_t i = done; i < n; ++i) out[i] = table[in[i]];
}

void widen_bf16(const uint16_t* in, int64_t n, float* out) { widen_bf16_span(in, n, out); }

}  // namespace fp8::cpu
