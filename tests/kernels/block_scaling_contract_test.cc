// Block-scaled fp8 (Granularity::kBlock1x128 and kBlock128x128, fp8.h): the scale layout
// cuBLASLt takes, then the contract run against the host backends. Amaxes, scales, codes,
// range counts and dequantized values must match the reference bit for bit, and the
// reference must match the definition written out here element by element; block GEMMs
// must match the reference within the bound fp8.h states. Built twice: against the host
// backends (a unit test) and against the CUDA backend (a gpu test, skipped where no GPU is
// present), whose GEMM shapes also meet cuBLASLt's rules (n a multiple of 16, m of 4).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "fp8/arith.h"
#include "fp8/fp8.h"
#include "tests/kernels/backend_test_util.h"

namespace fp8 {
namespace {

using testing::Buffer;
using testing::gaussian;

constexpr Granularity kBlockGranularities[] = {Granularity::kBlock1x128, Granularity::kBlock128x128};

struct Shape {
  int64_t rows, cols;
};
// Whole and partial tiles and blocks, a single element, one row and one column.
constexpr Shape kShapes[] = {{1, 1}, {5, 130}, {128, 128}, {130, 300}, {257, 513}, {1, 1000}, {300, 3}};

// ---- layout -------------------------------------------------------------------------------

#if !defined(FP8_CONTRACT_BACKENDS_CUDA)
TEST(BlockScaleLayout, NamesAndCountsFollowTheCuBlasLtLayout) {
  EXPECT_STREQ(granularity_name(Granularity::kBlock1x128), "block1x128");
  EXPECT_STREQ(granularity_name(Granularity::kBlock128x128), "block128x128");
  // 1x128: rows × ceil(cols/128).
  EXPECT_EQ(scale_count(Granularity::kBlock1x128, 5, 130), 5 * 2);
  EXPECT_EQ(scale_count(Granularity::kBlock1x128, 300, 3), 300);
  EXPECT_EQ(scale_count(Granularity::kBlock1x128, 0, 300), 0);
  // 128x128: ceil(rows/128) × (ceil(cols/128) rounded up to 4).
  EXPECT_EQ(scale_count(Granularity::kBlock128x128, 128, 128), 4);
  EXPECT_EQ(scale_count(Granularity::kBlock128x128, 257, 513), 3 * 8);
  EXPECT_EQ(scale_count(Granularity::kBlock128x128, 130, 1024), 2 * 8);
  EXPECT_EQ(scale_count(Granularity::kBlock128x128, 0, 0), 0);
  EXPECT_EQ(block128x128_ld(513), 8);
  EXPECT_EQ(block128x128_ld(512), 4);
}

TEST(BlockScaleLayout, OneByOneTwentyEightScalesAreRowsFastest) {
  const int64_t rows = 5, cols = 300;
  EXPECT_EQ(scale_index(Granularity::kBlock1x128, rows, cols, 0, 0), 0);
  EXPECT_EQ(scale_index(Granularity::kBlock1x128, rows, cols, 4, 127), 4);
  EXPECT_EQ(scale_index(Granularity::kBlock1x128, rows, cols, 0, 128), 5);
  EXPECT_EQ(scale_index(Granularity::kBlock1x128, rows, cols, 3, 299), 2 * 5 + 3);
}

TEST(BlockScaleLayout, BlockScalesAreRowMajorOverPaddedRows) {
  const int64_t rows = 257, cols = 513;  // 3 × 5 blocks, rows of 8 entries
  EXPECT_EQ(scale_index(Granularity::kBlock128x128, rows, cols, 127, 127), 0);
  EXPECT_EQ(scale_index(Granularity::kBlock128x128, rows, cols, 0, 512), 4);
  EXPECT_EQ(scale_index(Granularity::kBlock128x128, rows, cols, 128, 0), 8);
  EXPECT_EQ(scale_index(Granularity::kBlock128x128, rows, cols, 256, 512), 2 * 8 + 4);
}
#endif

// ---- the contract ---------------------------------------------------------------------------

class BlockScaling : public testing::BackendTest {
 protected:
  // Gaussian data whose magnitude changes by orders from block to block (what block scaling
  // is for), with some values far out and some far in within each block.
  static std::vector<float> test_matrix(int64_t rows, int64_t cols, uint32_t seed) {
    auto v = gaussian(static_cast<size_t>(rows * cols), seed);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t blk = (r / 128) * 7 + (c / 128) * 3 + r % 5;
        v[static_cast<size_t>(r * cols + c)] *= std::ldexp(1.0f, static_cast<int>(blk % 17) - 8);
      }
    }
    for (size_t i = 0; i < v.size(); i += 37) v[i] *= 1e-5f;
    for (size_t i = 11; i < v.size(); i += 101) v[i] *= 30.0f;
    return v;
  }

