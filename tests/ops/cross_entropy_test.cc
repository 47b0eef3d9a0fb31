// Mean cross-entropy with ignored rows, and its backward.
#include <algorithm>
#include <cmath>

#include <gtest/gtest.h>

#include "fp8/model_ops.h"
#include "tests/ops/gradient_check.h"
#include "tests/ops/reference_ops.h"

namespace fp8::ops_test {
namespace {

TEST(CrossEntropy, ForwardEqualsNaiveComputationAndSkipsIgnoredRows) {
  const int64_t rows = 7, vocab = 13;
  const std::vector<int32_t> targets = {3, kIgnoreTarget, 0, 12, kIgnoreTarget, 5, 5};
  auto logits = uniform(static_cast<size_t>(rows * vocab), 1, -4.0f, 4.0f);
  float loss = NAN;
  auto lse = nans(static_cast<size_t>(rows));
  auto& ops = cpu_model_ops();
  ASSERT_TRUE(ops.cross_entropy_forward(logits.data(), targets.data(), rows, vocab, &loss, lse.data()).ok());
  EXPECT_NEAR(loss, ref::cross_entropy(to_double(logits), targets, rows, vocab), 1e-6);
  // The mean is over the 5 counted rows: rows 1 and 4 change nothing, whatever they hold.
  for (int64_t j = 0; j < vocab; ++j) logits[1 * vocab + j] = 50.0f * static_cast<float>(j);
  float loss2 = NAN;
  ASSERT_TRUE(ops.cross_entropy_forward(logits.data(), targets.data(), rows, vocab, &loss2, lse.data()).ok());
  EXPECT_EQ(loss2, loss);
  // Every row's log-sum-exp is saved, ignored rows included.
  EXPECT_NEAR(lse[1], 600.0f, 1e-3f);  // max 50 * 12; the other terms are below e^-50
}

// Logits of 1e4 would overflow exp without the max subtracted.
TEST(CrossEntropy, LargeLogitsStayFinite) {
  const int64_t rows = 3, vocab = 5;
  auto logits = uniform(static_cast<size_t>(rows * vocab), 2);
  for (auto& x : logits) x += 1e4f;
  const std::vector<int32_t> targets = {0, 4, 2};
  float loss = NAN;
  std::vector<float> lse(3), grad(logits.size());
  ASSERT_TRUE(
      cpu_model_ops().cross_entropy_forward(logits.data(), targets.data(), rows, vocab, &loss, lse.data()).ok());
  ASSERT_TRUE(cpu_model_ops()
                  .cross_entropy_backward(logits.data(), targets.data(), lse.data(), rows, vocab, 1.0f, grad.data())
                  .ok());
  EXPECT_NEAR(loss, ref::cross_entropy(to_double(logits), targets, rows, vocab), 1e-5);
  for (float g : grad) EXPECT_TRUE(std::isfinite(g));
}

TEST(CrossEntropy, BackwardMatchesFiniteDifferences) {
  const int64_t rows = 6, vocab = 9;
  const std::vector<int32_t> targets = {8, 0, kIgnoreTarget, 4, 4, 1};
  const auto logits = uniform(static_cast<size_t>(rows * vocab), 3, -3.0f, 3.0f);
  const float grad_loss = 0.7f;  // e.g. 1 / micro-batches, or a loss scale
  float loss = 0.0f;
  std::vector<float> lse(static_cast<size_t>(rows));
  auto& ops = cpu_model_ops();
  ASSERT_TRUE(ops.cross_entropy_forward(logits.data(), targets.data(), rows, vocab, &loss, lse.data()).ok());
  auto grad = nans(logits.size());
  ASSERT_TRUE(
      ops.cross_entropy_backward(logits.data(), targets.data(), lse.data(), rows, vocab, grad_loss, grad.data()).ok());
  const Vec numeric = numeric_gradient(
      [&](const Vec& l) { return grad_loss * ref::cross_entropy(l, targets, rows, vocab); }, to_double(logits));
  expect_gradient_near(grad, numeric, "grad_logits");
  for (int64_t j = 0; j < vocab; ++j) EXPECT_EQ(grad[2 * vocab + j], 0.0f) << "ignored row";
}

// Many rows split across threads: the per-thread partial losses must add up.
TEST(CrossEntropy, ManyRowsMatchReference) {
  const int64_t rows = 3000, vocab = 50;
  std::vector<int32_t> targets(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) targets[r] = r % 7 == 0 ? kIgnoreTarget : static_cast<int32_t>(r * 31 % vocab);
  const auto logits = uniform(static_cast<size_t>(rows * vocab), 4, -5.0f, 5.0f);
  float loss = 0.0f;
  std::vector<float> lse(static_cast<size_t>(rows));
  ASSERT_TRUE(
      cpu_model_ops().cross_entropy_forward(logits.data(), targets.data(), rows, vocab, &loss, lse.data()).ok());
  const double want = ref::cross_entropy(to_double(logits), targets, rows, vocab);
  EXPECT_NEAR(loss, want, 1e-6 * want);
}

TEST(CrossEntropy, AllRowsIgnoredGivesZeroLossAndGradient) {
  const int64_t rows = 2, vocab = 4;
  const std::vector<int32_t> targets = {kIgnoreTarget, kIgnoreTarget};
  const auto logits = uniform(8, 5);
  float loss = NAN;
  std::vector<float> lse(2);
  auto grad = nans(8);
  ASSERT_TRUE(
      cpu_model_ops().cross_entropy_forward(logits.data(), targets.data(), rows, vocab, &loss, lse.data()).ok());
  ASSERT_TRUE(cpu_model_ops()
                  .cross_entropy_backward(logits.data(), targets.data(), lse.data(), rows, vocab, 1.0f, grad.data())
                  .ok());
  EXPECT_EQ(loss, 0.0f);
  for (float g : grad) EXPECT_EQ(g, 0.0f);
}

// A vocabulary padded to a wider row (the model's embedding padding): the padding columns,
// whatever they hold, are outside the softmax, and their gradient is zero. The real
// columns give the bits of the unpadded rows.
TEST(CrossEntropy, PaddingColumnsNeverWinAndGetNoGradient) {
  const int64_t rows = 5, vocab = 13, padded = 16;
  const std::vector<int32_t> targets = {3, kIgnoreTarget, 0, 12, 5};
  const auto logits = uniform(static_cast<size_t>(rows * vocab), 6, -4.0f, 4.0f);
  std::vector<float> wide(static_cast<size_t>(rows * padded), 1e4f);  // would win every softmax
  for (int64_t r = 0; r < rows; ++r) std::copy_n(logits.begin() + r * vocab, vocab, wide.begin() + r * padded);
  auto& ops = cpu_model_ops();
  float loss = NAN, wide_loss = NAN;
  std::vector<float> lse(rows), wide_lse(rows);
  ASSERT_TRUE(ops.cross_entropy_forward(logits.data(), targets.data(), rows, vocab, &loss, lse.data()).ok());
  ASSERT_TRUE(ops.cross_entropy_forward(wide.data(), targets.data(), rows, vocab, &wide_loss, wide_lse.data(),
                                        DType::kFloat32, padded)
                  .ok());
  EXPECT_EQ(wide_loss, loss);
  EXPECT_EQ(wide_lse, lse);
  auto grad = nans(logits.size()), wide_grad = nans(wide.size());
  ASSERT_TRUE(ops.cross_entropy_backward(logits.data(), targets.data(), lse.data(), rows, vocab, 0.5f, grad.data()).ok());
  ASSERT_TRUE(ops.cross_entropy_backward(wide.data(), targets.data(), lse.data(), rows, vocab, 0.5f, wide_grad.data(),
                                         DType::kFloat32, padded)
                  .ok());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < padded; ++j) {
      const float want = j < vocab ? grad[r * vocab + j] : 0.0f;
      ASSERT_EQ(wide_grad[r * padded + j], want) << "row " << r << " column " << j;
    }
  }
  // A row narrower than the vocabulary is refused.
  const absl::Status narrow =
      ops.cross_entropy_forward(wide.data(), targets.data(), rows, vocab, &loss, lse.data(), DType::kFloat32, 8);
  EXPECT_EQ(narrow.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(narrow.message().find("padded_vocab 8 is smaller than vocab 13"), std::string::npos) << narrow;
}

}  // namespace
}  // namespace fp8::ops_test
