#include "worker/engine/data/corpus_split.h"

#include <algorithm>
#include <cmath>

namespace fp8::engine::data {

int64_t ValidationSplitOffset(std::span<const uint8_t> bytes, double val_fraction) {
  const auto size = static_cast<int64_t>(bytes.size());
  const auto validation_bytes = static_cast<int64_t>(std::llround(static_cast<double>(size) * val_fraction));
  const int64_t exact = size - std::clamp<int64_t>(validation_bytes, 0, size);
  // No validation asked for, or none to be had: do not invent some by snapping.
  if (exact == size || exact == 0) return exact;

  // A split at offset p is a line start when bytes[p - 1] is '\n'. Candidates stay
  // strictly inside the file, so snapping never empties either side.
  auto is_line_start = [&](int64_t p) { return p > 0 && p < size && bytes[p - 1] == '\n'; };
  for (int64_t distance = 0; distance <= kSplitSnapBytes; ++distance) {
    if (is_line_start(exact - distance)) return exact - distance;
    if (is_line_start(exact + distance)) return exact + distance;
  }
  return exact;
}

}  // namespace fp8::engine::data