  // The per-block amaxes by definition: max |x| over each block, zeros in the padding.
  static std::vector<float> block_amax(const std::vector<float>& x, Granularity g, int64_t rows, int64_t cols) {
    std::vector<float> out(static_cast<size_t>(scale_count(g, rows, cols)), 0.0f);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        float& a = out[static_cast<size_t>(scale_index(g, rows, cols, r, c))];
        a = std::max(a, std::fabs(x[static_cast<size_t>(r * cols + c)]));
      }
    }
    return out;
  }

  struct Quantized {
    std::vector<uint8_t> codes;
    std::vector<float> scale, inv_scale, amax;
    CastRangeCounts counts;
  };

  // A quantize on `b` of the host matrix `x` (stored as dtype t).
  static Quantized quantize_on(Backend* b, const std::vector<float>& x, DType t, int64_t rows, int64_t cols,
                               Granularity g, Format f, bool pow2) {
    const auto ns = static_cast<size_t>(scale_count(g, rows, cols));
    const auto n = static_cast<size_t>(rows * cols);
    Buffer<float> xf(b, x);
    Buffer<uint16_t> xb(b, testing::to_bf16(x));
    Buffer<uint8_t> out(b, n);
    Buffer<float> scale(b, ns), inv(b, ns), amax(b, ns);
    Buffer<CastRangeCounts> counts(b, 1);
    QuantizeArgs q;
    q.input = {t == DType::kFloat32 ? static_cast<const void*>(xf.get()) : xb.get(), t, rows, cols};
    q.format = f;
    q.granularity = g;
    q.pow2_scale = pow2;
    q.out = out.get();
    q.scale_out = scale.get();
    q.inv_scale_out = inv.get();
    q.amax_out = amax.get();
    q.range_counts = counts.get();
    const absl::Status s = b->quantize(q);
    EXPECT_TRUE(s.ok()) << s;
    return {out.download(), scale.download(), inv.download(), amax.download(), counts.download()[0]};
  }

};

std::vector<uint32_t> bits_of(const std::vector<float>& v) {
  std::vector<uint32_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = float_bits(v[i]);
  return out;
}

TEST_P(BlockScaling, AmaxIsTheMaxOfEachBlockWithZeroPadding) {
  for (Shape sh : kShapes) {
    const auto host = test_matrix(sh.rows, sh.cols, 1);
    const auto host_bf16 = testing::to_bf16(host);
    Buffer<float> x(b_, host);
    Buffer<uint16_t> xb(b_, host_bf16);
    for (Granularity g : kBlockGranularities) {
      for (DType t : {DType::kFloat32, DType::kBFloat16}) {
        SCOPED_TRACE(::testing::Message() << sh.rows << "x" << sh.cols << " " << granularity_name(g) << " "
                                          << dtype_name(t));
        const auto ns = static_cast<size_t>(scale_count(g, sh.rows, sh.cols));
        Buffer<float> out(b_, ns);
        const void* dev = t == DType::kFloat32 ? static_cast<const void*>(x.get()) : xb.get();
        ASSERT_TRUE(b_->amax({dev, t, sh.rows, sh.cols}, g, out.get()).ok());
        const auto values = t == DType::kFloat32 ? host : testing::from_bf16(host_bf16);
        EXPECT_EQ(bits_of(out.download()), bits_of(block_amax(values, g, sh.rows, sh.cols)));
      }
    }
  }
}

