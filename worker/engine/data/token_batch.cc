#include "worker/engine/data/token_batch.h"

namespace fp8::engine::data {

void TokenBatch::Resize(int64_t new_rows, int64_t new_seq_len) {
  rows = new_rows;
  seq_len = new_seq_len;
  const auto elements = static_cast<size_t>(rows * seq_len);
  inputs.resize(elements);
  targets.resize(elements);
  window_starts.resize(static_cast<size_t>(rows));
}

void TokenBatch::FillRow(int64_t row, std::span<const uint8_t> split, int64_t start) {
  window_starts[static_cast<size_t>(row)] = start;
  const uint8_t* window = split.data() + start;
  int32_t* input_row = inputs.data() + row * seq_len;
  int32_t* target_row = targets.data() + row * seq_len;
  for (int64_t t = 0; t < seq_len; ++t) {
    input_row[t] = window[t];
    target_row[t] = window[t + 1];
  }
}

}  // namespace fp8::engine::data
