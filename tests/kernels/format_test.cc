// The fp8 formats bit by bit: every code decodes to the value the format's definition
// gives, and encoding agrees with two independent references (a brute-force nearest-value
// search, and the CUDA toolkit's own host-side conversion functions).
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "fp8/arith.h"

#if defined(FP8_HAVE_CUDA_FP8_H)
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#endif

namespace fp8 {
namespace {

struct FormatInfo {
  Format format;
  int mbits;
  int bias;
};

constexpr FormatInfo kFormats[] = {{Format::kE4M3, 3, 7}, {Format::kE5M2, 2, 15}};

bool is_nan_code(uint8_t c, Format f) {
  const uint8_t mag = c & 0x7F;
  return f == Format::kE4M3 ? mag == 0x7F : mag > 0x7C;
}

// The value a code stands for, from the definition in arXiv 2209.05433, in fp64.
double decode_by_definition(uint8_t c, const FormatInfo& fi) {
  const int ebits = 7 - fi.mbits;
  const int sign = c >> 7;
  const int exp = (c >> fi.mbits) & ((1 << ebits) - 1);
  const int man = c & ((1 << fi.mbits) - 1);
  double v;
  if (is_nan_code(c, fi.format)) return std::numeric_limits<double>::quiet_NaN();
  if (fi.format == Format::kE5M2 && exp == 31) {
    v = std::numeric_limits<double>::infinity();
  } else if (exp == 0) {
    v = std::ldexp(static_cast<double>(man), 1 - fi.bias - fi.mbits);
  } else {
    v = std::ldexp(1.0 + man / static_cast<double>(1 << fi.mbits), exp - fi.bias);
  }
  return sign ? -v : v;
}

TEST(Fp8Format, EveryCodeDecodesToItsDefinedValue) {
  for (const auto& fi : kFormats) {
    for (int c = 0; c < 256; ++c) {
      const auto code = static_cast<uint8_t>(c);
      const double want = decode_by_definition(code, fi);
      const float got = fp8_to_float(code, fi.format);
      SCOPED_TRACE(::testing::Message() << (fi.format == Format::kE4M3 ? "e4m3" : "e5m2") << " code 0x" << std::hex << c);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got));
        continue;
      }
      EXPECT_EQ(static_cast<double>(got), want);
      EXPECT_EQ(std::signbit(got), (c & 0x80) != 0);  // includes -0 for 0x80
    }
  }
}

TEST(Fp8Format, AnchorValues) {
  EXPECT_EQ(fp8_to_float(0x7E, Format::kE4M3), 448.0f);
  EXPECT_EQ(fp8_to_float(0x08, Format::kE4M3), std::ldexp(1.0f, -6));  // min normal
  EXPECT_EQ(fp8_to_float(0x01, Format::kE4M3), std::ldexp(1.0f, -9));  // min subnormal
  EXPECT_TRUE(std::isnan(fp8_to_float(0x7F, Format::kE4M3)));
  EXPECT_TRUE(std::isnan(fp8_to_float(0xFF, Format::kE4M3)));
  EXPECT_EQ(fp8_to_float(0x7B, Format::kE5M2), 57344.0f);
  EXPECT_EQ(fp8_to_float(0x04, Format::kE5M2), std::ldexp(1.0f, -14));
  EXPECT_EQ(fp8_to_float(0x01, Format::kE5M2), std::ldexp(1.0f, -16));
  EXPECT_EQ(fp8_to_float(0x7C, Format::kE5M2), std::numeric_limits<float>::infinity());
  EXPECT_EQ(fp8_to_float(0xFC, Format::kE5M2), -std::numeric_limits<float>::infinity());
  EXPECT_EQ(fp8_max(Format::kE4M3), 448.0f);
  EXPECT_EQ(fp8_max(Format::kE5M2), 57344.0f);
}