TEST_P(BlockScaling, QuantizeMatchesTheReferenceAndTheDefinitionBitForBit) {
  for (Shape sh : kShapes) {
    const auto host = test_matrix(sh.rows, sh.cols, 2);
    for (Granularity g : kBlockGranularities) {
      for (DType t : {DType::kFloat32, DType::kBFloat16}) {
        for (Format f : {Format::kE4M3, Format::kE5M2}) {
          for (bool pow2 : {false, true}) {
            SCOPED_TRACE(::testing::Message() << sh.rows << "x" << sh.cols << " " << granularity_name(g) << " "
                                              << dtype_name(t) << " " << format_name(f) << " pow2=" << pow2);
            const Quantized got = quantize_on(b_, host, t, sh.rows, sh.cols, g, f, pow2);
            const Quantized want = quantize_on(&ref(), host, t, sh.rows, sh.cols, g, f, pow2);
            EXPECT_EQ(got.codes, want.codes);
            EXPECT_EQ(bits_of(got.scale), bits_of(want.scale));
            EXPECT_EQ(bits_of(got.inv_scale), bits_of(want.inv_scale));
            EXPECT_EQ(bits_of(got.amax), bits_of(want.amax));
            EXPECT_EQ(got.counts.saturated, want.counts.saturated);
            EXPECT_EQ(got.counts.underflow, want.counts.underflow);

            // The definition: each element cast with its own block's scale, the scales
            // those of the blocks' amaxes (padding: an all-zero block's).
            const auto values = t == DType::kFloat32 ? host : testing::from_bf16(testing::to_bf16(host));
            const auto amax = block_amax(values, g, sh.rows, sh.cols);
            for (size_t i = 0; i < amax.size(); ++i) {
              ASSERT_EQ(float_bits(got.scale[i]), float_bits(scale_from_amax(amax[i], f, pow2))) << "scale " << i;
              if (pow2) {
                int e = 0;
                ASSERT_EQ(std::frexp(got.scale[i], &e), 0.5f) << "scale " << i << " is not a power of two";
              }
            }
            for (int64_t r = 0; r < sh.rows; ++r) {
              for (int64_t c = 0; c < sh.cols; ++c) {
                const float s = got.scale[static_cast<size_t>(scale_index(g, sh.rows, sh.cols, r, c))];
                const auto i = static_cast<size_t>(r * sh.cols + c);
                ASSERT_EQ(got.codes[i], quantize_value(values[i], s, f, true)) << "element " << r << ", " << c;
              }
            }
          }
        }
      }
    }
  }
}

TEST_P(BlockScaling, AnAllZeroBlockTakesTheScaleOfZeroAndLeavesItsNeighboursAlone) {
  const int64_t rows = 256, cols = 384;
  auto host = test_matrix(rows, cols, 3);
  // Zero the 128x128 block (1, 1): for 1x128 tiles, the 128 tiles within it.
  for (int64_t r = 128; r < 256; ++r) {
    for (int64_t c = 128; c < 256; ++c) host[static_cast<size_t>(r * cols + c)] = 0.0f;
  }
  for (Granularity g : kBlockGranularities) {
    SCOPED_TRACE(granularity_name(g));
    const Quantized got = quantize_on(b_, host, DType::kFloat32, rows, cols, g, Format::kE4M3, false);
    const Quantized want = quantize_on(&ref(), host, DType::kFloat32, rows, cols, g, Format::kE4M3, false);
    EXPECT_EQ(got.codes, want.codes);
    EXPECT_EQ(bits_of(got.scale), bits_of(want.scale));
    const float zero_scale = scale_from_amax(0.0f, Format::kE4M3, false);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const bool zero_block = r >= 128 && c >= 128 && c < 256;
        const auto si = static_cast<size_t>(scale_index(g, rows, cols, r, c));
        if (zero_block) {
          ASSERT_EQ(got.scale[si], zero_scale);
          ASSERT_EQ(got.codes[static_cast<size_t>(r * cols + c)], 0);
        } else {
          ASSERT_LT(got.scale[si], zero_scale) << r << ", " << c;
        }
      }
    }
    // A block's largest value lands on the format's max (448 = code 0x7E), whatever the
    // neighbouring blocks hold.
    EXPECT_EQ(got.counts.saturated, 0u);
  }
}

