// The KV-cache attention kernel (kernels/cuda/ops/kv_cache_attention_device.cuh) on the CPU
// under the emulation of CUDA threads, barriers and warp shuffles (emulation/), against the
// CPU's kv_cache_attention_forward: one query after a context longer than a key tile (the
// online softmax's rescaling), a chunk of queries after a prefix, the whole sequence, GQA
// groups, head_dim 40 (lanes left idle) and 256 (two columns a thread), two batches, fp32
// and bf16, with the cache's unused rows NaN (never read). The kernel accumulates in fp32
// where the CPU does in double: within 2e-6 of the output's scale in fp32, and within one
// bf16 rounding in bf16. The same kernel on a GPU: fp8_cuda_model_ops_test.
#include "tests/ops/emulation/cuda_emulation.h"
// The kernel, after the emulation.
#include "cuda/ops/kv_cache_attention_device.cuh"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <type_traits>
#include <vector>

#include "fp8/model_ops.h"
#include "gtest/gtest.h"
#include "tests/ops/emulated_kernel_checks.h"

namespace fp8::cuda::kv_cache {
namespace {

using namespace emulation_test;

std::vector<float> values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
  std::vector<float> v(n);
  for (float& x : v) x = uniform(rng);
  return v;
}

template <typename T>
void check(const KvCacheAttentionShape& s) {
  SCOPED_TRACE(::testing::Message() << (std::is_same_v<T, float> ? "fp32" : "bf16") << " batch " << s.batch
                                    << " seq " << s.seq << " past " << s.past << " cache " << s.cache_len << " heads "
                                    << s.n_heads << "/" << s.n_kv_heads << " head_dim " << s.head_dim);
  const int64_t kv_row = s.n_kv_heads * s.head_dim;
  const size_t qn = static_cast<size_t>(s.batch * s.seq * s.n_heads * s.head_dim);
  // The cache's rows past past + seq hold NaN: a kernel that read them would show it.
  std::vector<float> k(static_cast<size_t>(s.batch * s.cache_len * kv_row), NAN), v = k;
  const auto k_used = values(k.size(), 1), v_used = values(k.size(), 2);
  for (int64_t b = 0; b < s.batch; ++b) {
    const int64_t first = b * s.cache_len * kv_row, n = (s.past + s.seq) * kv_row;
    std::copy_n(k_used.begin() + first, n, k.begin() + first);
    std::copy_n(v_used.begin() + first, n, v.begin() + first);
  }
  const std::vector<T> q_t = stored<T>(values(qn, 3)), k_t = stored<T>(k), v_t = stored<T>(v);
  const DType act = std::is_same_v<T, float> ? DType::kFloat32 : DType::kBFloat16;
  std::vector<T> want(qn);
  ASSERT_TRUE(cpu_model_ops().kv_cache_attention_forward(s, q_t.data(), k_t.data(), v_t.data(), want.data(), act).ok());

  const KvCacheAttentionLaunch d{s.batch, s.seq, s.past, s.cache_len, s.n_heads, s.n_kv_heads, s.head_dim};
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.head_dim)));
  std::vector<T> got(qn, as_stored<T>(NAN));
  emulation::launch(static_cast<unsigned>(s.batch * s.seq * s.n_heads), kCacheThreads, 0, kv_cache_attention_kernel<T>,
                    d, scale, static_cast<const T*>(q_t.data()), static_cast<const T*>(k_t.data()),
                    static_cast<const T*>(v_t.data()), got.data());

  double scale_of_out = 0;
  for (T x : want) scale_of_out = std::max(scale_of_out, std::abs(static_cast<double>(widened(x))));
  for (size_t i = 0; i < qn; ++i) {
    const double g = widened(got[i]), w = widened(want[i]);
    // bf16: the two fp32 results may round to neighbouring bf16 values.
    const double allowed = std::is_same_v<T, float> ? 2e-6 * scale_of_out : std::abs(w) * 0x1p-8 + 1e-6;
    ASSERT_LE(std::abs(g - w), allowed) << "element " << i << ": " << g << " against " << w;
  }
}

const KvCacheAttentionShape kShapes[] = {
    {1, 1, 300, 310, 4, 2, 64},  // one query after three key tiles
    {2, 3, 5, 9, 4, 1, 16},      // a chunk after a prefix, two batches, one kv head
    {1, 12, 0, 12, 2, 2, 40},    // the whole sequence; lanes past head_dim idle
    {1, 2, 129, 131, 2, 1, 256}, // two columns a thread, a tile and one key
};

TEST(KvCacheAttentionEmulation, Fp32MatchesTheCpu) {
  for (const KvCacheAttentionShape& s : kShapes) check<float>(s);
}

TEST(KvCacheAttentionEmulation, Bf16MatchesTheCpu) {
  for (const KvCacheAttentionShape& s : kShapes) check<bf16_bits>(s);
}

}  // namespace
}  // namespace fp8::cuda::kv_cache
