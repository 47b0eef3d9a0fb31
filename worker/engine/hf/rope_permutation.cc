#include "worker/engine/hf/rope_permutation.h"

#include <algorithm>

namespace fp8::hf {

namespace {

// Copies row `from` of each head to row `to(from)` of the same head.
template <typename To>
std::vector<float> permute_rows(std::span<const float> w, int64_t heads, int64_t head_dim, int64_t cols, To to) {
  std::vector<float> out(w.size());
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t r = 0; r < head_dim; ++r) {
      const float* src = w.data() + (h * head_dim + r) * cols;
      std::copy(src, src + cols, out.data() + (h * head_dim + to(r)) * cols);
    }
  }
  return out;
}

}  // namespace

std::vector<float> interleaved_to_half_rows(std::span<const float> w, int64_t heads, int64_t head_dim, int64_t cols) {
  const int64_t half = head_dim / 2;
  return permute_rows(w, heads, head_dim, cols, [half](int64_t r) { return r % 2 == 0 ? r / 2 : half + r / 2; });
}

std::vector<float> half_to_interleaved_rows(std::span<const float> w, int64_t heads, int64_t head_dim, int64_t cols) {
  const int64_t half = head_dim / 2;
  return permute_rows(w, heads, head_dim, cols, [half](int64_t r) { return r < half ? 2 * r : 2 * (r - half) + 1; });
}

}  // namespace fp8::hf
