// Causal grouped-query attention: against a reference that materialises the probability
// matrix, causality, and the flash-style backward against finite differences.
#include <cstdint>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include <cblas.h>
#include <gtest/gtest.h>

#include "fp8/arith.h"
#include "fp8/model_ops.h"
#include "tests/ops/gradient_check.h"
#include "tests/ops/reference_ops.h"

namespace fp8::ops_test {
namespace {

struct AttentionCase {
  const char* name;
  AttentionShape shape;
  // Entries of each of q, k, v to difference; 0 = all of them. The reference costs
  // O(seq²) per evaluation, so long sequences difference a sample.
  size_t fd_samples;
};

void PrintTo(const AttentionCase& c, std::ostream* os) { *os << c.name; }

class Attention : public ::testing::TestWithParam<AttentionCase> {
 protected:
  const AttentionShape& shape() const { return GetParam().shape; }
  size_t q_size() const {
    return static_cast<size_t>(shape().batch * shape().seq * shape().n_heads * shape().head_dim);
  }
  size_t kv_size() const {
    return static_cast<size_t>(shape().batch * shape().seq * shape().n_kv_heads * shape().head_dim);
  }
  size_t lse_size() const { return static_cast<size_t>(shape().batch * shape().n_heads * shape().seq); }
};

TEST_P(Attention, ForwardMatchesFullProbabilityMatrixReference) {
  const auto q = uniform(q_size(), 1, -2.0f, 2.0f), k = uniform(kv_size(), 2, -2.0f, 2.0f), v = uniform(kv_size(), 3);
  auto out = nans(q_size());
  auto lse = nans(lse_size());
  ASSERT_TRUE(cpu_model_ops().attention_forward(shape(), q.data(), k.data(), v.data(), out.data(), lse.data()).ok());
  const auto want = ref::attention(to_double(q), to_double(k), to_double(v), shape());
  EXPECT_LT(scaled_max_error(out, want.out), 1e-6);
  EXPECT_LT(scaled_max_error(lse, want.lse), 1e-6);
}

// out_row_amax: each token's amax of out over all its heads as stored (bf16-rounded for
// bf16), for wo's cast; asking for it changes neither out nor lse.
TEST_P(Attention, OutRowAmaxIsEachTokensLargestOutputMagnitudeAsStored) {
  const auto q = uniform(q_size(), 4, -2.0f, 2.0f), k = uniform(kv_size(), 5, -2.0f, 2.0f), v = uniform(kv_size(), 6);
  const int64_t rows = shape().batch * shape().seq, cols = shape().n_heads * shape().head_dim;
  for (const DType act : {DType::kFloat32, DType::kBFloat16}) {
    SCOPED_TRACE(dtype_name(act));
    const bool bf16 = act == DType::kBFloat16;
    auto narrow = [&](const std::vector<float>& x) {
      std::vector<float> words(x.size());  // big enough for either type
      if (!bf16) return x;
      std::vector<uint16_t> h(x.size());
      for (size_t i = 0; i < x.size(); ++i) h[i] = float_to_bf16(x[i]);
      std::memcpy(words.data(), h.data(), h.size() * sizeof(uint16_t));
      return words;
    };
    const auto qa = narrow(q), ka = narrow(k), va = narrow(v);
    std::vector<float> out(q_size()), plain(q_size()), lse(lse_size()), plain_lse(lse_size());
    std::vector<float> row_amax = nans(static_cast<size_t>(rows));
    ASSERT_TRUE(cpu_model_ops()
                    .attention_forward(shape(), qa.data(), ka.data(), va.data(), plain.data(), plain_lse.data(), act)
                    .ok());
    ASSERT_TRUE(cpu_model_ops()
                    .attention_forward(shape(), qa.data(), ka.data(), va.data(), out.data(), lse.data(), act,
                                       row_amax.data())
                    .ok());
    EXPECT_EQ(std::memcmp(out.data(), plain.data(), q_size() * dtype_size(act)), 0) << "out changed";
    EXPECT_EQ(lse, plain_lse);
    ASSERT_EQ(row_amax, stored_row_amaxes(out.data(), act, rows, cols));
  }
}

TEST_P(Attention, BackwardMatchesFiniteDifferences) {
  const auto q = uniform(q_size(), 4), k = uniform(kv_size(), 5), v = uniform(kv_size(), 6);
  const auto w = uniform(q_size(), 7);  // grad_out
  auto& ops = cpu_model_ops();
  std::vector<float> out(q_size()), lse(lse_size());
  ASSERT_TRUE(ops.attention_forward(shape(), q.data(), k.data(), v.data(), out.data(), lse.data()).ok());
  auto grad_q = nans(q_size()), grad_k = nans(kv_size()), grad_v = nans(kv_size());
  ASSERT_TRUE(ops.attention_backward(shape(), q.data(), k.data(), v.data(), out.data(), lse.data(), w.data(),
                                     grad_q.data(), grad_k.data(), grad_v.data())
                  .ok());

  const Vec qd = to_double(q), kd = to_double(k), vd = to_double(v);
  // Large shapes difference a sample of entries: half anywhere, half among the last
  // kTail positions, so that the last (partial) query block is always covered.
  const size_t samples = GetParam().fd_samples;
  auto pick = [&](int64_t heads, uint32_t seed) {
    const size_t n = static_cast<size_t>(shape().batch * shape().seq * heads * shape().head_dim);
    if (samples == 0) return std::vector<size_t>{};
    constexpr int64_t kTail = 8;
    const size_t tail_start = n - static_cast<size_t>(kTail * heads * shape().head_dim);
    auto picked = sample_indices(n, samples / 2, seed);
    for (size_t i : sample_indices(n - tail_start, samples / 2, seed + 1)) picked.push_back(tail_start + i);
    return picked;
  };
  const auto qi = pick(shape().n_heads, 8), ki = pick(shape().n_kv_heads, 9), vi = pick(shape().n_kv_heads, 10);
  const auto loss_of = [&](const Vec& a, const Vec& b, const Vec& c) {
    return weighted_sum(ref::attention(a, b, c, shape()).out, w);
  };
  expect_gradient_near(grad_q, numeric_gradient([&](const Vec& x) { return loss_of(x, kd, vd); }, qd, qi), "grad_q",
                       qi);
  expect_gradient_near(grad_k, numeric_gradient([&](const Vec& x) { return loss_of(qd, x, vd); }, kd, ki), "grad_k",
                       ki);
  expect_gradient_near(grad_v, numeric_gradient([&](const Vec& x) { return loss_of(qd, kd, x); }, vd, vi), "grad_v",
                       vi);
}

// Changing the key and value at position t changes no output before t, bit for bit:
// masked probabilities are exact zeros.
TEST_P(Attention, IsCausal) {
  const AttentionShape& s = shape();
  const auto q = uniform(q_size(), 11), k = uniform(kv_size(), 12), v = uniform(kv_size(), 13);
  std::vector<float> out(q_size()), lse(lse_size());
  ASSERT_TRUE(cpu_model_ops().attention_forward(s, q.data(), k.data(), v.data(), out.data(), lse.data()).ok());
  const int64_t t = s.seq - 2;
  auto k2 = k, v2 = v;
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t j = 0; j < s.n_kv_heads * s.head_dim; ++j) {
      const int64_t at = (b * s.seq + t) * s.n_kv_heads * s.head_dim + j;
      k2[at] += 3.0f;
      v2[at] -= 5.0f;
    }
  }
  std::vector<float> out2(q_size()), lse2(lse_size());
  ASSERT_TRUE(cpu_model_ops().attention_forward(s, q.data(), k2.data(), v2.data(), out2.data(), lse2.data()).ok());
  const int64_t row = s.n_heads * s.head_dim;
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t pos = 0; pos < s.seq; ++pos) {
      const float* before = out.data() + (b * s.seq + pos) * row;
      const float* after = out2.data() + (b * s.seq + pos) * row;
      bool changed = false;
      for (int64_t j = 0; j < row; ++j) changed |= before[j] != after[j];
      EXPECT_EQ(changed, pos >= t) << "batch " << b << " position " << pos;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, Attention,
                         ::testing::Values(AttentionCase{"gqa_4_heads_2_kv", {2, 5, 4, 2, 4}, 0},
                                           AttentionCase{"multi_head", {1, 6, 2, 2, 6}, 0},
                                           AttentionCase{"multi_query", {2, 4, 3, 1, 8}, 0},
                                           // Longer than one query block (64 rows), the last block partial.
                                           AttentionCase{"two_query_blocks_gqa", {1, 70, 2, 1, 8}, 16}),
                         [](const auto& info) { return std::string(info.param.name); });

