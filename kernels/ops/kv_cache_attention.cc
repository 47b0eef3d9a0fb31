#include "ops/kv_cache_attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "cpu/parallel.h"

namespace fp8::ops::cpu {

void kv_cache_attention_forward(const KvCacheAttentionShape& s, const float* q, const float* k_cache,
                                const float* v_cache, float* out) {
  const int64_t group = s.n_heads / s.n_kv_heads;
  const int64_t ld_q = s.n_heads * s.head_dim;
  const int64_t ld_kv = s.n_kv_heads * s.head_dim;
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.head_dim));
  const int64_t units = s.batch * s.seq * s.n_heads;
  fp8::cpu::parallel_for(units, 1, [&](int64_t, int64_t begin, int64_t end) {
    std::vector<double> scores(static_cast<size_t>(s.past + s.seq));
    std::vector<double> sum(static_cast<size_t>(s.head_dim));
    for (int64_t u = begin; u < end; ++u) {
      const int64_t h = u % s.n_heads;
      const int64_t i = (u / s.n_heads) % s.seq;
      const int64_t b = u / s.n_heads / s.seq;
      const int64_t visible = s.past + i + 1;
      const float* q_row = q + (b * s.seq + i) * ld_q + h * s.head_dim;
      const float* k_head = k_cache + b * s.cache_len * ld_kv + (h / group) * s.head_dim;
      const float* v_head = v_cache + b * s.cache_len * ld_kv + (h / group) * s.head_dim;
      double max = -INFINITY;
      for (int64_t j = 0; j < visible; ++j) {
        const float* k_row = k_head + j * ld_kv;
        double dot = 0.0;
        for (int64_t d = 0; d < s.head_dim; ++d) dot += static_cast<double>(q_row[d]) * k_row[d];
        scores[j] = dot * scale;
        max = std::max(max, scores[j]);
      }
      // The max is subtracted first so that exp never overflows; the row's own key is
      // visible, so the total is at least 1.
      double total = 0.0;
      std::fill(sum.begin(), sum.end(), 0.0);
      for (int64_t j = 0; j < visible; ++j) {
        const double p = std::exp(scores[j] - max);
        total += p;
        const float* v_row = v_head + j * ld_kv;
        for (int64_t d = 0; d < s.head_dim; ++d) sum[d] += p * v_row[d];
      }
      float* out_row = out + (b * s.seq + i) * ld_q + h * s.head_dim;
      for (int64_t d = 0; d < s.head_dim; ++d) out_row[d] = static_cast<float>(sum[d] / total);
    }
  });
}

}  // namespace fp8::ops::cpu
