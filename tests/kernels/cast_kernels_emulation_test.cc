// The CUDA backend's cast kernels' own source (kernels/cuda/cast_kernels_device.cuh) run on
// the CPU under the emulation of CUDA threads and warp collectives (tests/ops/emulation/),
// against the reference backend, bit for bit: codes, their transpose and the amaxes. What
// can be checked of those kernels without a GPU (the emulation converts with the shared
// software path, which the format tests prove equal to the GPU's cvt instruction); the
// same kernels on a GPU: fp8_cuda_contract_test.
#include "tests/ops/emulation/cuda_emulation.h"
// The kernels, after the emulation.
#include "cuda/cast_kernels_device.cuh"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "fp8/fp8.h"
#include "gtest/gtest.h"
#include "tests/ops/emulated_kernel_checks.h"

namespace fp8::cuda::cast_device {
namespace {

struct Shape {
  int64_t rows, cols;
};

// Magnitudes across the e4m3 and e5m2 ranges after scaling, some past them: saturating
// (~300, and 1e6 for either format) and underflowing (~1e-3 for e4m3, 1e-9 for either).
std::vector<float> test_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    const float magnitude = i % 13 == 5   ? 1e6f
                            : i % 17 == 9 ? 1e-9f
                            : i % 7 == 0  ? 300.0f
                            : i % 11 == 3 ? 1e-3f
                                          : 1.0f;
    v[i] = normal(rng) * magnitude;
  }
  return v;
}

Granularity granularity_of(Axis a) {
  return a == Axis::kTensor ? Granularity::kTensorwise : a == Axis::kRow ? Granularity::kRowwise
                                                                         : Granularity::kColumnwise;
}