// GQA is MHA with each kv head repeated for its group: compare with that expansion.
TEST(AttentionGqa, EqualsMultiHeadWithRepeatedKvHeads) {
  const AttentionShape gqa{2, 9, 4, 2, 4};
  const AttentionShape mha{2, 9, 4, 4, 4};
  const int64_t D = gqa.head_dim;
  const auto q = uniform(static_cast<size_t>(2 * 9 * 4 * D), 14);
  const auto k = uniform(static_cast<size_t>(2 * 9 * 2 * D), 15), v = uniform(k.size(), 16);
  std::vector<float> k_rep, v_rep;
  for (int64_t bs = 0; bs < 2 * 9; ++bs) {
    for (int64_t h = 0; h < 4; ++h) {
      const auto* kh = k.data() + (bs * 2 + h / 2) * D;
      const auto* vh = v.data() + (bs * 2 + h / 2) * D;
      k_rep.insert(k_rep.end(), kh, kh + D);
      v_rep.insert(v_rep.end(), vh, vh + D);
    }
  }
  std::vector<float> out_gqa(q.size()), out_mha(q.size()), lse(static_cast<size_t>(2 * 4 * 9));
  ASSERT_TRUE(cpu_model_ops().attention_forward(gqa, q.data(), k.data(), v.data(), out_gqa.data(), lse.data()).ok());
  ASSERT_TRUE(
      cpu_model_ops().attention_forward(mha, q.data(), k_rep.data(), v_rep.data(), out_mha.data(), lse.data()).ok());
  for (size_t i = 0; i < q.size(); ++i) EXPECT_NEAR(out_gqa[i], out_mha[i], 1e-6f) << i;
}

// The kernels hold OpenBLAS to one thread while the pool runs their units
// (kernels/ops/blas_threads.h); the setting is process-wide and must be put back.
TEST(AttentionBlasThreads, OpenBlasThreadCountIsRestored) {
  const int before = openblas_get_num_threads();
  const AttentionShape s{4, 16, 2, 1, 8};
  const auto q = uniform(4 * 16 * 2 * 8, 17), k = uniform(4 * 16 * 8, 18);
  std::vector<float> out(q.size()), lse(4 * 2 * 16), grad_q(q.size()), grad_k(k.size()), grad_v(k.size());
  ASSERT_TRUE(cpu_model_ops().attention_forward(s, q.data(), k.data(), k.data(), out.data(), lse.data()).ok());
  ASSERT_TRUE(cpu_model_ops()
                  .attention_backward(s, q.data(), k.data(), k.data(), out.data(), lse.data(), q.data(), grad_q.data(),
                                      grad_k.data(), grad_v.data())
                  .ok());
  EXPECT_EQ(openblas_get_num_threads(), before);
}

}  // namespace
}  // namespace fp8::ops_test
