#include "ops/embedding.h"

#include <cstring>

#include "cpu/parallel.h"
#include "ops/cpu_loops.h"

namespace fp8::ops::cpu {

void embedding_forward(const int32_t* tokens, int64_t n, const float* table, int64_t dim, float* out) {
  fp8::cpu::parallel_for(n, row_grain(dim), [&](int64_t, int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      std::memcpy(out + i * dim, table + static_cast<int64_t>(tokens[i]) * dim,
                  static_cast<size_t>(dim) * sizeof(float));
    }
  });
}

void embedding_backward(const int32_t* tokens, int64_t n, const float* grad_out, int64_t vocab, int64_t dim,
                        float* grad_table) {
  // Every chunk scans all n token ids (cheap next to the row additions) and keeps those in
  // its vocabulary slice [first, last).
  const int64_t grain = row_grain(n * dim / vocab + 1);
  fp8::cpu::parallel_for(vocab, grain, [&](int64_t, int64_t first, int64_t last) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t token = tokens[i];
      if (token < first || token >= last) continue;
      float* dst = grad_table + token * dim;
      const float* src = grad_out + i * dim;
      for (int64_t j = 0; j < dim; ++j) dst[j] += src[j];
    }
  });
}

}  // namespace fp8::ops::cpu
