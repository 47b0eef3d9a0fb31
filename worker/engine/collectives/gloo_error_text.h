// Gloo's exception messages start with the source location that threw them
// ("[/build/gloo/transport/tcp/pair.cc:589] Connection closed by peer [10.0.0.2]:4711").
// Users need the rest.
#pragma once

#include <string>
#include <string_view>

namespace fp8::engine::collectives {

inline std::string gloo_error_text(std::string_view message) {
  if (!message.empty() && message.front() == '[') {
    const size_t end = message.find("] ");
    if (end != std::string_view::npos) message.remove_prefix(end + 2);
  }
  return std::string(message);
}

}  // namespace fp8::engine::collectives
