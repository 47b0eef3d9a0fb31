// What the registry's exposition (prometheus-cpp's TextSerializer) writes for the values
// the product exports. Names: registry_test's RegistryDeathTest.
#include <cmath>
#include <limits>
#include <string>

#include <gtest/gtest.h>

#include "common/metrics/check.h"
#include "common/metrics/registry.h"

namespace fp8::metrics {
namespace {

// The sample line of a one-series gauge holding `value`.
std::string sample_of(double value) {
  Registry r;
  r.gauge("g", "G.", {}).with().set(value);
  const std::string text = r.expose();
  const size_t at = text.find("\ng ");
  EXPECT_NE(at, std::string::npos) << text;
  return text.substr(at + 3, text.find('\n', at + 1) - at - 3);
}

TEST(Exposition, IntegersWithoutExponent) {
  EXPECT_EQ(sample_of(0), "0");
  EXPECT_EQ(sample_of(42), "42");
  EXPECT_EQ(sample_of(-7), "-7");
  EXPECT_EQ(sample_of(1e6), "1000000");
  EXPECT_EQ(sample_of(1234567890123.0), "1234567890123");
}

// prometheus-cpp writes 16 significant digits: a value reads back within one part in 1e15
// (0.1 + 0.2 is written "0.3").
TEST(Exposition, FractionsReadBackToSixteenDigits) {
  EXPECT_EQ(sample_of(0.005), "0.005");
  EXPECT_EQ(sample_of(2.5), "2.5");
  for (double v : {0.1 + 0.2, 1e-7, 1e300, 1.0 / 3, 5.5541234567891234}) {
    EXPECT_NEAR(std::stod(sample_of(v)), v, 1e-15 * v) << sample_of(v);
  }
}

TEST(Exposition, SpecialValuesAsPrometheusReadsThem) {
  EXPECT_EQ(sample_of(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(sample_of(-std::numeric_limits<double>::infinity()), "-Inf");
  // Prometheus parses NaN in any case (Go's strconv.ParseFloat); promtool_test checks a
  // NaN loss is accepted.
  const std::string nan = sample_of(std::nan(""));
  ASSERT_EQ(nan.size(), 3u);
  EXPECT_TRUE((nan[0] == 'N' || nan[0] == 'n') && (nan[2] == 'N' || nan[2] == 'n')) << nan;
}

TEST(NumberText, ShortestRoundTrip) {
  EXPECT_EQ(internal::number_text(0.005), "0.005");
  EXPECT_EQ(internal::number_text(1e-7), "1e-07");
  EXPECT_EQ(internal::number_text(10), "10");
}

}  // namespace
}  // namespace fp8::metrics
