#include "worker/fp8_data/utf8.h"

#include <cstdint>

namespace fp8::data_cli {

std::optional<size_t> first_invalid_utf8(std::string_view text) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const uint8_t c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    int length = 0;
    uint8_t low = 0x80, high = 0xBF;  // the allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      length = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      length = 3;
      if (c == 0xE0) low = 0xA0;   // no overlong forms
      if (c == 0xED) high = 0x9F;  // no surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      length = 4;
      if (c == 0xF0) low = 0x90;
      if (c == 0xF4) high = 0x8F;  // nothing past U+10FFFF
    } else {
      return i;
    }
    if (i + static_cast<size_t>(length) > n) return i;
    if (s[i + 1] < low || s[i + 1] > high) return i;
    for (int k = 2; k < length; ++k) {
      if ((s[i + static_cast<size_t>(k)] & 0xC0) != 0x80) return i;
    }
    i += static_cast<size_t>(length);
  }
  return std::nullopt;
}

}  // namespace fp8::data_cli
