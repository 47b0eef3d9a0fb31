// The daemon's own log: one line per event on stderr, "fp8-worker: <UTC time> <text>".
// Rank output never goes here (it goes to each rank's output.log and to the coordinator),
// and neither does any token.
#pragma once

#include "absl/strings/string_view.h"

namespace fp8::worker {

// Thread-safe; each call writes one whole line.
void log(absl::string_view text);

}  // namespace fp8::worker
