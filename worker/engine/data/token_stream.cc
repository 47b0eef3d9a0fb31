#include "worker/engine/data/token_stream.h"

#include <algorithm>
#include <utility>

namespace fp8::engine::data {
namespace {

int32_t read(const uint8_t* p, int width) {
  switch (width) {
    case 1:
      return *p;
    case 2:
      return static_cast<int32_t>(p[0] | (p[1] << 8));
    default: {
      uint32_t v = 0;
      for (int b = 3; b >= 0; --b) v = (v << 8) | p[b];
      return static_cast<int32_t>(v);
    }
  }
}

}  // namespace

TokenStream::TokenStream(std::vector<TokenRun> runs) {
  for (TokenRun& run : runs) {
    if (run.size == 0) continue;
    starts_.push_back(size_);
    size_ += run.size;
    runs_.push_back(run);
  }
}

size_t TokenStream::run_of(int64_t index) const {
  const auto after = std::upper_bound(starts_.begin(), starts_.end(), index);
  return static_cast<size_t>(after - starts_.begin()) - 1;
}

int32_t TokenStream::at(int64_t index) const {
  const size_t r = run_of(index);
  const TokenRun& run = runs_[r];
  return read(run.data + (index - starts_[r]) * run.width, run.width);
}

void TokenStream::copy(int64_t start, int64_t count, int32_t* out) const {
  if (count <= 0) return;
  for (size_t r = run_of(start); count > 0; ++r) {
    const TokenRun& run = runs_[r];
    const int64_t offset = start - starts_[r];
    const int64_t n = std::min(count, run.size - offset);
    const uint8_t* p = run.data + offset * run.width;
    if (run.width == 1) {
      for (int64_t i = 0; i < n; ++i) out[i] = p[i];
    } else {
      for (int64_t i = 0; i < n; ++i) out[i] = read(p + i * run.width, run.width);
    }
    out += n;
    start += n;
    count -= n;
  }
}

TokenStream TokenStream::slice(int64_t offset, int64_t count) const {
  std::vector<TokenRun> runs;
  if (count <= 0) return TokenStream();
  const int64_t end = offset + count;
  for (size_t r = run_of(offset); r < runs_.size() && starts_[r] < end; ++r) {
    const int64_t from = std::max(offset, starts_[r]) - starts_[r];
    const int64_t to = std::min(end, starts_[r] + runs_[r].size) - starts_[r];
    runs.push_back({runs_[r].data + from * runs_[r].width, to - from, runs_[r].width});
  }
  return TokenStream(std::move(runs));
}

}  // namespace fp8::engine::data
