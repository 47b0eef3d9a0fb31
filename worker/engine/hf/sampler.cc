#include "worker/engine/hf/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace fp8::hf {

int32_t Sampler::next(std::span<const float> logits) {
  const auto vocab = static_cast<int32_t>(logits.size());
  if (options_.temperature <= 0) {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  order_.resize(static_cast<size_t>(vocab));
  std::iota(order_.begin(), order_.end(), 0);
  const int32_t keep = options_.top_k > 0 ? std::min(options_.top_k, vocab) : vocab;
  // Most likely first; equal logits by id, so the candidates do not depend on the sort.
  std::partial_sort(order_.begin(), order_.begin() + keep, order_.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  const double max = logits[order_[0]];
  std::vector<double> weights(static_cast<size_t>(keep));
  double total = 0;
  for (int32_t i = 0; i < keep; ++i) {
    total += weights[i] = std::exp((logits[order_[i]] - max) / options_.temperature);
  }
  // 53 random bits as a double in [0, 1): the same on every standard library.
  const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53 * total;
  double acc = 0;
  for (int32_t i = 0; i < keep; ++i) {
    acc += weights[i];
    if (u < acc) return order_[i];
  }
  return order_[keep - 1];
}

}  // namespace fp8::hf