TEST_P(BlockScaling, OutliersSaturateAndAreCountedAsTheReferenceCountsThem) {
  const int64_t rows = 130, cols = 300;
  auto host = test_matrix(rows, cols, 4);
  for (Granularity g : kBlockGranularities) {
    for (Format f : {Format::kE4M3, Format::kE5M2}) {
      SCOPED_TRACE(::testing::Message() << granularity_name(g) << " " << format_name(f));
      // Scales from the data without its outliers, then outliers 1000x past them.
      const auto ns = static_cast<size_t>(scale_count(g, rows, cols));
      const auto amax = block_amax(host, g, rows, cols);
      std::vector<float> scales(ns);
      for (size_t i = 0; i < ns; ++i) scales[i] = scale_from_amax(amax[i], f, false);
      auto spiked = host;
      for (size_t i = 5; i < spiked.size(); i += 997) {
        const int64_t r0 = static_cast<int64_t>(i) / cols, c0 = static_cast<int64_t>(i) % cols;
        spiked[i] = (i % 2 ? 1000.0f : -1000.0f) * amax[static_cast<size_t>(scale_index(g, rows, cols, r0, c0))];
      }
      spiked[1] = std::numeric_limits<float>::infinity();
      Buffer<float> x(b_, spiked);
      Buffer<float> s(b_, scales);
      Buffer<uint8_t> out(b_, spiked.size());
      Buffer<CastRangeCounts> counts(b_, 1);
      CastArgs a;
      a.input = {x.get(), DType::kFloat32, rows, cols};
      a.format = f;
      a.granularity = g;
      a.scale = s.get();
      a.out = out.get();
      a.range_counts = counts.get();
      ASSERT_TRUE(b_->cast(a).ok());
      std::vector<uint8_t> want(spiked.size());
      CastRangeCounts want_counts;
      CastArgs r = a;
      r.input.data = spiked.data();
      r.scale = scales.data();
      r.out = want.data();
      r.range_counts = &want_counts;
      ASSERT_TRUE(ref().cast(r).ok());
      const auto codes = out.download();
      EXPECT_EQ(codes, want);
      const CastRangeCounts c = counts.download()[0];
      EXPECT_EQ(c.saturated, want_counts.saturated);
      EXPECT_EQ(c.underflow, want_counts.underflow);
      EXPECT_GE(c.saturated, 2u);
      const uint8_t max_code = f == Format::kE4M3 ? 0x7E : 0x7B;
      for (size_t i = 5; i < spiked.size(); i += 997) {
        EXPECT_EQ(codes[i] & 0x7F, max_code) << "element " << i;
      }
      EXPECT_EQ(codes[1], max_code);
    }
  }
}

TEST_P(BlockScaling, DequantizeRoundTripsWithinHalfAnFp8UlpOfEachBlock) {
  for (Shape sh : kShapes) {
    const auto host = test_matrix(sh.rows, sh.cols, 5);
    for (Granularity g : kBlockGranularities) {
      for (DType out_t : {DType::kFloat32, DType::kBFloat16}) {
        SCOPED_TRACE(::testing::Message() << sh.rows << "x" << sh.cols << " " << granularity_name(g) << " -> "
                                          << dtype_name(out_t));
        const Quantized q = quantize_on(b_, host, DType::kFloat32, sh.rows, sh.cols, g, Format::kE4M3, false);
        const auto n = static_cast<size_t>(sh.rows * sh.cols);
        Buffer<uint8_t> codes(b_, q.codes);
        Buffer<float> scale(b_, q.scale);
        Buffer<float> out(b_, n);
        DequantizeArgs d;
        d.input = codes.get();
        d.format = Format::kE4M3;
        d.rows = sh.rows;
        d.cols = sh.cols;
        d.granularity = g;
        d.scale = scale.get();
        d.out_dtype = out_t;
        d.out = out.get();
        ASSERT_TRUE(b_->dequantize(d).ok());
        std::vector<float> want(n);
        DequantizeArgs r = d;
        r.input = q.codes.data();
        r.scale = q.scale.data();
        r.out = want.data();
        ASSERT_TRUE(ref().dequantize(r).ok());
        std::vector<float> got = out.download();
        const size_t bytes = n * dtype_size(out_t);
        EXPECT_EQ(0, std::memcmp(got.data(), want.data(), bytes));
        if (out_t != DType::kFloat32) continue;
        // e4m3: relative error at most 2^-4 for normals; below, half the subnormal quantum
        // 2^-10 divided by the block's scale.
        for (int64_t r0 = 0; r0 < sh.rows; ++r0) {
          for (int64_t c = 0; c < sh.cols; ++c) {
            const auto i = static_cast<size_t>(r0 * sh.cols + c);
            const float s = q.scale[static_cast<size_t>(scale_index(g, sh.rows, sh.cols, r0, c))];
            const double bound = std::max(std::ldexp(static_cast<double>(std::fabs(host[i])), -4), std::ldexp(1.0, -10) / s);
            ASSERT_LE(std::fabs(static_cast<double>(got[i]) - host[i]), bound) << r0 << ", " << c;
          }
        }
      }
    }
  }
}

