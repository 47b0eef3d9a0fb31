// How far one set of logits is from another, for the generation tests: the largest
// absolute difference over the largest magnitude of `want`.
#pragma once

#include <algorithm>
#include <cmath>
#include <span>

namespace fp8::hf {

inline double relative_max_error(std::span<const float> got, std::span<const float> want) {
  double err = 0, norm = 0;
  for (size_t v = 0; v < want.size(); ++v) {
    err = std::max(err, std::abs(static_cast<double>(got[v]) - want[v]));
    norm = std::max(norm, std::abs(static_cast<double>(want[v])));
  }
  return norm > 0 ? err / norm : err;
}

}  // namespace fp8::hf