// One cast of x (fp32 values, or their bf16 roundings as T = uint16_t) by the tiled kernel
// (out and out_t; kRowTiles row tiles a block, on a grid of at most max_grid_y groups, so
// that blocks loop) or the flat one (out), with the amax where that kernel reduces it,
// against the reference backend's cast of the same input. With derive_scales (tensorwise
// and rowwise, tiled) the kernel derives each scale from a given amax and publishes it and
// its inverse, as launch_cast asks of it when dynamic scaling rides in the cast. With
// count it also counts the cast's range, against the reference's count_cast_range.
template <typename T, Format F, Axis A, bool kTiled, int kRowTiles = 1>
void expect_reference_cast(const Shape& s, uint32_t seed, unsigned max_grid_y = 65535, bool derive_scales = false,
                           bool count = false) {
  constexpr bool kAmax = kTiled || A != Axis::kColumn;
  const auto values = test_values(static_cast<size_t>(s.rows * s.cols), seed);
  const std::vector<T> in = emulation_test::stored<T>(values);
  const DType dtype = std::is_same_v<T, float> ? DType::kFloat32 : DType::kBFloat16;
  const Granularity g = granularity_of(A);
  std::vector<float> scale(static_cast<size_t>(scale_count(g, s.rows, s.cols)));
  std::vector<float> scale_amax(scale.size());
  for (size_t i = 0; i < scale.size(); ++i) {
    scale[i] = 0.5f + 0.25f * static_cast<float>(i % 5);
    if (derive_scales) {
      scale_amax[i] = 40.0f * static_cast<float>(1 + i % 3);
      scale[i] = scale_from_amax(scale_amax[i], F, false);
    }
  }

  const size_t n = values.size();
  std::vector<uint8_t> out(n, 0xAB), out_t(n, 0xAB), want(n), want_t(n);
  std::vector<float> amax(scale.size(), 0.0f), want_amax(scale.size());
  CastArgs c;
  c.input = {in.data(), dtype, s.rows, s.cols};
  c.format = F;
  c.granularity = g;
  c.scale = scale.data();
  c.out = want.data();
  c.out_t = kTiled ? want_t.data() : nullptr;
  c.amax_out = kAmax ? want_amax.data() : nullptr;
  ASSERT_TRUE(reference_backend().cast(c).ok());

  ScaleSource source;
  std::vector<float> scale_out(scale.size(), -1.0f), inv_scale_out(scale.size(), -1.0f);
  if (derive_scales) {
    source.amax = scale_amax.data();
    source.scale_out = scale_out.data();
    source.inv_scale_out = inv_scale_out.data();
  } else {
    source.scale = scale.data();
  }
  auto* amax_words = reinterpret_cast<unsigned*>(amax.data());
  // The range counts, which the kernels take in the same pass (kCount) when asked.
  unsigned long long counts[2] = {0, 0};
  auto* counts_out = count ? counts : nullptr;
  if constexpr (kTiled) {
    const auto gx = static_cast<unsigned>((s.cols + kTile - 1) / kTile);
    const auto groups = static_cast<unsigned>((s.rows + kTile * kRowTiles - 1) / (kTile * kRowTiles));
    const unsigned gy = std::min(groups, max_grid_y);
    auto launch = [&](auto kernel) {
      emulation::launch_grid(gx, gy, kThreads, 0, kernel, in.data(), s.rows, s.cols, source, true, out.data(),
                             out_t.data(), kAmax ? amax_words : nullptr, counts_out, ColumnHalf{});
    };
    if (count) {
      launch(tiled_cast_kernel<T, F, A, true, kAmax, kRowTiles, true>);
    } else {
      launch(tiled_cast_kernel<T, F, A, true, kAmax, kRowTiles, false>);
    }
  } else {
    const int64_t total = s.rows * s.cols;
    const auto blocks = static_cast<unsigned>((total + kChunk * kThreads - 1) / (kChunk * kThreads));
    auto launch = [&](auto kernel) {
      emulation::launch(blocks, kThreads, 0, kernel, in.data(), total, s.cols, source, true, out.data(),
                        kAmax ? amax_words : nullptr, counts_out);
    };
    if (count) {
      launch(flat_cast_kernel<T, F, A, true, kAmax, true>);
    } else {
      launch(flat_cast_kernel<T, F, A, true, kAmax, false>);
    }
  }
  if (count) {
    CastRangeCounts want_counts;
    ASSERT_TRUE(reference_backend().count_cast_range(range_args_of(c, &want_counts)).ok());
    EXPECT_EQ(counts[0], want_counts.saturated) << "saturated";
    EXPECT_EQ(counts[1], want_counts.underflow) << "underflow";
    EXPECT_GT(want_counts.saturated + want_counts.underflow, 0u) << "the values reach past the format's range";
  }
  EXPECT_EQ(out, want) << "codes";
  if (kTiled) {
    EXPECT_EQ(out_t, want_t) << "transposed codes";
  }
  if (kAmax) {
    EXPECT_EQ(std::memcmp(amax.data(), want_amax.data(), amax.size() * sizeof(float)), 0) << "amax";
  }
  if (derive_scales) {
    EXPECT_EQ(scale_out, scale) << "published scales";
    for (size_t i = 0; i < scale.size(); ++i) EXPECT_EQ(inv_scale_out[i], inverse_scale(scale[i])) << i;
  }
}

template <typename T, Format F, Axis A>
void expect_both_kernels(const Shape& s, uint32_t seed) {
  SCOPED_TRACE(::testing::Message() << (std::is_same_v<T, float> ? "fp32 " : "bf16 ") << format_name(F) << " "
                                    << granularity_name(granularity_of(A)) << " [" << s.rows << ", " << s.cols
                                    << "]");
  for (bool count : {false, true}) {
    SCOPED_TRACE(count ? "counting the range" : "");
    {
      SCOPED_TRACE("tiled");
      expect_reference_cast<T, F, A, true>(s, seed, 65535, false, count);
    }
    {
      SCOPED_TRACE("tiled, two row tiles a block");
      expect_reference_cast<T, F, A, true, 2>(s, seed, 65535, false, count);
    }
    {
      SCOPED_TRACE("flat");
      expect_reference_cast<T, F, A, false>(s, seed, 65535, false, count);
    }
  }
}