// ---- GEMM -----------------------------------------------------------------------------------

struct GemmCase {
  int64_t m, n, k;
  Granularity ga, gb;
};

class BlockGemm : public BlockScaling {
 protected:
  struct Operands {
    Quantized a, b;
    std::vector<float> a_values, b_values;  // unquantised
  };
  Operands make(const GemmCase& c, uint32_t seed) {
    Operands o;
    o.a_values = test_matrix(c.m, c.k, seed);
    o.b_values = test_matrix(c.n, c.k, seed + 1);
    o.a = quantize_on(&ref(), o.a_values, DType::kFloat32, c.m, c.k, c.ga, Format::kE4M3, false);
    o.b = quantize_on(&ref(), o.b_values, DType::kFloat32, c.n, c.k, c.gb, Format::kE4M3, false);
    return o;
  }
  // Σ_k |A·sa · B·sb| per output: the scale of fp8.h's bound, in fp64.
  static std::vector<double> abs_products(const GemmCase& c, const Operands& o) {
    std::vector<double> out(static_cast<size_t>(c.m * c.n), 0.0);
    for (int64_t i = 0; i < c.m; ++i) {
      for (int64_t j = 0; j < c.n; ++j) {
        double acc = 0;
        for (int64_t l = 0; l < c.k; ++l) {
          const double x = fp8_to_float(o.a.codes[static_cast<size_t>(i * c.k + l)], Format::kE4M3) *
                           static_cast<double>(o.a.inv_scale[static_cast<size_t>(scale_index(c.ga, c.m, c.k, i, l))]);
          const double y = fp8_to_float(o.b.codes[static_cast<size_t>(j * c.k + l)], Format::kE4M3) *
                           static_cast<double>(o.b.inv_scale[static_cast<size_t>(scale_index(c.gb, c.n, c.k, j, l))]);
          acc += std::fabs(x * y);
        }
        out[static_cast<size_t>(i * c.n + j)] = acc;
      }
    }
    return out;
  }
  std::vector<float> run(Backend* b, const GemmCase& c, const Operands& o, DType out_dtype = DType::kFloat32,
                         const std::vector<float>* bias = nullptr, absl::Status* status = nullptr) {
    Buffer<uint8_t> a(b, o.a.codes), bm(b, o.b.codes);
    Buffer<float> sa(b, o.a.inv_scale), sb(b, o.b.inv_scale);
    Buffer<float> out(b, static_cast<size_t>(c.m * c.n));
    Buffer<float> bias_buf(b, bias != nullptr ? *bias : std::vector<float>(1));
    ScaledGemmArgs g;
    g.m = c.m;
    g.n = c.n;
    g.k = c.k;
    g.a = {a.get(), Format::kE4M3, c.ga, sa.get()};
    g.b = {bm.get(), Format::kE4M3, c.gb, sb.get()};
    g.out_dtype = out_dtype;
    g.out = out.get();
    g.bias = bias != nullptr ? bias_buf.get() : nullptr;
    const absl::Status s = b->scaled_gemm(g);
    if (status != nullptr) *status = s;
    EXPECT_TRUE(s.ok() || status != nullptr) << s;
    auto v = out.download();
    if (out_dtype == DType::kBFloat16) {  // the first m·n·2 bytes hold the bf16 values
      std::vector<float> w(static_cast<size_t>(c.m * c.n));
      const auto* h = reinterpret_cast<const uint16_t*>(v.data());
      for (size_t i = 0; i < w.size(); ++i) w[i] = bf16_to_float(h[i]);
      return w;
    }
    return v;
  }
};

