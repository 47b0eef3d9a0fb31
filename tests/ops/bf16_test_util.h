// bf16 helpers for the model-op tests (CPU and CUDA): bf16 carried as raw bits, as in
// fp8/arith.h, converted with arith.h's own functions, and compared bit for bit or as the
// rounding of an fp32 result within a tolerance.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "fp8/arith.h"

namespace fp8::ops_test {

using Bf16 = std::vector<uint16_t>;

// A bf16 quiet NaN: the initial contents of a bf16 buffer an op must overwrite entirely.
inline constexpr uint16_t kBf16NaN = 0x7FC0;

inline Bf16 to_bf16(const std::vector<float>& x) {
  Bf16 out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = float_to_bf16(x[i]);
  return out;
}

inline std::vector<float> widen(const Bf16& x) {
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = bf16_to_float(x[i]);
  return out;
}

inline Bf16 bf16_nans(size_t n) { return Bf16(n, kBf16NaN); }

inline void expect_same_bits(const Bf16& got, const Bf16& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t mismatches = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i] && mismatches++ == 0) first = i;
  }
  EXPECT_EQ(mismatches, 0u) << what << ": " << mismatches << " of " << got.size() << " differ, first at " << first
                            << ": got " << bf16_to_float(got[first]) << " want " << bf16_to_float(want[first]);
}

// Each got[i] must be the bf16 rounding of some value within the fp32 tolerance of
// want32[i] (an fp32 result, e.g. the CPU's fp32 op on the widened inputs, whose rounding
// is the CPU's bf16 path): between round(y − a) and round(y + a), a = tol · max(floor, |y|).
// That is an fp32 comparison plus one rounding: where two fp32 results within the
// tolerance straddle a bf16 rounding boundary they round to neighbours, and nowhere else
// may the bf16 values differ, so a store that truncates, or rounds twice, fails.
inline void expect_rounding_of_near(const Bf16& got, const std::vector<float>& want32, double tol, double floor,
                                    const std::string& what) {
  ASSERT_EQ(got.size(), want32.size()) << what;
  size_t failures = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double y = want32[i];
    const double a = tol * std::max(floor, std::abs(y));
    // One float step further out on each side, so that the double -> float conversion of
    // the bounds cannot narrow them.
    const float lo = std::nextafter(static_cast<float>(y - a), -INFINITY);
    const float hi = std::nextafter(static_cast<float>(y + a), INFINITY);
    const float g = bf16_to_float(got[i]);
    if (!(g >= bf16_to_float(float_to_bf16(lo)) && g <= bf16_to_float(float_to_bf16(hi))) && failures++ == 0) {
      first = i;
    }
  }
  EXPECT_EQ(failures, 0u) << what << ": " << failures << " of " << got.size()
                          << " are not the rounding of a value within tolerance, first at " << first << ": got "
                          << bf16_to_float(got[first]) << ", fp32 reference " << want32[first];
}

}  // namespace fp8::ops_test
