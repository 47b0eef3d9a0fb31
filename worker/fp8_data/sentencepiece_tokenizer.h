// The SentencePiece tokenizer that encodes and decodes, on the library: fp8-data's alone
// (common/tokenizer/sentencepiece_model_info.h says why no other process loads it).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/engine/data/tokenizer.h"

namespace fp8::data_cli {

// The model at `model_path`: its fingerprint and facts are those the engine reads from the
// same file (engine::data::Tokenizer::sentence_piece_facts). Errors name `field` and the file.
absl::StatusOr<std::unique_ptr<engine::data::Tokenizer>> load_sentence_piece(const std::string& model_path,
                                                                            const std::string& field);

// The bytes tokenizer when `model_path` is empty, else LoadSentencePiece.
absl::StatusOr<std::unique_ptr<engine::data::Tokenizer>> load_tokenizer(const std::string& model_path,
                                                                        const std::string& field);

}  // namespace fp8::data_cli
