// A deterministic English-like corpus for tests that train on text: sentences of common
// words with a little punctuation, the same bytes on every platform.
#pragma once

#include <cstddef>
#include <string>

namespace fp8::cli_test {

std::string synthetic_text(size_t bytes);

}  // namespace fp8::cli_test
