// The per-element softmax arithmetic of the CUDA attention kernels (kernels/ops/model_arith.h),
// run on the CPU: masked scores, the online rescaling, and an online softmax built tile by
// tile the way the forward kernel builds it, against the direct computation.
#include <cmath>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/ops/model_arith.h"

namespace fp8::ops {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(AttentionArith, SoftmaxExpOfAMaskedScoreIsZero) {
  EXPECT_EQ(softmax_exp(-kInf, 3.0f), 0.0f);
  // A row that has seen only masked keys: exp(-inf - -inf) would be NaN.
  EXPECT_EQ(softmax_exp(-kInf, -kInf), 0.0f);
  EXPECT_EQ(softmax_exp(2.5f, 2.5f), 1.0f);
  EXPECT_FLOAT_EQ(softmax_exp(1.0f, 3.0f), std::exp(-2.0f));
  EXPECT_EQ(softmax_exp(-200.0f, 0.0f), 0.0f);  // underflows cleanly
}

TEST(AttentionArith, OnlineRescaleIsZeroUntilTheRowHasSeenAScore) {
  EXPECT_EQ(online_softmax_rescale(-kInf, 4.0f), 0.0f);
  EXPECT_EQ(online_softmax_rescale(-kInf, -kInf), 0.0f);
  EXPECT_EQ(online_softmax_rescale(4.0f, 4.0f), 1.0f);
  EXPECT_FLOAT_EQ(online_softmax_rescale(1.0f, 4.0f), std::exp(-3.0f));
}

TEST(AttentionArith, LogSumExp) {
  EXPECT_EQ(log_sum_exp(2.0f, 1.0f), 2.0f);
  EXPECT_FLOAT_EQ(log_sum_exp(-3.0f, 5.0f), -3.0f + std::log(5.0f));
}

// dS_j = P_j (dP_j - Σ_k P_k dP_k) is the gradient of Σ_j dP_j softmax(s)_j with respect to s_j.
TEST(AttentionArith, SoftmaxInputGradMatchesFiniteDifferences) {
  const std::vector<double> s = {0.3, -1.2, 2.0, 0.7, -0.4};
  const std::vector<double> grad_p = {0.5, -1.0, 0.25, 2.0, -0.75};
  const auto loss = [&](const std::vector<double>& x) {
    double sum = 0.0, out = 0.0;
    for (double v : x) sum += std::exp(v);
    for (size_t j = 0; j < x.size(); ++j) out += grad_p[j] * std::exp(x[j]) / sum;
    return out;
  };
  double sum = 0.0;
  for (double v : s) sum += std::exp(v);
  double delta = 0.0;
  for (size_t j = 0; j < s.size(); ++j) delta += std::exp(s[j]) / sum * grad_p[j];
  for (size_t j = 0; j < s.size(); ++j) {
    std::vector<double> up = s, down = s;
    up[j] += 1e-5;
    down[j] -= 1e-5;
    const double numeric = (loss(up) - loss(down)) / 2e-5;
    const float p = static_cast<float>(std::exp(s[j]) / sum);
    EXPECT_NEAR(softmax_input_grad(p, static_cast<float>(grad_p[j]), static_cast<float>(delta)), numeric, 1e-6)
        << "j = " << j;
  }
}

// The forward kernel's per-row recurrence over key tiles: the max grows, the sum and the
// output accumulated so far shrink by online_softmax_rescale, each tile adds its
// softmax_exp terms. The first tile is entirely masked and later maxima jump by tens, so
// the -inf start and real rescaling are both exercised.
TEST(AttentionArith, OnlineSoftmaxOverTilesMatchesTheDirectSoftmax) {
  constexpr int kTile = 4;
  const std::vector<float> scores = {-kInf, -kInf, -kInf, -kInf,  // a tile the row cannot see
                                     -3.0f, 1.5f,  -kInf, 0.25f,  //
                                     20.0f, -7.0f, 19.5f, 2.0f,   //
                                     45.0f, 44.0f, -90.0f, -kInf};
  std::vector<float> values(scores.size());
  for (size_t j = 0; j < values.size(); ++j) values[j] = 0.5f * static_cast<float>(j) - 3.0f;

  float m = -kInf, l = 0.0f, o = 0.0f;
  for (size_t t = 0; t < scores.size(); t += kTile) {
    float tile_max = -kInf;
    for (int j = 0; j < kTile; ++j) tile_max = std::fmax(tile_max, scores[t + j]);
    const float m_new = std::fmax(m, tile_max);
    const float rescale = online_softmax_rescale(m, m_new);
    float sum = 0.0f;
    o *= rescale;
    for (int j = 0; j < kTile; ++j) {
      const float p = softmax_exp(scores[t + j], m_new);
      sum += p;
      o += p * values[t + j];
    }
    l = l * rescale + sum;
    m = m_new;
    ASSERT_FALSE(std::isnan(l) || std::isnan(o)) << "after the tile at " << t;
  }

  double max = -INFINITY, sum = 0.0, weighted = 0.0;
  for (float s : scores) max = std::fmax(max, s);
  for (size_t j = 0; j < scores.size(); ++j) {
    if (scores[j] == -kInf) continue;
    sum += std::exp(scores[j] - max);
    weighted += std::exp(scores[j] - max) * values[j];
  }
  EXPECT_EQ(m, 45.0f);
  EXPECT_NEAR(log_sum_exp(m, l), max + std::log(sum), 1e-6 * std::abs(max + std::log(sum)));
  EXPECT_NEAR(o / l, weighted / sum, 1e-6 * std::abs(weighted / sum));
}

// A row with nothing visible (a padding row past the end of the sequence) stays empty and
// never turns NaN.
TEST(AttentionArith, OnlineSoftmaxOfAFullyMaskedRowStaysEmpty) {
  float m = -kInf, l = 0.0f;
  for (int tile = 0; tile < 3; ++tile) {
    const float m_new = std::fmax(m, -kInf);
    const float rescale = online_softmax_rescale(m, m_new);
    l = l * rescale + softmax_exp(-kInf, m_new);
    m = m_new;
  }
  EXPECT_EQ(m, -kInf);
  EXPECT_EQ(l, 0.0f);
}

}  // namespace
}  // namespace fp8::ops
