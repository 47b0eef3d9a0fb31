#include "worker/engine/data/token_batch.h"

namespace fp8::engine::data {

void TokenBatch::resize(int64_t new_rows, int64_t new_seq_len) {
  rows = new_rows;
  seq_len = new_seq_len;
  const auto elements = static_cast<size_t>(rows * seq_len);
  inputs.resize(elements);
  targets.resize(elements);
  window_starts.resize(static_cast<size_t>(rows));
}

void TokenBatch::fill_row(int64_t row, const TokenStream& split, int64_t start) {
  window_starts[static_cast<size_t>(row)] = start;
  int32_t* input_row = inputs.data() + row * seq_len;
  int32_t* target_row = targets.data() + row * seq_len;
  split.copy(start, seq_len, input_row);
  split.copy(start + 1, seq_len, target_row);
}

}  // namespace fp8::engine::data
