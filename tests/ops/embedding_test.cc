// Embedding lookup and its backward (a scatter-add into the table's gradient).
#include <gtest/gtest.h>

#include "fp8/model_ops.h"
#include "tests/ops/gradient_check.h"
#include "tests/ops/reference_ops.h"

namespace fp8::ops_test {
namespace {

TEST(Embedding, ForwardCopiesTheTokensRows) {
  const int64_t vocab = 11, dim = 6;
  const std::vector<int32_t> tokens = {3, 0, 10, 3, 7};
  const auto table = uniform(static_cast<size_t>(vocab * dim), 1);
  auto out = nans(tokens.size() * dim);
  ASSERT_TRUE(cpu_model_ops().embedding_forward(tokens.data(), 5, table.data(), vocab, dim, out.data()).ok());
  const Vec want = ref::embedding(tokens, to_double(table), dim);
  for (size_t i = 0; i < out.size(); ++i) EXPECT_EQ(out[i], want[i]) << i;
}

// The gradient of Σ w ∘ embedding(table) with respect to the table, repeated tokens
// included; and it is added to what grad_table already held.
TEST(Embedding, BackwardMatchesFiniteDifferencesAndAccumulates) {
  const int64_t vocab = 9, dim = 4;
  const std::vector<int32_t> tokens = {2, 5, 2, 8, 0, 2};
  const int64_t n = static_cast<int64_t>(tokens.size());
  const auto table = uniform(static_cast<size_t>(vocab * dim), 2);
  const auto w = uniform(static_cast<size_t>(n * dim), 3);
  const float prior = 0.25f;  // a previous micro-batch's gradient
  std::vector<float> grad_table(static_cast<size_t>(vocab * dim), prior);
  ASSERT_TRUE(cpu_model_ops().embedding_backward(tokens.data(), n, w.data(), vocab, dim, grad_table.data()).ok());
  for (auto& g : grad_table) g -= prior;
  const Vec numeric =
      numeric_gradient([&](const Vec& t) { return weighted_sum(ref::embedding(tokens, t, dim), w); }, to_double(table));
  expect_gradient_near(grad_table, numeric, "grad_table");
}

// Enough rows that the vocabulary is split between threads; the sums must not race.
TEST(Embedding, BackwardOverManyTokensMatchesSerialSums) {
  const int64_t vocab = 4096, dim = 64, n = 2000;
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) tokens[i] = static_cast<int32_t>((i * 7919) % 97 * 41 % vocab);
  const auto grad_out = uniform(static_cast<size_t>(n * dim), 4);
  std::vector<float> grad_table(static_cast<size_t>(vocab * dim), 0.0f);
  ASSERT_TRUE(
      cpu_model_ops().embedding_backward(tokens.data(), n, grad_out.data(), vocab, dim, grad_table.data()).ok());
  Vec want(grad_table.size(), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < dim; ++j) want[tokens[i] * dim + j] += grad_out[i * dim + j];
  }
  EXPECT_LT(scaled_max_error(grad_table, want), 1e-5);
}

}  // namespace
}  // namespace fp8::ops_test
