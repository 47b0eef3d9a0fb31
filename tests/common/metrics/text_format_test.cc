#include "common/metrics/text_format.h"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "common/metrics/names.h"

namespace fp8::metrics {
namespace {

TEST(FormatValue, IntegersWithoutExponent) {
  EXPECT_EQ(FormatValue(0), "0");
  EXPECT_EQ(FormatValue(-0.0), "0");
  EXPECT_EQ(FormatValue(42), "42");
  EXPECT_EQ(FormatValue(-7), "-7");
  EXPECT_EQ(FormatValue(1e6), "1000000");
  EXPECT_EQ(FormatValue(1234567890123.0), "1234567890123");
  EXPECT_EQ(FormatValue(1e18), "1000000000000000000");
}

TEST(FormatValue, FractionsShortestRoundTrip) {
  EXPECT_EQ(FormatValue(0.005), "0.005");
  EXPECT_EQ(FormatValue(2.5), "2.5");
  EXPECT_EQ(FormatValue(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(FormatValue(1e-7), "1e-07");
  EXPECT_EQ(FormatValue(1e300), "1e+300");  // beyond int64: exponent is fine
}

TEST(FormatValue, SpecialValuesAsPrometheusSpellsThem) {
  EXPECT_EQ(FormatValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatValue(std::nan("")), "NaN");
}

TEST(Escape, HelpAndLabelValues) {
  EXPECT_EQ(EscapeHelp("a\\b\nc\"d"), "a\\\\b\\nc\"d");
  EXPECT_EQ(EscapeLabelValue("a\\b\nc\"d"), "a\\\\b\\nc\\\"d");
  EXPECT_EQ(RenderLabels({"a", "b"}, {"x", "y\""}), "a=\"x\",b=\"y\\\"\"");
  EXPECT_EQ(RenderLabels({}, {}), "");
}

TEST(Names, Validity) {
  EXPECT_TRUE(IsValidMetricName("fp8_job_info"));
  EXPECT_TRUE(IsValidMetricName(":a:b_1"));
  EXPECT_FALSE(IsValidMetricName("1a"));
  EXPECT_FALSE(IsValidMetricName("a.b"));
  EXPECT_TRUE(IsValidLabelName("job_id"));
  EXPECT_TRUE(IsValidLabelName("_x"));
  EXPECT_FALSE(IsValidLabelName("__x"));
  EXPECT_FALSE(IsValidLabelName("a:b"));
  EXPECT_FALSE(IsValidLabelName(""));
}

}  // namespace
}  // namespace fp8::metrics