// Brute-force encoder: the nearest representable magnitude, ties to the even code. The
// value one step above max (max + ulp) stands for "overflow", so rounding decides
// overflow exactly as IEEE round-to-nearest-even would in a format with one more binade.
uint8_t encode_by_search(float x, const FormatInfo& fi, bool saturate) {
  if (std::isnan(x)) return 0x7F;
  const uint8_t max_code = fi.format == Format::kE4M3 ? 0x7E : 0x7B;
  const uint8_t overflow_code = fi.format == Format::kE4M3 ? 0x7F : 0x7C;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const double a = std::fabs(static_cast<double>(x));
  const double max = decode_by_definition(max_code, fi);
  const double ulp_at_max = max - decode_by_definition(max_code - 1, fi);
  if (a > max + ulp_at_max) return static_cast<uint8_t>(sign | (saturate ? max_code : overflow_code));
  uint8_t best = 0;
  double best_err = std::numeric_limits<double>::infinity();
  for (int c = 0; c <= max_code + 1; ++c) {
    const double v = c == max_code + 1 ? max + ulp_at_max : decode_by_definition(static_cast<uint8_t>(c), fi);
    const double err = std::fabs(a - v);
    if (err < best_err || (err == best_err && c % 2 == 0)) {
      best = static_cast<uint8_t>(c);
      best_err = err;
    }
  }
  if (best > max_code) best = saturate ? max_code : overflow_code;
  return static_cast<uint8_t>(sign | best);
}

// A dense sweep of fp32 inputs around everything fp8 can represent: every binade from
// well below the smallest subnormal to above the largest finite value, with mantissas
// on a stride plus the exact tie patterns (and their neighbours) at every bit position,
// both signs, and the special values.
std::vector<float> sweep_inputs() {
  std::vector<float> xs;
  for (int e = 127 - 30; e <= 127 + 20; ++e) {
    std::vector<uint32_t> mantissas;
    for (uint32_t m = 0; m < (1u << 23); m += 4093) mantissas.push_back(m);
    for (int t = 0; t < 23; ++t) {
      for (uint32_t top = 0; top < 8; ++top) {
        const uint32_t hi = top << 20;
        for (uint32_t m : {1u << t, (1u << t) - 1, (1u << t) + 1}) mantissas.push_back((hi | m) & 0x7FFFFF);
      }
    }
    mantissas.push_back(0x7FFFFF);
    for (uint32_t m : mantissas) {
      const uint32_t bits = (static_cast<uint32_t>(e) << 23) | m;
      xs.push_back(bits_float(bits));
      xs.push_back(bits_float(bits | 0x80000000u));
    }
  }
  const float inf = std::numeric_limits<float>::infinity();
  for (float v : {0.0f, -0.0f, inf, -inf, std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                  std::numeric_limits<float>::max(), std::numeric_limits<float>::denorm_min(),
                  std::numeric_limits<float>::min(), 448.0f, 464.0f, 464.00003f, 480.0f, 57344.0f, 61440.0f, 61439.996f,
                  -464.0f, -61440.0f}) {
    xs.push_back(v);
  }
  return xs;
}

TEST(Fp8Format, EncodingMatchesNearestValueSearch) {
  const auto xs = sweep_inputs();
  for (const auto& fi : kFormats) {
    for (bool sat : {true, false}) {
      int mismatches = 0;
      for (float x : xs) {
        const uint8_t want = encode_by_search(x, fi, sat);
        const uint8_t got = float_to_fp8(x, fi.format, sat);
        if (want != got && ++mismatches <= 5) {
          ADD_FAILURE() << (fi.format == Format::kE4M3 ? "e4m3" : "e5m2") << (sat ? " sat" : " nosat") << " x="
                        << x << " (bits 0x" << std::hex << float_bits(x) << ") want 0x" << int{want} << " got 0x"
                        << int{got};
        }
      }
      EXPECT_EQ(mismatches, 0);
    }
  }
}

TEST(Fp8Format, RoundTripIsExactForEveryFiniteCode) {
  for (const auto& fi : kFormats) {
    for (int c = 0; c < 256; ++c) {
      const auto code = static_cast<uint8_t>(c);
      const float v = fp8_to_float(code, fi.format);
      if (!std::isfinite(v)) continue;
      EXPECT_EQ(float_to_fp8(v, fi.format, true), code) << "code " << c;
      EXPECT_EQ(float_to_fp8(v, fi.format, false), code) << "code " << c;
    }
  }
}