constexpr GemmCase kGemmCases[] = {
    {67, 131, 256, Granularity::kBlock1x128, Granularity::kBlock128x128},
    {130, 260, 384, Granularity::kBlock1x128, Granularity::kBlock128x128},
    {130, 67, 384, Granularity::kBlock128x128, Granularity::kBlock1x128},
    {33, 129, 640, Granularity::kBlock1x128, Granularity::kBlock1x128},
    {16, 24, 2304, Granularity::kBlock1x128, Granularity::kBlock128x128},  // past one CPU depth block
    {5, 7, 128, Granularity::kBlock1x128, Granularity::kBlock1x128},
};
// The same pairings and partial blocks where cuBLASLt takes them: n a multiple of 16, m a
// multiple of 4.
constexpr GemmCase kCudaGemmCases[] = {
    {68, 144, 256, Granularity::kBlock1x128, Granularity::kBlock128x128},
    {132, 272, 384, Granularity::kBlock1x128, Granularity::kBlock128x128},
    {132, 80, 384, Granularity::kBlock128x128, Granularity::kBlock1x128},
    {36, 128, 640, Granularity::kBlock1x128, Granularity::kBlock1x128},
    {16, 32, 2304, Granularity::kBlock1x128, Granularity::kBlock128x128},
    {4, 16, 128, Granularity::kBlock1x128, Granularity::kBlock1x128},
};

// The error allowed per unit of Σ|products| before the output's rounding. Host backends sum
// each 128-wide K block in fp32 (at most k/128 + 131 units of 2^-24 in all). Hopper's fp8
// tensor cores keep fewer bits than fp32 in their accumulator within each K block (DeepSeek-V3
// measured about 14), as the other CUDA GEMM contracts allow (5e-4 relative): 2^-11.
double error_per_abs_product(const Backend& b, int64_t k) {
  return b.is_cuda() ? std::ldexp(1.0, -11) : static_cast<double>(k / 128 + 131) * std::ldexp(1.0, -24);
}

TEST_P(BlockGemm, MatchesTheReferenceWithinTheStatedBound) {
  double worst = 0;  // the largest error seen, in units of 2^-24 · Σ|products|
  const std::vector<GemmCase> cases = b_->is_cuda() ? std::vector<GemmCase>(std::begin(kCudaGemmCases),
                                                                             std::end(kCudaGemmCases))
                                                    : std::vector<GemmCase>(std::begin(kGemmCases),
                                                                            std::end(kGemmCases));
  for (const GemmCase& c : cases) {
    SCOPED_TRACE(::testing::Message() << c.m << "x" << c.n << "x" << c.k << " " << granularity_name(c.ga) << " x "
                                      << granularity_name(c.gb));
    const Operands o = make(c, 10);
    const auto got = run(b_, c, o);
    const auto want = run(&ref(), c, o);
    const auto mag = abs_products(c, o);
    const double per = error_per_abs_product(*b_, c.k);
    for (size_t i = 0; i < got.size(); ++i) {
      // The bound before the output's rounding, plus that rounding (half an fp32 ulp).
      const double bound = per * mag[i] + std::ldexp(std::fabs(static_cast<double>(want[i])), -24);
      const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
      ASSERT_LE(err, bound) << "output " << i;
      if (mag[i] > 0) worst = std::max(worst, err / (std::ldexp(1.0, -24) * mag[i]));
    }
  }
  RecordProperty("worst_error_ulps_of_sum_abs", std::to_string(worst));
}

TEST_P(BlockGemm, TheReferenceIsTheSumOfScaledBlockProducts) {
  const GemmCase c{9, 11, 384, Granularity::kBlock128x128, Granularity::kBlock1x128};
  const Operands o = make(c, 20);
  const auto got = run(&ref(), c, o);
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < c.n; ++j) {
      double acc = 0;
      for (int64_t kb = 0; kb < c.k; kb += 128) {
        double blk = 0;
        for (int64_t l = kb; l < kb + 128; ++l) {
          blk += static_cast<double>(fp8_to_float(o.a.codes[static_cast<size_t>(i * c.k + l)], Format::kE4M3)) *
                 fp8_to_float(o.b.codes[static_cast<size_t>(j * c.k + l)], Format::kE4M3);
        }
        acc += blk * o.a.inv_scale[static_cast<size_t>(scale_index(c.ga, c.m, c.k, i, kb))] *
               o.b.inv_scale[static_cast<size_t>(scale_index(c.gb, c.n, c.k, j, kb))];
      }
      EXPECT_EQ(got[static_cast<size_t>(i * c.n + j)], static_cast<float>(acc));
    }
  }
  (void)b_;
}

