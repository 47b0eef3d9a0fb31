#include "worker/engine/data/epoch_order.h"

#include <algorithm>
#include <numeric>
#include <random>

#include "worker/engine/data/portable_random.h"

namespace fp8::engine::data {

int64_t max_windows_per_epoch(int64_t train_tokens, int64_t seq_len) {
  // Window w needs tokens [w * seq_len, (w + 1) * seq_len + 1).
  return (train_tokens - 1) / seq_len;
}

EpochOrder::EpochOrder(int64_t train_tokens, int64_t seq_len, uint64_t seed, int64_t epoch)
    : epoch_(epoch), seq_len_(seq_len) {
  std::mt19937_64 rng(mix_seed(seed, static_cast<uint64_t>(epoch)));
  // A phase beyond train_tokens - (seq_len + 1) would leave no room for one window, which
  // only matters for a split barely longer than one window.
  const int64_t max_phase = std::min(seq_len - 1, train_tokens - seq_len - 1);
  phase_ = static_cast<int64_t>(uniform_below(rng, static_cast<uint64_t>(max_phase) + 1));

  const int64_t windows = max_windows_per_epoch(train_tokens - phase_, seq_len);
  order_.resize(static_cast<size_t>(windows));
  std::iota(order_.begin(), order_.end(), uint32_t{0});
  shuffle_in_place(order_, rng);
}

}  // namespace fp8::engine::data