// Ragged shapes (a partial tile both ways, rows and columns not multiples of 4, 8 or 16)
// and an aligned one, every granularity, both formats and input types.
TEST(CastKernelsEmulation, TiledAndFlatCastsMatchTheReferenceBitForBit) {
  for (const Shape& s : {Shape{67, 131}, Shape{64, 128}, Shape{5, 3}}) {
    const auto seed = static_cast<uint32_t>(s.rows * 1000 + s.cols);
    expect_both_kernels<float, Format::kE4M3, Axis::kTensor>(s, seed);
    expect_both_kernels<float, Format::kE5M2, Axis::kRow>(s, seed);
    expect_both_kernels<float, Format::kE4M3, Axis::kColumn>(s, seed);
    expect_both_kernels<uint16_t, Format::kE4M3, Axis::kTensor>(s, seed);
    expect_both_kernels<uint16_t, Format::kE4M3, Axis::kRow>(s, seed);
    expect_both_kernels<uint16_t, Format::kE5M2, Axis::kTensor>(s, seed);
    expect_both_kernels<uint16_t, Format::kE5M2, Axis::kColumn>(s, seed);
  }
}

// Blocks that loop over several groups (grid.y below the groups' count): the group index
// and the rows of each tile in it, for one and two row tiles a block, a partial last group.
TEST(CastKernelsEmulation, TiledCastsLoopingOverRowGroupsMatchTheReference) {
  const Shape s{300, 70};
  expect_reference_cast<uint16_t, Format::kE4M3, Axis::kRow, true, 2>(s, 7, 2);
  expect_reference_cast<uint16_t, Format::kE4M3, Axis::kTensor, true, 1>(s, 8, 2);
  expect_reference_cast<uint16_t, Format::kE5M2, Axis::kColumn, true, 2>(s, 9, 1);
  expect_reference_cast<float, Format::kE4M3, Axis::kRow, true, 2>(s, 10, 2);
}

// Scales derived in the cast from given amaxes, each published once with its inverse.
TEST(CastKernelsEmulation, TiledCastsDeriveAndPublishTheirScales) {
  const Shape s{200, 67};
  expect_reference_cast<uint16_t, Format::kE4M3, Axis::kRow, true, 2>(s, 11, 1, true);
  expect_reference_cast<uint16_t, Format::kE5M2, Axis::kTensor, true, 2>(s, 12, 1, true);
  expect_reference_cast<uint16_t, Format::kE4M3, Axis::kRow, true, 1>(s, 13, 65535, true);
  expect_reference_cast<float, Format::kE4M3, Axis::kTensor, true, 1>(s, 14, 65535, true);
}

// What a dual cast (tiled_cast_kernel's kDual) is checked against: the reference backend's
// rowwise cast (out) and columnwise cast (out_t) of the same input, apart, with their amaxes
// and range counts.
struct DualWant {
  std::vector<uint8_t> out, out_t;
  std::vector<float> row_amax, col_amax;
  CastRangeCounts row_counts, col_counts;
};

DualWant reference_dual(const MatrixRef& x, Format f, const std::vector<float>& row_scale,
                        const std::vector<float>& col_scale) {
  DualWant w;
  const auto n = static_cast<size_t>(x.size());
  w.out.resize(n);
  w.out_t.resize(n);
  w.row_amax.resize(static_cast<size_t>(x.rows));
  w.col_amax.resize(static_cast<size_t>(x.cols));
  CastArgs rows;
  rows.input = x;
  rows.format = f;
  rows.granularity = Granularity::kRowwise;
  rows.scale = row_scale.data();
  rows.out = w.out.data();
  rows.amax_out = w.row_amax.data();
  CastArgs cols = rows;
  cols.granularity = Granularity::kColumnwise;
  cols.scale = col_scale.data();
  cols.out = nullptr;
  cols.out_t = w.out_t.data();
  cols.amax_out = w.col_amax.data();
  EXPECT_TRUE(reference_backend().cast(rows).ok());
  EXPECT_TRUE(reference_backend().cast(cols).ok());
  EXPECT_TRUE(reference_backend().count_cast_range(range_args_of(rows, &w.row_counts)).ok());
  EXPECT_TRUE(reference_backend().count_cast_range(range_args_of(cols, &w.col_counts)).ok());
  return w;
}