TEST_P(BlockGemm, ReachesTorchaoAccuracyAgainstTheUnquantisedProduct) {
  const GemmCase c = b_->is_cuda() ? GemmCase{132, 256, 384, Granularity::kBlock1x128, Granularity::kBlock128x128}
                                   : GemmCase{130, 260, 384, Granularity::kBlock1x128, Granularity::kBlock128x128};
  const Operands o = make(c, 30);
  const auto got = run(b_, c, o);
  const auto exact = testing::matmul_nt_fp64(o.a_values, o.b_values, c.m, c.n, c.k);
  const double db = testing::sqnr_db(exact, got);
  RecordProperty("sqnr_db", std::to_string(db));
  EXPECT_GE(db, 25.0);
}

TEST_P(BlockGemm, AddsTheBiasAndRoundsToBFloat16LikeTheReference) {
  const GemmCase c = b_->is_cuda() ? GemmCase{68, 144, 256, Granularity::kBlock1x128, Granularity::kBlock128x128}
                                   : GemmCase{67, 131, 256, Granularity::kBlock1x128, Granularity::kBlock128x128};
  const Operands o = make(c, 40);
  const auto bias = gaussian(static_cast<size_t>(c.n), 41);
  const auto got = run(b_, c, o, DType::kBFloat16, &bias);
  const auto want = run(&ref(), c, o, DType::kBFloat16, &bias);
  const auto mag = abs_products(c, o);
  const double per = error_per_abs_product(*b_, c.k);
  for (size_t i = 0; i < got.size(); ++i) {
    // One bf16 ulp: the two may round an fp32 sum that differs in its last bits either way
    // (by the accumulation's bound too).
    EXPECT_LE(std::fabs(got[i] - want[i]), std::ldexp(std::fabs(want[i]), -7) + per * mag[i] + 1e-30f)
        << "output " << i;
  }
  // An fp32 output takes the bias exactly: the bound of MatchesTheReferenceWithinTheStatedBound
  // and the output's rounding, as without a bias.
  const auto got32 = run(b_, c, o, DType::kFloat32, &bias);
  const auto want32 = run(&ref(), c, o, DType::kFloat32, &bias);
  for (size_t i = 0; i < got32.size(); ++i) {
    const double bound = per * mag[i] + std::ldexp(std::fabs(static_cast<double>(want32[i])), -23);
    EXPECT_LE(std::fabs(static_cast<double>(got32[i]) - want32[i]), bound) << "output " << i;
  }
}

// ---- refusals -------------------------------------------------------------------------------

TEST_P(BlockGemm, RefusesShapesAndPairingsCuBlasLtHasNoKernelFor) {
  const auto expect_refused = [&](GemmCase c, const std::string& says) {
    SCOPED_TRACE(::testing::Message() << c.m << "x" << c.n << "x" << c.k << " " << granularity_name(c.ga) << " x "
                                      << granularity_name(c.gb));
    std::vector<uint8_t> a(static_cast<size_t>(c.m * c.k)), b(static_cast<size_t>(c.n * c.k));
    std::vector<float> sa(1024, 1.0f), sb(1024, 1.0f), out(static_cast<size_t>(c.m * c.n), 7.0f);
    Buffer<uint8_t> da(b_, a), db(b_, b);
    Buffer<float> dsa(b_, sa), dsb(b_, sb), dout(b_, out);
    ScaledGemmArgs g;
    g.m = c.m;
    g.n = c.n;
    g.k = c.k;
    g.a = {da.get(), Format::kE4M3, c.ga, dsa.get()};
    g.b = {db.get(), Format::kE4M3, c.gb, dsb.get()};
    g.out = dout.get();
    const absl::Status s = b_->scaled_gemm(g);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(std::string(s.message()).find(says), std::string::npos) << s;
    EXPECT_EQ(dout.download(), out) << "memory touched";
  };
  expect_refused({16, 16, 200, Granularity::kBlock1x128, Granularity::kBlock128x128}, "k=200");
  expect_refused({16, 16, 200, Granularity::kBlock1x128, Granularity::kBlock1x128}, "multiple of 128");
  expect_refused({16, 16, 128, Granularity::kBlock128x128, Granularity::kBlock128x128}, "block128x128 x block128x128");
  expect_refused({16, 16, 128, Granularity::kBlock1x128, Granularity::kTensorwise}, "block-scaled partner");
  expect_refused({16, 16, 128, Granularity::kRowwise, Granularity::kBlock128x128}, "block-scaled partner");
  if (b_->is_cuda()) {
    // cuBLASLt's block scale modes take dimensions in multiples of 4 (n is one of 16 already).
    expect_refused({18, 16, 128, Granularity::kBlock1x128, Granularity::kBlock128x128}, "multiple of 4");
    expect_refused({18, 16, 128, Granularity::kBlock128x128, Granularity::kBlock1x128}, "multiple of 4");
  }
}

