#include "common/metrics/text_format.h"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "common/metrics/names.h"

namespace fp8::metrics {
namespace {

TEST(FormatValue, IntegersWithoutExponent) {
  EXPECT_EQ(format_value(0), "0");
  EXPECT_EQ(format_value(-0.0), "0");
  EXPECT_EQ(format_value(42), "42");
  EXPECT_EQ(format_value(-7), "-7");
  EXPECT_EQ(format_value(1e6), "1000000");
  EXPECT_EQ(format_value(1234567890123.0), "1234567890123");
  EXPECT_EQ(format_value(1e18), "1000000000000000000");
}

TEST(FormatValue, FractionsShortestRoundTrip) {
  EXPECT_EQ(format_value(0.005), "0.005");
  EXPECT_EQ(format_value(2.5), "2.5");
  EXPECT_EQ(format_value(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(format_value(1e-7), "1e-07");
  EXPECT_EQ(format_value(1e300), "1e+300");  // beyond int64: exponent is fine
}

TEST(FormatValue, SpecialValuesAsPrometheusSpellsThem) {
  EXPECT_EQ(format_value(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(format_value(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(format_value(std::nan("")), "NaN");
}

TEST(Escape, HelpAndLabelValues) {
  EXPECT_EQ(escape_help("a\\b\nc\"d"), "a\\\\b\\nc\"d");
  EXPECT_EQ(escape_label_value("a\\b\nc\"d"), "a\\\\b\\nc\\\"d");
  EXPECT_EQ(render_labels({"a", "b"}, {"x", "y\""}), "a=\"x\",b=\"y\\\"\"");
  EXPECT_EQ(render_labels({}, {}), "");
}

TEST(Names, Validity) {
  EXPECT_TRUE(is_valid_metric_name("fp8_job_info"));
  EXPECT_TRUE(is_valid_metric_name(":a:b_1"));
  EXPECT_FALSE(is_valid_metric_name("1a"));
  EXPECT_FALSE(is_valid_metric_name("a.b"));
  EXPECT_TRUE(is_valid_label_name("job_id"));
  EXPECT_TRUE(is_valid_label_name("_x"));
  EXPECT_FALSE(is_valid_label_name("__x"));
  EXPECT_FALSE(is_valid_label_name("a:b"));
  EXPECT_FALSE(is_valid_label_name(""));
}

}  // namespace
}  // namespace fp8::metrics