// A dual cast by the tiled kernel (rows scaled to out, columns to out_t, in one pass) and
// its amax pass (row and column amaxes in one read), against the reference's casts apart.
// derive_row_scales: the rows' scales come from given amaxes and are published, as
// quantize asks of it; the columns' are always given. counts: which halves count their
// range (bit 0 the rows', bit 1 the columns').
template <typename T, Format F, int kRowTiles>
void expect_reference_dual(const Shape& s, uint32_t seed, unsigned max_grid_y, bool derive_row_scales, int counts) {
  SCOPED_TRACE(::testing::Message() << "dual " << (std::is_same_v<T, float> ? "fp32 " : "bf16 ") << format_name(F)
                                    << " [" << s.rows << ", " << s.cols << "], " << kRowTiles
                                    << " row tiles, grid.y <= " << max_grid_y
                                    << (derive_row_scales ? ", row scales derived" : "") << ", counts " << counts);
  const std::vector<T> in = emulation_test::stored<T>(test_values(static_cast<size_t>(s.rows * s.cols), seed));
  const MatrixRef x{in.data(), std::is_same_v<T, float> ? DType::kFloat32 : DType::kBFloat16, s.rows, s.cols};
  std::vector<float> row_scale(static_cast<size_t>(s.rows)), row_scale_amax(row_scale.size());
  std::vector<float> col_scale(static_cast<size_t>(s.cols));
  for (size_t i = 0; i < row_scale.size(); ++i) {
    row_scale_amax[i] = 40.0f * static_cast<float>(1 + i % 3);
    row_scale[i] = derive_row_scales ? scale_from_amax(row_scale_amax[i], F, false)
                                     : 0.5f + 0.25f * static_cast<float>(i % 5);
  }
  for (size_t i = 0; i < col_scale.size(); ++i) col_scale[i] = 0.75f + 0.5f * static_cast<float>(i % 7);
  const DualWant want = reference_dual(x, F, row_scale, col_scale);

  const auto gx = static_cast<unsigned>((s.cols + kTile - 1) / kTile);
  const auto groups = static_cast<unsigned>((s.rows + kTile * kRowTiles - 1) / (kTile * kRowTiles));
  const unsigned gy = std::min(groups, max_grid_y);
  ScaleSource source;
  std::vector<float> scale_out(row_scale.size(), -1.0f), inv_scale_out(row_scale.size(), -1.0f);
  if (derive_row_scales) {
    source.amax = row_scale_amax.data();
    source.scale_out = scale_out.data();
    source.inv_scale_out = inv_scale_out.data();
  } else {
    source.scale = row_scale.data();
  }
  const size_t n = in.size();
  std::vector<uint8_t> out(n, 0xAB), out_t(n, 0xAB);
  unsigned long long row_counts[2] = {0, 0}, col_counts[2] = {0, 0};
  ColumnHalf column;
  column.scale = col_scale.data();
  column.counts = (counts & 2) != 0 ? col_counts : nullptr;
  auto* row_counts_out = (counts & 1) != 0 ? row_counts : nullptr;
  if (counts != 0) {
    emulation::launch_grid(gx, gy, kThreads, 0, tiled_cast_kernel<T, F, Axis::kRow, true, false, kRowTiles, true, true>,
                           in.data(), s.rows, s.cols, source, true, out.data(), out_t.data(), nullptr, row_counts_out,
                           column);
  } else {
    emulation::launch_grid(gx, gy, kThreads, 0,
                           tiled_cast_kernel<T, F, Axis::kRow, true, false, kRowTiles, false, true>, in.data(), s.rows,
                           s.cols, source, true, out.data(), out_t.data(), nullptr, nullptr, column);
  }
  EXPECT_EQ(out, want.out) << "rowwise codes";
  EXPECT_EQ(out_t, want.out_t) << "columnwise transposed codes";
  if ((counts & 1) != 0) {
    EXPECT_EQ(row_counts[0], want.row_counts.saturated) << "rows' saturated";
    EXPECT_EQ(row_counts[1], want.row_counts.underflow) << "rows' underflow";
  }
  if ((counts & 2) != 0) {
    EXPECT_EQ(col_counts[0], want.col_counts.saturated) << "columns' saturated";
    EXPECT_EQ(col_counts[1], want.col_counts.underflow) << "columns' underflow";
    if (s.rows * s.cols >= 1000) {
      EXPECT_NE(want.col_counts.saturated, want.row_counts.saturated) << "the halves' counts differ, as their scales";
    }
  }
  if (derive_row_scales) {
    EXPECT_EQ(scale_out, row_scale) << "published row scales";
    for (size_t i = 0; i < row_scale.size(); ++i) EXPECT_EQ(inv_scale_out[i], inverse_scale(row_scale[i])) << i;
  }

  // The amax pass of a dual quantize: both axes in one read.
  std::vector<float> row_amax(row_scale.size(), 0.0f), col_amax(col_scale.size(), 0.0f);
  ColumnHalf amaxes;
  amaxes.amax = reinterpret_cast<unsigned*>(col_amax.data());
  emulation::launch_grid(gx, gy, kThreads, 0, tiled_cast_kernel<T, F, Axis::kRow, false, true, kRowTiles, false, true>,
                         in.data(), s.rows, s.cols, ScaleSource{}, true, nullptr, nullptr,
                         reinterpret_cast<unsigned*>(row_amax.data()), nullptr, amaxes);
  EXPECT_EQ(std::memcmp(row_amax.data(), want.row_amax.data(), row_amax.size() * sizeof(float)), 0) << "row amaxes";
  EXPECT_EQ(std::memcmp(col_amax.data(), want.col_amax.data(), col_amax.size() * sizeof(float)), 0)
      << "column amaxes";
}

