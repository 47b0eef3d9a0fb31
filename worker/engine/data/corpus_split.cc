#include "worker/engine/data/corpus_split.h"

#include <algorithm>
#include <cmath>

namespace fp8::engine::data {

int64_t validation_split_offset(std::span<const uint8_t> bytes, double val_fraction) {
  return validation_split_index(TokenStream({{bytes.data(), static_cast<int64_t>(bytes.size()), 1}}), val_fraction,
                              '\n');
}

int64_t validation_split_index(const TokenStream& tokens, double val_fraction, int32_t boundary) {
  const int64_t size = tokens.size();
  const auto validation_bytes = static_cast<int64_t>(std::llround(static_cast<double>(size) * val_fraction));
  const int64_t exact = size - std::clamp<int64_t>(validation_bytes, 0, size);
  // No validation asked for, or none to be had: do not invent some by snapping.
  if (exact == size || exact == 0) return exact;

  // A split at offset p is a line (or document) start when token p - 1 is the boundary.
  // Candidates stay strictly inside the stream, so snapping never empties either side.
  auto is_line_start = [&](int64_t p) { return p > 0 && p < size && tokens.at(p - 1) == boundary; };
  for (int64_t distance = 0; distance <= kSplitSnapBytes; ++distance) {
    if (is_line_start(exact - distance)) return exact - distance;
    if (is_line_start(exact + distance)) return exact + distance;
  }
  return exact;
}

}  // namespace fp8::engine::data