TEST_P(BlockScaling, RefusesTheFusedTransposeAndRowAmaxesAtBlockGranularity) {
  const int64_t rows = 130, cols = 300;
  const auto host = test_matrix(rows, cols, 6);
  Buffer<float> x(b_, host);
  Buffer<uint8_t> out(b_, host.size()), out_t(b_, host.size());
  Buffer<float> scale(b_, 4096), row_amax(b_, static_cast<size_t>(rows));
  for (Granularity g : kBlockGranularities) {
    SCOPED_TRACE(granularity_name(g));
    CastArgs c;
    c.input = {x.get(), DType::kFloat32, rows, cols};
    c.granularity = g;
    c.scale = scale.get();
    c.out = out.get();
    c.out_t = out_t.get();
    absl::Status s = b_->cast(c);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(std::string(s.message()).find("quantize the transposed input"), std::string::npos) << s;

    QuantizeArgs q;
    q.input = c.input;
    q.granularity = g;
    q.out = out.get();
    q.scale_out = scale.get();
    q.out_t = out_t.get();
    s = b_->quantize(q);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    q.out_t = nullptr;
    q.row_amax = row_amax.get();
    s = b_->quantize(q);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(std::string(s.message()).find(granularity_name(g)), std::string::npos) << s;
    q.row_amax = nullptr;
    q.columnwise.out_t = out_t.get();
    q.columnwise.scale_out = scale.get();
    s = b_->quantize(q);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  }
}

TEST_P(BlockScaling, TheTransposeIsScaledWithTilesOfItsOwnRows) {
  // A transposed copy for the other GEMM is the transposed input quantized 1x128: 128x1
  // tiles of the original, whose scales differ from the rows' tiles.
  const int64_t rows = 256, cols = 130;
  const auto host = test_matrix(rows, cols, 7);
  std::vector<float> transposed(host.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) transposed[static_cast<size_t>(c * rows + r)] = host[static_cast<size_t>(r * cols + c)];
  }
  const Quantized t = quantize_on(b_, transposed, DType::kFloat32, cols, rows, Granularity::kBlock1x128,
                                  Format::kE4M3, false);
  // Scale of transposed element (c, r) is that of the original's column c over rows r/128·128 + [0, 128).
  for (int64_t c = 0; c < cols; ++c) {
    for (int64_t band = 0; band < rows / 128; ++band) {
      float amax = 0;
      for (int64_t r = band * 128; r < band * 128 + 128; ++r) {
        amax = std::max(amax, std::fabs(host[static_cast<size_t>(r * cols + c)]));
      }
      const auto si = static_cast<size_t>(scale_index(Granularity::kBlock1x128, cols, rows, c, band * 128));
      ASSERT_EQ(t.scale[si], scale_from_amax(amax, Format::kE4M3, false)) << c << ", band " << band;
    }
  }
}

#if defined(FP8_CONTRACT_BACKENDS_HOST)
INSTANTIATE_TEST_SUITE_P(Host, BlockScaling, ::testing::Values("reference", "cpu"));
INSTANTIATE_TEST_SUITE_P(Host, BlockGemm, ::testing::Values("reference", "cpu"));
#endif
#if defined(FP8_CONTRACT_BACKENDS_CUDA)
// Casts bit for bit against the reference, GEMMs within Hopper's accumulator bound
// (error_per_abs_product), through cuBLASLt's block scale modes.
INSTANTIATE_TEST_SUITE_P(Cuda, BlockScaling, ::testing::Values("cuda"));
INSTANTIATE_TEST_SUITE_P(Cuda, BlockGemm, ::testing::Values("cuda"));
#endif

}  // namespace
}  // namespace fp8
