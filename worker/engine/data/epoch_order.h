// The order in which one epoch of training visits the training split.
//
// An epoch cuts the split into non-overlapping windows of seq_len inputs (each window
// reads one token more, its last target, which is the next window's first input) and
// visits every window once in a shuffled order. The cut starts at a phase offset drawn
// per epoch, so that a token pair split across a window boundary in one epoch is seen
// inside a window in others. Phase and order depend only on (seed, epoch) and the
// split's size: every rank, and every resumed run, computes the same epoch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace fp8::engine::data {

// Windows in an epoch with phase 0, the most any epoch can have.
int64_t max_windows_per_epoch(int64_t train_tokens, int64_t seq_len);

class EpochOrder {
 public:
  // Needs train_tokens >= seq_len + 1 (one window at least; Corpus::load checks it) and
  // max_windows_per_epoch(...) <= 2^32 - 1 (window numbers are stored as uint32 to keep a
  // large corpus's order small).
  EpochOrder(int64_t train_tokens, int64_t seq_len, uint64_t seed, int64_t epoch);

  int64_t epoch() const { return epoch_; }
  // Offset of the first window, in [0, seq_len).
  int64_t phase() const { return phase_; }
  // Windows in this epoch (the phase decides whether the last one fits).
  int64_t size() const { return static_cast<int64_t>(order_.size()); }
  // Start (token offset in the training split) of the index-th window visited.
  int64_t start(int64_t index) const {
    return phase_ + static_cast<int64_t>(order_[static_cast<size_t>(index)]) * seq_len_;
  }

 private:
  int64_t epoch_;
  int64_t seq_len_;
  int64_t phase_ = 0;
  std::vector<uint32_t> order_;  // window numbers; window w starts at phase + w * seq_len
};

}  // namespace fp8::engine::data
