// `fp8-data inspect`: what a token shard holds, for a person to read: its header, how many
// documents, and its first tokens decoded.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace fp8::data_cli {

// The report for the shard at `path`, decoding its first `tokens` tokens: as text with the
// bytes tokenizer (control bytes escaped) or the SentencePiece model `tokenizer_model`
// (which must be the one that made the shard), else as ids. Errors are the shard
// reader's (token_shard.h): the file and what is wrong with it; or the model's.
absl::StatusOr<std::string> inspect(const std::string& path, int64_t tokens, const std::string& tokenizer_model = "");

}  // namespace fp8::data_cli
