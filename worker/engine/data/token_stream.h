// Tokens as the data pipeline reads them: runs of little-endian integers in mapped memory
// (one byte each for a text file read by the bytes tokenizer, two or four for a token
// shard), seen as one sequence. A window may straddle two runs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace fp8::engine::data {

struct TokenRun {
  const uint8_t* data = nullptr;
  int64_t size = 0;  // tokens
  int width = 1;     // bytes per token: 1, 2 or 4
};

class TokenStream {
 public:
  TokenStream() = default;
  explicit TokenStream(std::vector<TokenRun> runs);

  int64_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  int32_t at(int64_t index) const;
  // Tokens [start, start + count) into `out`, widened to int32; the caller keeps the
  // range inside the stream.
  void copy(int64_t start, int64_t count, int32_t* out) const;
  // Tokens [offset, offset + count) as a stream of their own (the same memory).
  TokenStream slice(int64_t offset, int64_t count) const;

 private:
  // The run holding token `index`.
  size_t run_of(int64_t index) const;

  std::vector<TokenRun> runs_;
  std::vector<int64_t> starts_;  // starts_[i]: the stream index of runs_[i]'s first token
  int64_t size_ = 0;
};

}  // namespace fp8::engine::data