TEST(Fp8Format, SaturationAndOverflow) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(float_to_fp8(1e30f, Format::kE4M3, true), 0x7E);
  EXPECT_EQ(float_to_fp8(-1e30f, Format::kE4M3, true), 0xFE);
  EXPECT_EQ(float_to_fp8(1e30f, Format::kE4M3, false), 0x7F);  // NaN: e4m3 has no Inf
  EXPECT_EQ(float_to_fp8(inf, Format::kE4M3, true), 0x7E);
  EXPECT_EQ(float_to_fp8(inf, Format::kE5M2, false), 0x7C);
  EXPECT_EQ(float_to_fp8(-inf, Format::kE5M2, false), 0xFC);
  EXPECT_EQ(float_to_fp8(-inf, Format::kE5M2, true), 0xFB);
  EXPECT_EQ(float_to_fp8(464.0f, Format::kE4M3, false), 0x7E);  // tie rounds to even (448)
  EXPECT_EQ(float_to_fp8(61440.0f, Format::kE5M2, false), 0x7C);  // tie rounds to even (Inf)
  EXPECT_EQ(float_to_fp8(-0.0f, Format::kE4M3, true), 0x80);
  EXPECT_EQ(float_to_fp8(std::ldexp(1.0f, -10), Format::kE4M3, true), 0x00);  // half the min subnormal: tie to 0
  EXPECT_EQ(float_to_fp8(std::ldexp(1.5f, -10), Format::kE4M3, true), 0x01);
}

// ---- the range predicates (count_cast_range) against float_to_fp8 -------------------------

// What float_to_fp8 itself says: clipped when the non-saturating cast cannot represent a
// non-NaN y; flushed when a nonzero x gives a zero code.
bool saturates_by_cast(float y, Format f) {
  return !std::isnan(y) && !std::isfinite(fp8_to_float(float_to_fp8(y, f, false), f));
}
bool underflows_by_cast(float x, float y, Format f) {
  return x != 0.0f && fp8_to_float(float_to_fp8(y, f, true), f) == 0.0f;
}

// x = y (scale 1), and a nonzero x whose product y may be anything (x = 1).
bool predicates_match_cast(uint32_t bits, Format f) {
  const float y = bits_float(bits);
  return fp8_saturates(y, f) == saturates_by_cast(y, f) && fp8_underflows(y, y, f) == underflows_by_cast(y, y, f) &&
         fp8_underflows(1.0f, y, f) == underflows_by_cast(1.0f, y, f);
}

TEST(CastRange, PredicatesMatchFloatToFp8AcrossAllFloats) {
  for (const auto& fi : kFormats) {
    SCOPED_TRACE(fi.format == Format::kE4M3 ? "e4m3" : "e5m2");
    // A stride through every bit pattern (both signs, NaNs and Infs included), then every
    // pattern within 2^16 of each threshold.
    for (uint64_t b = 0; b <= 0xFFFFFFFFu; b += 251) {
      ASSERT_TRUE(predicates_match_cast(static_cast<uint32_t>(b), fi.format)) << "bits 0x" << std::hex << b;
    }
    for (uint32_t edge : {fp8_saturation_bits(fi.format), fp8_underflow_bits(fi.format), 0x7F800000u, 0u}) {
      for (uint32_t d = 0; d < (1u << 16); ++d) {
        for (uint32_t sign : {0u, 0x80000000u}) {
          for (uint32_t mag : {(edge + d) & 0x7FFFFFFFu, (edge - d) & 0x7FFFFFFFu}) {
            ASSERT_TRUE(predicates_match_cast(sign | mag, fi.format)) << "bits 0x" << std::hex << (sign | mag);
          }
        }
      }
    }
  }
}

