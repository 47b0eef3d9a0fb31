// UTF-8 validation for the text fp8-data tokenizes: a corpus that is not UTF-8 is almost
// always a mistake (a binary file, another encoding) that tokenizers would learn silently.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace fp8::data_cli {

// The offset of the first byte that does not belong to a well-formed UTF-8 sequence
// (overlong forms, surrogates and code points past U+10FFFF included); nullopt when
// `text` is valid throughout.
std::optional<size_t> first_invalid_utf8(std::string_view text);

}  // namespace fp8::data_cli