// Ragged and aligned shapes, both formats and input types, one and two row tiles a block,
// blocks looping over row groups, each half counting alone or both.
TEST(CastKernelsEmulation, DualCastsMatchTheReferenceRowwiseAndColumnwiseCasts) {
  for (const Shape& s : {Shape{67, 131}, Shape{64, 128}, Shape{5, 3}}) {
    const auto seed = static_cast<uint32_t>(s.rows * 1000 + s.cols + 5);
    expect_reference_dual<uint16_t, Format::kE4M3, 2>(s, seed, 65535, true, 3);
    expect_reference_dual<uint16_t, Format::kE5M2, 1>(s, seed, 65535, false, 0);
    expect_reference_dual<float, Format::kE4M3, 1>(s, seed, 65535, true, 1);
    expect_reference_dual<float, Format::kE5M2, 1>(s, seed, 65535, false, 2);
  }
  expect_reference_dual<uint16_t, Format::kE4M3, 2>(Shape{300, 70}, 21, 1, true, 3);
  expect_reference_dual<uint16_t, Format::kE4M3, 1>(Shape{300, 70}, 22, 2, false, 2);
}

// A small tensor's amax by one block, written whatever out held: against the reference
// backend's, bit for bit, NaN propagated, fp32 and bf16.
template <typename T>
void expect_small_amax(int64_t n, uint32_t seed, bool with_nan) {
  SCOPED_TRACE(::testing::Message() << (std::is_same_v<T, float> ? "fp32 " : "bf16 ") << n
                                    << (with_nan ? " with a NaN" : ""));
  auto values = test_values(static_cast<size_t>(n), seed);
  if (with_nan) values[static_cast<size_t>(n / 2)] = std::numeric_limits<float>::quiet_NaN();
  const std::vector<T> in = emulation_test::stored<T>(values);
  const DType dtype = std::is_same_v<T, float> ? DType::kFloat32 : DType::kBFloat16;
  float want = 0.0f;
  ASSERT_TRUE(reference_backend().amax({in.data(), dtype, 1, n}, Granularity::kTensorwise, &want).ok());
  unsigned out = 0xDEADBEEFu;  // overwritten, not folded into
  emulation::launch(1, kThreads, 0, small_amax_kernel<T>, in.data(), n, &out);
  EXPECT_EQ(out, float_bits(want));
}

