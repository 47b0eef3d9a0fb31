#include "worker/fp8_worker/line_text.h"

#include "absl/strings/ascii.h"

namespace fp8::worker {
namespace {

// Length of the valid UTF-8 sequence starting at s[i], or 0 when it is not valid.
size_t utf8_length(absl::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  size_t n = 0;
  unsigned int cp = 0;
  if ((c & 0xE0) == 0xC0) {
    n = 2;
    cp = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    n = 3;
    cp = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    n = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  // Overlong forms, surrogates and code points past U+10FFFF are invalid too.
  static constexpr unsigned int kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[n] || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return 0;
  return n;
}

}  // namespace

std::string clean_line(absl::string_view raw, size_t max_bytes) {
  if (!raw.empty() && raw.back() == '\r') raw.remove_suffix(1);
  std::string out;
  out.reserve(raw.size() < max_bytes ? raw.size() : max_bytes);
  for (size_t i = 0; i < raw.size();) {
    size_t n = utf8_length(raw, i);
    if (out.size() + (n == 0 ? 1 : n) > max_bytes) break;
    if (n == 0) {
      out.push_back('?');
      n = 1;
    } else {
      out.append(raw.data() + i, n);
    }
    i += n;
  }
  return out;
}

bool has_text(absl::string_view line) { return !absl::StripAsciiWhitespace(line).empty(); }

}  // namespace fp8::worker