TEST(CastRange, BoundaryValues) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  // E4M3: max 448; 464 (max + half an ulp) ties to 448, so only what lies above it clips.
  EXPECT_FALSE(fp8_saturates(448.0f, Format::kE4M3));
  EXPECT_FALSE(fp8_saturates(-464.0f, Format::kE4M3));
  EXPECT_TRUE(fp8_saturates(std::nextafter(464.0f, 1e9f), Format::kE4M3));
  EXPECT_TRUE(fp8_saturates(-inf, Format::kE4M3));
  EXPECT_FALSE(fp8_saturates(nan, Format::kE4M3));
  // E5M2: max 57344; 61440 ties to 65536, which is Inf: it clips.
  EXPECT_FALSE(fp8_saturates(std::nextafter(61440.0f, 0.0f), Format::kE5M2));
  EXPECT_TRUE(fp8_saturates(61440.0f, Format::kE5M2));
  EXPECT_TRUE(fp8_saturates(inf, Format::kE5M2));
  // Half the smallest subnormal ties to zero; just above it rounds to the subnormal.
  EXPECT_TRUE(fp8_underflows(1.0f, std::ldexp(1.0f, -10), Format::kE4M3));
  EXPECT_FALSE(fp8_underflows(1.0f, std::nextafter(std::ldexp(1.0f, -10), 1.0f), Format::kE4M3));
  EXPECT_FALSE(fp8_underflows(1.0f, std::ldexp(1.0f, -9), Format::kE4M3));
  EXPECT_TRUE(fp8_underflows(1.0f, -std::ldexp(1.0f, -17), Format::kE5M2));
  EXPECT_FALSE(fp8_underflows(1.0f, std::ldexp(1.0f, -16), Format::kE5M2));
  EXPECT_TRUE(fp8_underflows(1e-45f, 0.0f, Format::kE4M3));  // x·scale underflowed fp32
  EXPECT_FALSE(fp8_underflows(0.0f, 0.0f, Format::kE4M3));   // zeros are exact
  EXPECT_FALSE(fp8_underflows(-0.0f, 0.0f, Format::kE5M2));
  EXPECT_FALSE(fp8_underflows(nan, nan, Format::kE4M3));
}

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(float_to_bf16(bits_float(0x3F808000u)), 0x3F80);  // tie, even stays
  EXPECT_EQ(float_to_bf16(bits_float(0x3F818000u)), 0x3F82);  // tie, odd rounds up
  EXPECT_EQ(float_to_bf16(bits_float(0x3F808001u)), 0x3F81);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7F80);  // rounds up to Inf
}

// CPUs keep NaN payloads through arithmetic and GPUs do not, so NaN results are
// canonicalised to one pattern wherever they can arise.
TEST(NaN, ResultsAreCanonicalised) {
  EXPECT_EQ(float_to_bf16(bits_float(0xFFC00000u)), kCanonicalNaNBf16);  // -NaN
  EXPECT_EQ(float_to_bf16(bits_float(0x7F800001u)), kCanonicalNaNBf16);  // signalling, payload 1
  EXPECT_EQ(float_bits(dequantize_value(0x7F, Format::kE4M3, 3.0f)), kCanonicalNaN);
  EXPECT_EQ(float_bits(dequantize_value(0xFF, Format::kE5M2, 3.0f)), kCanonicalNaN);
  EXPECT_EQ(dequantize_value(0x7C, Format::kE5M2, 2.0f), std::numeric_limits<float>::infinity());
  EXPECT_EQ(dequantize_value(0x7E, Format::kE4M3, 2.0f), 224.0f);
}

TEST(Scaling, ScaleFromAmax) {
  EXPECT_EQ(scale_from_amax(448.0f, Format::kE4M3, false), 1.0f);
  EXPECT_EQ(scale_from_amax(3.0f, Format::kE4M3, false), static_cast<float>(448.0 / 3.0));
  EXPECT_EQ(scale_from_amax(3.0f, Format::kE4M3, true), 128.0f);  // 149.3 rounded down to 2^7
  EXPECT_EQ(scale_from_amax(0.0f, Format::kE4M3, false), static_cast<float>(448.0 / 1e-12));
  EXPECT_EQ(scale_from_amax(1e-20f, Format::kE5M2, false), static_cast<float>(57344.0 / 1e-12));
  EXPECT_EQ(scale_from_amax(std::numeric_limits<float>::infinity(), Format::kE4M3, false), 0.0f);
  EXPECT_TRUE(std::isnan(scale_from_amax(std::numeric_limits<float>::quiet_NaN(), Format::kE4M3, false)));
  EXPECT_EQ(scale_from_amax(std::numeric_limits<float>::max(), Format::kE4M3, true),
            std::ldexp(1.0f, static_cast<int>(std::floor(std::log2(448.0 / std::numeric_limits<float>::max())))));
  // pow2 scales are exact powers of two for every amax.
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-30.0f, 30.0f);
  for (int i = 0; i < 1000; ++i) {
    const float amax = std::exp2(u(rng));
    const float s = scale_from_amax(amax, Format::kE4M3, true);
    int e;
    EXPECT_EQ(std::frexp(s, &e), 0.5f);
    EXPECT_LE(s, scale_from_amax(amax, Format::kE4M3, false));
    EXPECT_GT(2 * s, scale_from_amax(amax, Format::kE4M3, false));
  }
}