// transpose_words_kernel against the transpose by definition: whole and partial tiles,
// rows of one word, and fewer row-tile blocks than row tiles (the blocks loop).
TEST(CastKernelsEmulation, WordTransposeIsTheTranspose) {
  struct Case {
    int64_t rows, cols;
    unsigned grid_y;  // 0: one block per row tile
  };
  for (const Case c : {Case{64, 64, 0}, Case{4, 4, 0}, Case{128, 192, 0}, Case{68, 36, 0}, Case{200, 8, 1},
                       Case{8, 200, 0}, Case{196, 132, 2}}) {
    SCOPED_TRACE(::testing::Message() << c.rows << " x " << c.cols << " grid_y " << c.grid_y);
    std::mt19937 rng(static_cast<uint32_t>(c.rows * 1000 + c.cols));
    std::vector<uint8_t> src(static_cast<size_t>(c.rows * c.cols));
    for (uint8_t& b : src) b = static_cast<uint8_t>(rng());
    std::vector<uint8_t> want(src.size()), dst(src.size(), 0xAB);
    for (int64_t r = 0; r < c.rows; ++r) {
      for (int64_t k = 0; k < c.cols; ++k) {
        want[static_cast<size_t>(k * c.rows + r)] = src[static_cast<size_t>(r * c.cols + k)];
      }
    }
    const auto gx = static_cast<unsigned>((c.cols + kWordTile - 1) / kWordTile);
    const unsigned gy = c.grid_y > 0 ? c.grid_y : static_cast<unsigned>((c.rows + kWordTile - 1) / kWordTile);
    emulation::launch_grid(gx, gy, kThreads, 0, transpose_words_kernel, src.data(), c.rows, c.cols, dst.data());
    EXPECT_EQ(dst, want);
  }
}

TEST(CastKernelsEmulation, SmallAmaxMatchesTheReference) {
  for (int64_t n : {int64_t{1}, int64_t{37}, int64_t{256}, int64_t{8192}, int64_t{8195}}) {
    expect_small_amax<float>(n, static_cast<uint32_t>(n), false);
    expect_small_amax<uint16_t>(n, static_cast<uint32_t>(n) + 1, false);
  }
  expect_small_amax<float>(1000, 3, true);
  expect_small_amax<uint16_t>(1000, 4, true);
}

// ---- block granularities (block_cast_kernel, block_dequantize_kernel) ----------------------------

// test_values with magnitudes that change by orders from one 128-wide stripe or 128-row band
// to the next, as block scaling expects of its data.
std::vector<float> block_test_values(const Shape& s, uint32_t seed) {
  auto v = test_values(static_cast<size_t>(s.rows * s.cols), seed);
  for (int64_t r = 0; r < s.rows; ++r) {
    for (int64_t c = 0; c < s.cols; ++c) {
      const int64_t blk = (r / 128) * 7 + (c / 128) * 3 + r % 5;
      v[static_cast<size_t>(r * s.cols + c)] *= std::ldexp(1.0f, static_cast<int>(blk % 17) - 8);
    }
  }
  return v;
}

std::vector<uint32_t> bits_of(const std::vector<float>& v) {
  std::vector<uint32_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = float_bits(v[i]);
  return out;
}

// The block kernels' own index arithmetic against fp8.h's.
TEST(CastKernelsEmulation, BlockScaleIndexIsFp8hs) {
  for (const Shape& s : {Shape{1, 1}, Shape{5, 130}, Shape{257, 513}, Shape{300, 3}, Shape{128, 1024}}) {
    EXPECT_EQ(block_scale_ld(s.cols), block128x128_ld(s.cols)) << s.cols;
    for (int64_t r = 0; r < s.rows; r += 7) {
      for (int64_t c = 0; c < s.cols; c += 11) {
        ASSERT_EQ(block_scale_index<false>(s.rows, s.cols, r, c),
                  scale_index(Granularity::kBlock1x128, s.rows, s.cols, r, c));
        ASSERT_EQ(block_scale_index<true>(s.rows, s.cols, r, c),
                  scale_index(Granularity::kBlock128x128, s.rows, s.cols, r, c));
      }
    }
  }
}

