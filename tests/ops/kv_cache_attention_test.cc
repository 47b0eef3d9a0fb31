// Attention over a KV cache (generation): queries at the tail of a sequence, against the
// cached keys and values of every position so far, give the rows a causal attention over
// the whole sequence gives them, whichever split into steps, with the cache's unused rows
// (NaN here) never read; and bf16 activations are the fp32 call on widened inputs, rounded.
#include <cstdint>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "fp8/arith.h"
#include "fp8/model_ops.h"
#include "tests/ops/bf16_test_util.h"
#include "tests/ops/gradient_check.h"
#include "tests/ops/reference_ops.h"

namespace fp8::ops_test {
namespace {

struct CacheCase {
  const char* name;
  AttentionShape whole;  // the sequence the steps make up
};

void PrintTo(const CacheCase& c, std::ostream* os) { *os << c.name; }

// The whole sequence's keys or values [batch, seq, kv, head_dim] in a cache of `cache_len`
// rows per batch, its rows past the sequence NaN.
std::vector<float> in_cache(const std::vector<float>& x, const AttentionShape& s, int64_t cache_len) {
  const int64_t row = s.n_kv_heads * s.head_dim;
  std::vector<float> cache = nans(static_cast<size_t>(s.batch * cache_len * row));
  for (int64_t b = 0; b < s.batch; ++b) {
    std::memcpy(cache.data() + b * cache_len * row, x.data() + b * s.seq * row, s.seq * row * sizeof(float));
  }
  return cache;
}

// Rows [first, first + n) of each batch of x [batch, seq, row].
template <typename T>
std::vector<T> rows_of(const std::vector<T>& x, int64_t batch, int64_t seq, int64_t row, int64_t first, int64_t n) {
  std::vector<T> out;
  for (int64_t b = 0; b < batch; ++b) {
    const auto begin = x.begin() + (b * seq + first) * row;
    out.insert(out.end(), begin, begin + n * row);
  }
  return out;
}

class KvCacheAttention : public ::testing::TestWithParam<CacheCase> {};

TEST_P(KvCacheAttention, EachStepGivesTheWholeSequencesRows) {
  const AttentionShape& s = GetParam().whole;
  const int64_t q_row = s.n_heads * s.head_dim;
  const auto q = uniform(static_cast<size_t>(s.batch * s.seq * q_row), 1, -2.0f, 2.0f);
  const auto k = uniform(static_cast<size_t>(s.batch * s.seq * s.n_kv_heads * s.head_dim), 2, -2.0f, 2.0f);
  const auto v = uniform(k.size(), 3);
  const auto want = ref::attention(to_double(q), to_double(k), to_double(v), s).out;
  const int64_t cache_len = s.seq + 5;
  const auto k_cache = in_cache(k, s, cache_len), v_cache = in_cache(v, s, cache_len);
  // The whole prompt at once; one token a step; a chunk after a prefix.
  std::vector<std::pair<int64_t, int64_t>> steps = {{0, s.seq}, {s.seq / 2, s.seq - s.seq / 2}};
  for (int64_t p = 0; p < s.seq; ++p) steps.push_back({p, 1});
  for (const auto& [past, seq] : steps) {
    SCOPED_TRACE(testing::Message() << "past " << past << ", seq " << seq);
    const KvCacheAttentionShape step{s.batch, seq, past, cache_len, s.n_heads, s.n_kv_heads, s.head_dim};
    const auto step_q = rows_of(q, s.batch, s.seq, q_row, past, seq);
    auto out = nans(step_q.size());
    ASSERT_TRUE(
        cpu_model_ops().kv_cache_attention_forward(step, step_q.data(), k_cache.data(), v_cache.data(), out.data()).ok());
    EXPECT_LT(scaled_max_error(out, rows_of(want, s.batch, s.seq, q_row, past, seq)), 1e-6);
  }
}

TEST_P(KvCacheAttention, Bf16IsTheFp32CallOnWidenedInputsRounded) {
  const AttentionShape& s = GetParam().whole;
  const int64_t q_row = s.n_heads * s.head_dim;
  const Bf16 q = to_bf16(uniform(static_cast<size_t>(s.batch * s.seq * q_row), 4, -2.0f, 2.0f));
  const Bf16 k = to_bf16(uniform(static_cast<size_t>(s.batch * s.seq * s.n_kv_heads * s.head_dim), 5, -2.0f, 2.0f));
  const Bf16 v = to_bf16(uniform(k.size(), 6));
  const KvCacheAttentionShape step{s.batch, 2, s.seq - 2, s.seq, s.n_heads, s.n_kv_heads, s.head_dim};
  const Bf16 step_q = rows_of(q, s.batch, s.seq, q_row, s.seq - 2, 2);
  std::vector<float> want(step_q.size());
  ASSERT_TRUE(cpu_model_ops()
                  .kv_cache_attention_forward(step, widen(step_q).data(), widen(k).data(), widen(v).data(), want.data())
                  .ok());
  Bf16 got = bf16_nans(step_q.size());
  ASSERT_TRUE(cpu_model_ops()
                  .kv_cache_attention_forward(step, step_q.data(), k.data(), v.data(), got.data(), DType::kBFloat16)
                  .ok());
  expect_same_bits(got, to_bf16(want), "kv cache attention");
}

INSTANTIATE_TEST_SUITE_P(Shapes, KvCacheAttention,
                         ::testing::Values(CacheCase{"gqa_4_heads_2_kv", {2, 9, 4, 2, 8}},
                                           CacheCase{"multi_head", {1, 6, 2, 2, 6}},
                                           CacheCase{"multi_query", {2, 7, 3, 1, 16}},
                                           CacheCase{"long", {1, 300, 2, 1, 8}}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace fp8::ops_test
