// Text taken from a rank's output before it goes into a protobuf string: proto3 strings
// must be valid UTF-8 (the coordinator would reject the whole call otherwise), and lines
// and exit messages are capped at 4096 bytes by the protos.
#pragma once

#include <cstddef>
#include <string>
#include "absl/strings/string_view.h"

namespace fp8::worker {

inline constexpr size_t kMaxLineBytes = 4096;

// `raw` with a trailing '\r' dropped, each byte that is not part of valid UTF-8 replaced by
// '?', and cut to at most max_bytes without splitting a character.
std::string clean_line(absl::string_view raw, size_t max_bytes = kMaxLineBytes);

// True when the line holds something other than whitespace.
bool has_text(absl::string_view line);

}  // namespace fp8::worker