#if defined(FP8_HAVE_CUDA_FP8_H)

TEST(Fp8FormatVsCuda, EncodingMatchesCudaHostConversionBitForBit) {
  auto xs = sweep_inputs();
  std::mt19937 rng(12345);
  for (int i = 0; i < 1 << 20; ++i) xs.push_back(bits_float(rng()));
  for (const auto& fi : kFormats) {
    const auto interp = fi.format == Format::kE4M3 ? __NV_E4M3 : __NV_E5M2;
    for (bool sat : {true, false}) {
      int mismatches = 0;
      for (float x : xs) {
        const auto want = static_cast<uint8_t>(__nv_cvt_float_to_fp8(x, sat ? __NV_SATFINITE : __NV_NOSAT, interp));
        const uint8_t got = float_to_fp8(x, fi.format, sat);
        if (want != got && ++mismatches <= 5) {
          ADD_FAILURE() << (fi.format == Format::kE4M3 ? "e4m3" : "e5m2") << (sat ? " sat" : " nosat") << " x=" << x
                        << " (bits 0x" << std::hex << float_bits(x) << ") cuda 0x" << int{want} << " ours 0x"
                        << int{got};
        }
      }
      EXPECT_EQ(mismatches, 0);
    }
  }
}

TEST(Fp8FormatVsCuda, Bf16InputsMatchCudaBitForBit) {
  for (const auto& fi : kFormats) {
    const auto interp = fi.format == Format::kE4M3 ? __NV_E4M3 : __NV_E5M2;
    for (bool sat : {true, false}) {
      for (uint32_t h = 0; h < 0x10000; ++h) {
        __nv_bfloat16_raw raw;
        raw.x = static_cast<unsigned short>(h);
        const auto want = static_cast<uint8_t>(__nv_cvt_bfloat16raw_to_fp8(raw, sat ? __NV_SATFINITE : __NV_NOSAT, interp));
        const uint8_t got = float_to_fp8(bf16_to_float(static_cast<uint16_t>(h)), fi.format, sat);
        ASSERT_EQ(want, got) << "bf16 0x" << std::hex << h;
      }
    }
  }
}

TEST(Fp8FormatVsCuda, DecodingMatchesCuda) {
  for (const auto& fi : kFormats) {
    const auto interp = fi.format == Format::kE4M3 ? __NV_E4M3 : __NV_E5M2;
    for (int c = 0; c < 256; ++c) {
      const __half h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(c), interp);
      const float want = __half2float(h);
      const float got = fp8_to_float(static_cast<uint8_t>(c), fi.format);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << c;
      } else {
        EXPECT_EQ(want, got) << c;
      }
    }
  }
}

TEST(Bf16VsCuda, RoundingMatchesCuda) {
  std::mt19937 rng(99);
  for (int i = 0; i < 1 << 20; ++i) {
    const float x = bits_float(rng());
    const __nv_bfloat16 b = __float2bfloat16_rn(x);
    const auto want = static_cast<__nv_bfloat16_raw>(b).x;
    const uint16_t got = float_to_bf16(x);
    if (std::isnan(x)) {
      EXPECT_TRUE(std::isnan(bf16_to_float(got)));
    } else {
      ASSERT_EQ(want, got) << "x bits 0x" << std::hex << float_bits(x);
    }
  }
}

#else

TEST(Fp8FormatVsCuda, EncodingMatchesCudaHostConversionBitForBit) {
  GTEST_SKIP() << "built without the CUDA toolkit: cuda_fp8.h is not available as a reference";
}

#endif

}  // namespace
}  // namespace fp8
