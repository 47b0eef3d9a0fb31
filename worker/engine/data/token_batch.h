// The unit the data pipeline hands to the model: a few windows of the corpus as int32
// token ids, with next-token targets.
#pragma once

#include <cstdint>
#include <vector>

#include "worker/engine/data/token_stream.h"

namespace fp8::engine::data {

struct TokenBatch {
  int64_t rows = 0;     // sequences
  int64_t seq_len = 0;  // tokens per sequence
  // [rows, seq_len], row-major. Row i holds tokens [s, s + seq_len) of its split, where
  // s = window_starts[i], and targets row i holds tokens [s + 1, s + seq_len + 1): each
  // target is the input one position later.
  std::vector<int32_t> inputs;
  std::vector<int32_t> targets;
  // Offset of each row's window within its split (training or validation), for
  // logging, debugging and the tests that check coverage.
  std::vector<int64_t> window_starts;

  // Sizes the batch for `rows` x `seq_len`, reusing the buffers' memory.
  void resize(int64_t rows, int64_t seq_len);
  // Fills row `row` from the window of seq_len + 1 tokens starting at `start` in
  // `split`; the caller guarantees the window lies inside it.
  void fill_row(int64_t row, const TokenStream& split, int64_t start);
};

}  // namespace fp8::engine::data
