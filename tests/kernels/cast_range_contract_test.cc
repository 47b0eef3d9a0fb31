// count_cast_range, the saturation / underflow count behind the numerics metrics, and the
// same counts taken by a cast or quantize as it casts (range_counts), run against every
// backend like the rest of the contract: the reference and the fast CPU
// backend (unit tests), and CUDA (gpu tests; skipped, saying why, where no GPU is present).
//
// Values sit exactly on the boundaries float_to_fp8 rounds at (fp8 max, max + half an ulp,
// the smallest subnormal, half of it, the floats either side), plus zeros, ±Inf and NaN.
// They are placed as y = x · scale with power-of-two scales, so that x·scale is exact and
// lands on the boundary under every granularity. Counting conventions (fp8.h,
// CastRangeArgs): Inf saturates; NaN is neither saturated nor underflowed (the cast
// carries it as NaN; it is not clipped and not flushed, and amax reports it); a |y| within
// half an ulp of max rounds to max and is not counted.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "fp8/fp8.h"
#include "tests/kernels/backend_test_util.h"

namespace fp8 {
namespace {

using testing::Buffer;

class CastRangeContract : public testing::BackendTest {};

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// One boundary value of y = x·scale: `base` moved by `ulps` steps of the input dtype (the
// next float or next bf16 up or down in magnitude), with the expected outcome.
struct Boundary {
  const char* what;
  float base;
  int ulps;
  bool saturated;
  bool underflow;
};

// Steps |v| by `ulps` representable values of dtype t (v itself must be representable).
float step(float v, int ulps, DType t) {
  if (ulps == 0 || !std::isfinite(v)) return v;
  const uint32_t sign = float_bits(v) & 0x80000000u;
  const uint32_t unit = t == DType::kFloat32 ? 1u : 1u << 16;
  return bits_float(sign | (abs_bits(v) + static_cast<uint32_t>(ulps) * unit));
}

std::vector<Boundary> boundaries(Format f) {
  const float min_sub = f == Format::kE4M3 ? std::ldexp(1.0f, -9) : std::ldexp(1.0f, -16);
  const float half_sub = min_sub / 2;
  std::vector<Boundary> v = {
      {"zero", 0.0f, 0, false, false},
      {"negative zero", -0.0f, 0, false, false},
      {"one", 1.0f, 0, false, false},
      {"+inf", kInf, 0, true, false},
      {"-inf", -kInf, 0, true, false},
      {"nan", kNaN, 0, false, false},
      {"min subnormal", min_sub, 0, false, false},
      {"-min subnormal", -min_sub, 0, false, false},
      {"half min subnormal (ties to 0)", half_sub, 0, false, true},
      {"-half min subnormal", -half_sub, 0, false, true},
      {"just above half min subnormal", half_sub, 1, false, false},
      {"just below half min subnormal", half_sub, -1, false, true},
      {"far below the subnormals", std::ldexp(1.0f, -40), 0, false, true},
      {"fp32 subnormal", std::ldexp(1.0f, -130), 0, false, true},
  };
  if (f == Format::kE4M3) {
    v.insert(v.end(), {
                          {"max", 448.0f, 0, false, false},
                          {"-max", -448.0f, 0, false, false},
                          {"max + half ulp (ties to max)", 464.0f, 0, false, false},
                          {"-(max + half ulp)", -464.0f, 0, false, false},
                          {"just above max + half ulp", 464.0f, 1, true, false},
                          {"-(just above max + half ulp)", -464.0f, 1, true, false},
                          {"far above max", 1e6f, 0, true, false},
                      });
  } else {
    v.insert(v.end(), {
                          {"max", 57344.0f, 0, false, false},
                          {"just below max + half ulp", 61440.0f, -1, false, false},
                          {"max + half ulp (ties to Inf)", 61440.0f, 0, true, false},
                          {"-(max + half ulp)", -61440.0f, 0, true, false},
                          {"far above max", 1e9f, 0, true, false},
                      });
  }
  return v;
}

// Powers of two, so that (y / s) · s == y exactly for every boundary y.
float pow2_scale(int64_t i) { return std::ldexp(1.0f, static_cast<int>(i % 7) - 3); }

struct Shape {
  int64_t rows, cols;
};

// A [rows, cols] input whose element (r, c) is boundary (r·cols + c)·31 mod T divided by the
// scale that covers it, and the counts that must come out. 31 is prime and above T, so every
// boundary value appears, scattered over rows and columns.
constexpr size_t kScatter = 31;
struct Layout {
  std::vector<float> x;
  std::vector<float> scales;
  CastRangeCounts want;
};

Layout layout(const std::vector<Boundary>& table, Shape s, Granularity g, DType t) {
  EXPECT_LT(table.size(), kScatter);
  Layout l;
  l.scales.resize(static_cast<size_t>(scale_count(g, s.rows, s.cols)));
  for (size_t i = 0; i < l.scales.size(); ++i) l.scales[i] = pow2_scale(static_cast<int64_t>(i) + 1);
  for (int64_t r = 0; r < s.rows; ++r) {
    for (int64_t c = 0; c < s.cols; ++c) {
      const Boundary& b = table[static_cast<size_t>(r * s.cols + c) * kScatter % table.size()];
      const int64_t si = g == Granularity::kTensorwise ? 0 : g == Granularity::kRowwise ? r : c;
      l.x.push_back(step(b.base, b.ulps, t) / l.scales[static_cast<size_t>(si)]);
      l.want.saturated += b.saturated;
      l.want.underflow += b.underflow;
    }
  }
  return l;
}

// How the counts are taken: by count_cast_range, or by a cast that counts as it casts
// (CastArgs::range_counts), writing out (on the GPU, the flat kernel) or only out_t (the
// tiled one). All three must count alike.
enum class Route { kCountPass, kCastOut, kCastOutT };
constexpr Route kRoutes[] = {Route::kCountPass, Route::kCastOut, Route::kCastOutT};
const char* route_name(Route r) {
  return r == Route::kCountPass ? "count_cast_range" : r == Route::kCastOut ? "cast to out" : "cast to out_t";
}

// Counts on the backend under test by `route`; input given as fp32 host values and
// uploaded as `t` (bf16 values in the layout are exact in bf16).
CastRangeCounts count(Backend* b, const std::vector<float>& x, Shape s, DType t, Format f, Granularity g,
                      const std::vector<float>& scales, Route route = Route::kCountPass) {
  Buffer<float> xf(b, x);
  Buffer<uint16_t> xb(b, testing::to_bf16(x));
  Buffer<float> sc(b, scales.empty() ? std::vector<float>{1.0f} : scales);
  Buffer<CastRangeCounts> out(b, 1);
  out.upload({CastRangeCounts{12345, 67890}});  // overwritten, not added to
  const MatrixRef input{t == DType::kFloat32 ? static_cast<const void*>(xf.get()) : xb.get(), t, s.rows, s.cols};
  absl::Status st;
  if (route == Route::kCountPass) {
    CastRangeArgs a;
    a.input = input;
    a.format = f;
    a.granularity = g;
    a.scale = sc.get();
    a.counts = out.get();
    st = b->count_cast_range(a);
  } else {
    Buffer<uint8_t> codes(b, x.size());
    CastArgs c;
    c.input = input;
    c.format = f;
    c.granularity = g;
    c.scale = sc.get();
    (route == Route::kCastOut ? c.out : c.out_t) = codes.get();
    c.range_counts = out.get();
    st = b->cast(c);
  }
  EXPECT_TRUE(st.ok()) << st;
  return out.download()[0];
}

TEST_P(CastRangeContract, BoundaryValuesCountExactlyForEveryFormatGranularityAndDtype) {
  // Ragged columns (chunks cross rows on the GPU), a single row, and one large enough for
  // the CPU to split across threads.
  for (Shape s : {Shape{37, 53}, Shape{1, 999}, Shape{64, 48}, Shape{260, 1031}}) {
    for (Format f : {Format::kE4M3, Format::kE5M2}) {
      const std::vector<Boundary> table = boundaries(f);
      for (Granularity g : {Granularity::kTensorwise, Granularity::kRowwise, Granularity::kColumnwise}) {
        for (DType t : {DType::kFloat32, DType::kBFloat16}) {
          const Layout l = layout(table, s, g, t);
          for (Route route : kRoutes) {
            SCOPED_TRACE(::testing::Message() << s.rows << "x" << s.cols << " " << format_name(f) << " "
                                              << granularity_name(g) << " " << dtype_name(t) << " "
                                              << route_name(route));
            const CastRangeCounts got = count(b_, l.x, s, t, f, g, l.scales, route);
            EXPECT_EQ(got.saturated, l.want.saturated);
            EXPECT_EQ(got.underflow, l.want.underflow);
          }
        }
      }
    }
  }
}

// Each boundary alone, so that a wrong count names the value.
TEST_P(CastRangeContract, EachBoundaryValueAlone) {
  for (Format f : {Format::kE4M3, Format::kE5M2}) {
    for (const Boundary& b : boundaries(f)) {
      for (DType t : {DType::kFloat32, DType::kBFloat16}) {
        for (Route route : kRoutes) {
          SCOPED_TRACE(::testing::Message() << format_name(f) << " " << b.what << " " << dtype_name(t) << " "
                                            << route_name(route));
          // Scale 4: x = y / 4 (exact) is what the cast sees.
          const std::vector<float> x(16, step(b.base, b.ulps, t) / 4.0f);
          const CastRangeCounts got = count(b_, x, {1, 16}, t, f, Granularity::kTensorwise, {4.0f}, route);
          EXPECT_EQ(got.saturated, b.saturated ? 16u : 0u);
          EXPECT_EQ(got.underflow, b.underflow ? 16u : 0u);
        }
      }
    }
  }
}

// Arbitrary (non power-of-two) scales and data with outliers, against the reference, which
// counts with float_to_fp8 itself.
TEST_P(CastRangeContract, MatchesTheReferenceOnRandomData) {
  const Shape s{97, 301};
  std::vector<float> x = testing::gaussian(static_cast<size_t>(s.rows * s.cols), 11);
  for (size_t i = 0; i < x.size(); i += 13) x[i] *= 300.0f;   // saturate at the scales below
  for (size_t i = 5; i < x.size(); i += 17) x[i] *= 1e-8f;    // underflow (some only in e4m3)
  for (size_t i = 9; i < x.size(); i += 101) x[i] = 0.0f;
  for (Format f : {Format::kE4M3, Format::kE5M2}) {
    for (Granularity g : {Granularity::kTensorwise, Granularity::kRowwise, Granularity::kColumnwise}) {
      std::vector<float> scales(static_cast<size_t>(scale_count(g, s.rows, s.cols)));
      for (size_t i = 0; i < scales.size(); ++i) {
        scales[i] = (f == Format::kE4M3 ? 1.7f : 190.3f) * (1.0f + 0.37f * static_cast<float>(i % 5));
      }
      for (DType t : {DType::kFloat32, DType::kBFloat16}) {
        SCOPED_TRACE(::testing::Message() << format_name(f) << " " << granularity_name(g) << " " << dtype_name(t));
        const CastRangeCounts got = count(b_, x, s, t, f, g, scales);
        const CastRangeCounts want = count(&reference_backend(), x, s, t, f, g, scales);
        EXPECT_EQ(got.saturated, want.saturated);
        EXPECT_EQ(got.underflow, want.underflow);
        EXPECT_GT(want.saturated, 0u);
        EXPECT_GT(want.underflow, 0u);
      }
    }
  }
}

// The scale a delayed cast uses when its amax was Inf is 0: every nonzero finite value
// flushes, and Inf·0 is NaN, which counts as neither.
TEST_P(CastRangeContract, ZeroScaleFlushesEveryNonzeroValue) {
  const std::vector<float> x = {1.0f, -2.0f, 0.0f, kInf, kNaN, 1e-30f, 3e30f, -0.0f};
  const CastRangeCounts got = count(b_, x, {2, 4}, DType::kFloat32, Format::kE4M3, Granularity::kTensorwise, {0.0f});
  EXPECT_EQ(got.saturated, 0u);
  EXPECT_EQ(got.underflow, 4u);
}

TEST_P(CastRangeContract, EmptyInputWritesZeros) {
  for (Route route : kRoutes) {
    SCOPED_TRACE(route_name(route));
    const CastRangeCounts got =
        count(b_, {}, {0, 16}, DType::kFloat32, Format::kE4M3, Granularity::kRowwise, {}, route);
    EXPECT_EQ(got.saturated, 0u);
    EXPECT_EQ(got.underflow, 0u);
  }
}

// A quantize that counts as it casts counts with the scales it derived: what
// count_cast_range finds with its scale_out. Outliers set the amaxes and push small
// values into underflow (dynamic scaling saturates nothing by construction).
TEST_P(CastRangeContract, QuantizeCountsWithTheScalesItDerives) {
  const Shape s{70, 96};
  std::vector<float> x = testing::gaussian(static_cast<size_t>(s.rows * s.cols), 12);
  for (size_t i = 0; i < x.size(); i += 37) x[i] *= 1e9f;
  for (size_t i = 11; i < x.size(); i += 41) x[i] *= 1e-9f;
  for (Format f : {Format::kE4M3, Format::kE5M2}) {
    for (Granularity g : {Granularity::kTensorwise, Granularity::kRowwise, Granularity::kColumnwise}) {
      for (DType t : {DType::kFloat32, DType::kBFloat16}) {
        SCOPED_TRACE(::testing::Message() << format_name(f) << " " << granularity_name(g) << " " << dtype_name(t));
        const int64_t n = scale_count(g, s.rows, s.cols);
        Buffer<float> xf(b_, x);
        Buffer<uint16_t> xb(b_, testing::to_bf16(x));
        Buffer<float> scales(b_, static_cast<size_t>(n));
        Buffer<uint8_t> codes(b_, x.size()), codes_t(b_, x.size());
        Buffer<CastRangeCounts> counted(b_, 1);
        QuantizeArgs q;
        q.input = {t == DType::kFloat32 ? static_cast<const void*>(xf.get()) : xb.get(), t, s.rows, s.cols};
        q.format = f;
        q.granularity = g;
        q.out = codes.get();
        q.out_t = codes_t.get();
        q.scale_out = scales.get();
        q.range_counts = counted.get();
        ASSERT_TRUE(b_->quantize(q).ok());
        const CastRangeCounts got = counted.download()[0];
        const CastRangeCounts want = count(b_, x, s, t, f, g, scales.download());
        EXPECT_EQ(got.saturated, want.saturated);
        EXPECT_EQ(got.underflow, want.underflow);
        EXPECT_GT(want.underflow, 0u);
      }
    }
  }
}

TEST_P(CastRangeContract, BadArgumentsAreRejectedWithoutTouchingMemory) {
  Buffer<float> x(b_, std::vector<float>(64, 1000.0f)), scale(b_, std::vector<float>{1.0f});
  Buffer<CastRangeCounts> out(b_, 1);
  out.upload({CastRangeCounts{7, 9}});
  CastRangeArgs good;
  good.input = {x.get(), DType::kFloat32, 8, 8};
  good.scale = scale.get();
  good.counts = out.get();
  const auto expect_invalid = [&](const CastRangeArgs& a, const char* says) {
    const absl::Status st = b_->count_cast_range(a);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_NE(std::string(st.message()).find(says), std::string::npos) << st;
    const CastRangeCounts after = out.download()[0];
    EXPECT_EQ(after.saturated, 7u);
    EXPECT_EQ(after.underflow, 9u);
  };
  CastRangeArgs a = good;
  a.counts = nullptr;
  expect_invalid(a, "count_cast_range counts: is null");
  a = good;
  a.scale = nullptr;
  expect_invalid(a, "count_cast_range scale: is null");
  a = good;
  a.input.dtype = DType::kE4M3;
  expect_invalid(a, "count_cast_range input: dtype float8_e4m3fn");
  a = good;
  a.input.rows = -1;
  expect_invalid(a, "negative shape");
  if (b_->is_cuda()) {
    a = good;
    a.input.data = x.get() + 1;  // 4 bytes past a 16-byte boundary
    expect_invalid(a, "not 16-byte aligned");
    // A cast that counts as it casts checks its counts' pointer the same way, before any
    // work is queued.
    Buffer<uint8_t> codes(b_, 64);
    CastArgs c;
    c.input = good.input;
    c.scale = scale.get();
    c.out = codes.get();
    c.range_counts = reinterpret_cast<CastRangeCounts*>(reinterpret_cast<char*>(out.get()) + 4);
    const absl::Status st = b_->cast(c);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_NE(std::string(st.message()).find("cast range_counts"), std::string::npos) << st;
    EXPECT_EQ(out.download()[0].saturated, 7u);
  }
  ASSERT_TRUE(b_->count_cast_range(good).ok());
  EXPECT_EQ(out.download()[0].saturated, 64u);  // 1000 > 464
}

#if defined(FP8_CONTRACT_BACKENDS_HOST)
INSTANTIATE_TEST_SUITE_P(Host, CastRangeContract, ::testing::Values("reference", "cpu"));
#endif
#if defined(FP8_CONTRACT_BACKENDS_CUDA)
INSTANTIATE_TEST_SUITE_P(Cuda, CastRangeContract, ::testing::Values("cuda"));
#endif

}  // namespace
}  // namespace fp8