// Every mode of block_cast_kernel (the amaxes alone; a quantize, scales derived and published
// with their inverses and amaxes, codes and range counts; a cast with given scales, with its
// amaxes and counts; a range count alone) and block_dequantize_kernel, against the reference
// backend bit for bit. max_grid_y below the bands' count makes blocks loop over bands.
template <typename T, Format F, bool kSquare>
void expect_reference_block_kernels(const Shape& s, uint32_t seed, unsigned max_grid_y = 65535,
                                    bool with_nan = false) {
  const Granularity g = kSquare ? Granularity::kBlock128x128 : Granularity::kBlock1x128;
  SCOPED_TRACE(::testing::Message() << (std::is_same_v<T, float> ? "fp32 " : "bf16 ") << format_name(F) << " "
                                    << granularity_name(g) << " [" << s.rows << ", " << s.cols
                                    << "], grid.y <= " << max_grid_y << (with_nan ? ", a NaN" : ""));
  auto values = block_test_values(s, seed);
  if (with_nan) values[values.size() / 2] = std::numeric_limits<float>::quiet_NaN();
  const std::vector<T> in = emulation_test::stored<T>(values);
  const MatrixRef x{in.data(), std::is_same_v<T, float> ? DType::kFloat32 : DType::kBFloat16, s.rows, s.cols};
  const auto ns = static_cast<size_t>(scale_count(g, s.rows, s.cols));
  const auto n = static_cast<size_t>(s.rows * s.cols);
  const auto gx = static_cast<unsigned>((s.cols + kScaleTile - 1) / kScaleTile);
  const auto bands = static_cast<unsigned>((s.rows + kScaleTile - 1) / kScaleTile);
  const unsigned gy = std::min(bands, max_grid_y);
  const auto run = [&](const BlockCastArgs& a) {
    emulation::launch_grid(gx, gy, kThreads, 0, block_cast_kernel<T, F, kSquare>, in.data(), s.rows, s.cols, a);
  };

  {
    SCOPED_TRACE("amax alone");
    std::vector<float> want(ns), got(ns, -1.0f);
    ASSERT_TRUE(reference_backend().amax(x, g, want.data()).ok());
    BlockCastArgs a;
    a.amax = got.data();
    run(a);
    EXPECT_EQ(bits_of(got), bits_of(want));
  }

  for (bool pow2 : {false, true}) {
    SCOPED_TRACE(pow2 ? "quantize, power-of-2 scales" : "quantize");
    std::vector<uint8_t> want(n), got(n, 0xAB);
    std::vector<float> want_scale(ns), want_inv(ns), want_amax(ns);
    std::vector<float> scale(ns, -1.0f), inv(ns, -1.0f), amax(ns, -1.0f);
    CastRangeCounts want_counts;
    QuantizeArgs q;
    q.input = x;
    q.format = F;
    q.granularity = g;
    q.pow2_scale = pow2;
    q.out = want.data();
    q.scale_out = want_scale.data();
    q.inv_scale_out = want_inv.data();
    q.amax_out = want_amax.data();
    q.range_counts = &want_counts;
    ASSERT_TRUE(reference_backend().quantize(q).ok());
    unsigned long long counts[2] = {0, 0};
    BlockCastArgs a;
    a.pow2 = pow2;
    a.out = got.data();
    a.amax = amax.data();
    a.scale_out = scale.data();
    a.inv_scale_out = inv.data();
    a.counts = counts;
    run(a);
    EXPECT_EQ(got, want) << "codes";
    EXPECT_EQ(bits_of(scale), bits_of(want_scale)) << "scales";
    EXPECT_EQ(bits_of(inv), bits_of(want_inv)) << "inverse scales";
    EXPECT_EQ(bits_of(amax), bits_of(want_amax)) << "amaxes";
    EXPECT_EQ(counts[0], want_counts.saturated) << "saturated";
    EXPECT_EQ(counts[1], want_counts.underflow) << "underflow";
  }

  // Given scales that do not fit the data: values saturate and underflow.
  std::vector<float> given(ns);
  for (size_t i = 0; i < ns; ++i) given[i] = 0.5f + 0.25f * static_cast<float>(i % 5);
  {
    SCOPED_TRACE("cast with given scales");
    std::vector<uint8_t> want(n), got(n, 0xAB);
    std::vector<float> want_amax(ns), amax(ns, -1.0f), scale_out(ns, -1.0f);
    CastArgs c;
    c.input = x;
    c.format = F;
    c.granularity = g;
    c.scale = given.data();
    c.out = want.data();
    c.amax_out = want_amax.data();
    CastRangeCounts want_counts;
    c.range_counts = &want_counts;
    ASSERT_TRUE(reference_backend().cast(c).ok());
    unsigned long long counts[2] = {0, 0};
    BlockCastArgs a;
    a.scale = given.data();
    a.out = got.data();
    a.amax = amax.data();
    a.scale_out = scale_out.data();  // not written: the scales were given
    a.counts = counts;
    run(a);
    EXPECT_EQ(got, want) << "codes";
    EXPECT_EQ(bits_of(amax), bits_of(want_amax)) << "amaxes";
    EXPECT_EQ(counts[0], want_counts.saturated) << "saturated";
    EXPECT_EQ(counts[1], want_counts.underflow) << "underflow";
    if (n >= 100) {
      EXPECT_GT(want_counts.saturated + want_counts.underflow, 0u) << "the values reach past the format's range";
    }
    EXPECT_EQ(scale_out, std::vector<float>(ns, -1.0f)) << "given scales are not published";

    SCOPED_TRACE("range count alone");
    unsigned long long alone[2] = {0, 0};
    BlockCastArgs r;
    r.scale = given.data();
    r.counts = alone;
    run(r);
    EXPECT_EQ(alone[0], want_counts.saturated) << "saturated";
    EXPECT_EQ(alone[1], want_counts.underflow) << "underflow";

    SCOPED_TRACE("dequantize");
    std::vector<float> want_f(n), got_f(n, -1.0f);
    std::vector<uint16_t> want_b(n), got_b(n, 0xFFFF);
    DequantizeArgs d;
    d.input = want.data();
    d.format = F;
    d.rows = s.rows;
    d.cols = s.cols;
    d.granularity = g;
    d.scale = given.data();
    d.out_dtype = DType::kFloat32;
    d.out = want_f.data();
    ASSERT_TRUE(reference_backend().dequantize(d).ok());
    d.out_dtype = DType::kBFloat16;
    d.out = want_b.data();
    ASSERT_TRUE(reference_backend().dequantize(d).ok());
    // Few blocks, so that threads loop over the elements.
    const unsigned blocks = std::min<unsigned>(3, static_cast<unsigned>((n + kThreads - 1) / kThreads));
    emulation::launch(blocks, kThreads, 0, block_dequantize_kernel<float, F, kSquare>,
                      static_cast<const uint8_t*>(want.data()), s.rows, s.cols, static_cast<const float*>(given.data()),
                      got_f.data());
    emulation::launch(blocks, kThreads, 0, block_dequantize_kernel<uint16_t, F, kSquare>,
                      static_cast<const uint8_t*>(want.data()), s.rows, s.cols, static_cast<const float*>(given.data()),
                      got_b.data());
    EXPECT_EQ(bits_of(got_f), bits_of(want_f)) << "fp32";
    EXPECT_EQ(got_b, want_b) << "bf16";
  }
}

