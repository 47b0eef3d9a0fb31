#include "ops/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cpu/parallel.h"
#include "fp8/model_ops.h"
#include "ops/cpu_loops.h"

namespace fp8::ops::cpu {
namespace {

// log Σ exp(x_j), with the max subtracted first so that no exp overflows.
double log_sum_exp(const float* x, int64_t n) {
  float max = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < n; ++j) max = std::max(max, x[j]);
  double sum = 0.0;
  for (int64_t j = 0; j < n; ++j) sum += std::exp(static_cast<double>(x[j] - max));
  return static_cast<double>(max) + std::log(sum);
}

int64_t counted_rows(const int32_t* targets, int64_t rows) {
  return std::count_if(targets, targets + rows, [](int32_t t) { return t != kIgnoreTarget; });
}

}  // namespace

void cross_entropy_forward(const float* logits, const int32_t* targets, int64_t rows, int64_t vocab, int64_t ld,
                           float* loss, float* lse) {
  const int64_t grain = row_grain(vocab);
  std::vector<double> partial_loss(static_cast<size_t>(fp8::cpu::plan_chunks(rows, grain)), 0.0);
  fp8::cpu::parallel_for(rows, grain, [&](int64_t chunk, int64_t begin, int64_t end) {
    double sum = 0.0;
    for (int64_t r = begin; r < end; ++r) {
      const float* row = logits + r * ld;
      const double row_lse = log_sum_exp(row, vocab);
      lse[r] = static_cast<float>(row_lse);
      if (targets[r] != kIgnoreTarget) sum += row_lse - static_cast<double>(row[targets[r]]);
    }
    partial_loss[static_cast<size_t>(chunk)] = sum;
  });
  double total = 0.0;
  for (double p : partial_loss) total += p;
  const int64_t counted = counted_rows(targets, rows);
  *loss = counted == 0 ? 0.0f : static_cast<float>(total / static_cast<double>(counted));
}

void cross_entropy_backward(const float* logits, const int32_t* targets, const float* lse, int64_t rows, int64_t vocab,
                            int64_t ld, float grad_loss, float* grad_logits) {
  const int64_t counted = counted_rows(targets, rows);
  const float scale =
      counted == 0 ? 0.0f : static_cast<float>(static_cast<double>(grad_loss) / static_cast<double>(counted));
  fp8::cpu::parallel_for(rows, row_grain(vocab), [&](int64_t, int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      float* grad = grad_logits + r * ld;
      std::fill(grad + vocab, grad + ld, 0.0f);
      if (targets[r] == kIgnoreTarget) {
        std::fill_n(grad, vocab, 0.0f);
        continue;
      }
      const float* row = logits + r * ld;
      const float row_lse = lse[r];
      for (int64_t j = 0; j < vocab; ++j) grad[j] = scale * std::exp(row[j] - row_lse);
      grad[targets[r]] -= scale;
    }
  });
}

}  // namespace fp8::ops::cpu
