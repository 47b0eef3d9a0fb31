// Residual adds and the gradient-norm pieces (sum of squares, scaling).
#include <cmath>

#include <gtest/gtest.h>

#include "fp8/model_ops.h"
#include "tests/ops/gradient_check.h"

namespace fp8::ops_test {
namespace {

constexpr size_t kN = 100003;  // several chunks, not a multiple of anything

TEST(Elementwise, AddWritesTheSumAndMayWriteOverAnInput) {
  const auto a = uniform(kN, 1), b = uniform(kN, 2);
  auto out = nans(kN);
  ASSERT_TRUE(cpu_model_ops().add(a.data(), b.data(), static_cast<int64_t>(kN), out.data()).ok());
  for (size_t i = 0; i < kN; ++i) ASSERT_EQ(out[i], a[i] + b[i]) << i;
  auto in_place = a;
  ASSERT_TRUE(cpu_model_ops().add(in_place.data(), b.data(), static_cast<int64_t>(kN), in_place.data()).ok());
  EXPECT_EQ(in_place, out);
}

TEST(Elementwise, AccumulateAddsIntoY) {
  const auto x = uniform(kN, 3);
  auto y = uniform(kN, 4);
  const auto y0 = y;
  ASSERT_TRUE(cpu_model_ops().accumulate(x.data(), static_cast<int64_t>(kN), y.data()).ok());
  for (size_t i = 0; i < kN; ++i) ASSERT_EQ(y[i], y0[i] + x[i]) << i;
}

TEST(Elementwise, SumOfSquaresIsExactToDoubleRoundingAndRepeatable) {
  const auto x = uniform(kN, 5, -3.0f, 3.0f);
  double want = 0.0;
  for (float v : x) want += static_cast<double>(v) * v;
  const auto got = cpu_model_ops().sum_of_squares(x.data(), static_cast<int64_t>(kN));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_NEAR(*got, want, 1e-12 * want);
  EXPECT_EQ(*cpu_model_ops().sum_of_squares(x.data(), static_cast<int64_t>(kN)), *got);
}

// The global grad norm's one call: every buffer's sum_of_squares added in order, to the bit.
TEST(Elementwise, TotalSumOfSquaresAddsEachBuffersSumInOrder) {
  const auto a = uniform(kN, 8), b = uniform(1000, 9), c = uniform(3, 10);
  auto& ops = cpu_model_ops();
  const double want = *ops.sum_of_squares(a.data(), static_cast<int64_t>(a.size())) +
                      *ops.sum_of_squares(b.data(), static_cast<int64_t>(b.size())) +
                      *ops.sum_of_squares(c.data(), static_cast<int64_t>(c.size()));
  const auto got = ops.total_sum_of_squares({{a.data(), static_cast<int64_t>(a.size())},
                                             {b.data(), static_cast<int64_t>(b.size())},
                                             {c.data(), static_cast<int64_t>(c.size())}});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, want);
  EXPECT_EQ(*ops.total_sum_of_squares({}), 0.0);

  // One bad buffer fails the call, named like the single-buffer check.
  const auto bad = ops.total_sum_of_squares({{a.data(), 4}, {nullptr, 4}});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(bad.status().message()).find("sum_of_squares"), std::string::npos) << bad.status();
}

// The grad norm without a return to the host: total_sum_of_squares' double, and the clipping
// factor max_norm / norm where the norm exceeds max_norm > 0 (else 1; NaN for a non-finite
// sum, which makes AdamW skip its update).
TEST(Elementwise, QueueGradNormWritesTheTotalAndTheClippingFactor) {
  const auto a = uniform(kN, 11), b = uniform(1000, 12);
  auto& ops = cpu_model_ops();
  const std::vector<FloatSpan> spans = {{a.data(), static_cast<int64_t>(a.size())},
                                        {b.data(), static_cast<int64_t>(b.size())}};
  const double total = *ops.total_sum_of_squares(spans), norm = std::sqrt(total);
  double sum = NAN;
  float clip = NAN;
  ASSERT_TRUE(ops.queue_grad_norm(spans, norm / 4, &sum, &clip).ok());
  EXPECT_EQ(sum, total);
  EXPECT_EQ(clip, static_cast<float>((norm / 4) / norm));
  ASSERT_TRUE(ops.queue_grad_norm(spans, norm * 2, &sum, &clip).ok());
  EXPECT_EQ(clip, 1.0f);  // within the limit
  ASSERT_TRUE(ops.queue_grad_norm(spans, 0.0, &sum, &clip).ok());
  EXPECT_EQ(clip, 1.0f);  // no limit: measured only
  ASSERT_TRUE(ops.queue_grad_norm({}, 1.0, &sum, &clip).ok());
  EXPECT_EQ(sum, 0.0);
  EXPECT_EQ(clip, 1.0f);

  std::vector<float> diverged = b;
  diverged[17] = INFINITY;
  ASSERT_TRUE(ops.queue_grad_norm({{diverged.data(), 1000}}, 1.0, &sum, &clip).ok());
  EXPECT_TRUE(std::isinf(sum));
  EXPECT_TRUE(std::isnan(clip));

  const absl::Status no_out = ops.queue_grad_norm(spans, 1.0, nullptr, &clip);
  EXPECT_EQ(no_out.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(no_out.message()).find("queue_grad_norm: sum_of_squares is null"), std::string::npos) << no_out;
  const absl::Status negative = ops.queue_grad_norm(spans, -1.0, &sum, &clip);
  EXPECT_NE(std::string(negative.message()).find("max_norm must be finite and >= 0"), std::string::npos) << negative;
}

// FSDP's factor: from a sum of squares the ranks reduced, the factor queue_grad_norm would
// have written for that sum.
TEST(Elementwise, QueueClipScaleGivesQueueGradNormsFactorForTheSum) {
  const auto a = uniform(kN, 13);
  auto& ops = cpu_model_ops();
  const std::vector<FloatSpan> spans = {{a.data(), static_cast<int64_t>(a.size())}};
  const double norm = std::sqrt(*ops.total_sum_of_squares(spans));
  for (const double max_norm : {0.0, norm / 3, norm * 2}) {
    double sum = NAN;
    float want = NAN, got = NAN;
    ASSERT_TRUE(ops.queue_grad_norm(spans, max_norm, &sum, &want).ok());
    ASSERT_TRUE(ops.queue_clip_scale(&sum, max_norm, &got).ok());
    EXPECT_EQ(got, want) << max_norm;
  }
  const double inf = INFINITY;
  float clip = 0.0f;
  ASSERT_TRUE(ops.queue_clip_scale(&inf, 1.0, &clip).ok());
  EXPECT_TRUE(std::isnan(clip));
  const absl::Status no_out = ops.queue_clip_scale(&inf, 1.0, nullptr);
  EXPECT_NE(std::string(no_out.message()).find("queue_clip_scale: clip_scale is null"), std::string::npos) << no_out;
}

}  // namespace
}  // namespace fp8::ops_test