// Whole and partial tiles and blocks, a single element, one row or one column, rows not a
// multiple of 4 (byte stores) and of 4 (word stores), both granularities, formats and input
// types; blocks looping over bands; a NaN propagated into its tile's amax and scale.
TEST(CastKernelsEmulation, BlockCastsMatchTheReferenceBitForBit) {
  for (const Shape& s : {Shape{1, 1}, Shape{5, 130}, Shape{128, 128}, Shape{130, 300}, Shape{257, 513},
                         Shape{300, 3}, Shape{2, 1000}}) {
    const auto seed = static_cast<uint32_t>(s.rows * 1000 + s.cols + 9);
    expect_reference_block_kernels<float, Format::kE4M3, false>(s, seed);
    expect_reference_block_kernels<float, Format::kE4M3, true>(s, seed);
    expect_reference_block_kernels<uint16_t, Format::kE4M3, false>(s, seed + 1);
    expect_reference_block_kernels<uint16_t, Format::kE5M2, true>(s, seed + 1);
  }
  expect_reference_block_kernels<float, Format::kE5M2, false>(Shape{300, 260}, 31, 1);
  expect_reference_block_kernels<uint16_t, Format::kE4M3, true>(Shape{300, 260}, 32, 2);
  expect_reference_block_kernels<float, Format::kE4M3, true>(Shape{130, 300}, 33, 65535, true);
  expect_reference_block_kernels<uint16_t, Format::kE4M3, false>(Shape{130, 300}, 34, 65535, true);
}

}  // namespace
}  // namespace fp8::cuda::cast_device
