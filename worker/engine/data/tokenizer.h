// What turns a job's text into token ids (data.tokenizer): the bytes tokenizer (a token per
// byte, vocabulary 256) or a SentencePiece model (data.tokenizer_model). Shards record
// their tokenizer's fingerprint, so data made by another tokenizer is refused at load.
// The engine knows a SentencePiece model's facts only (SentencePieceFacts); fp8-data,
// which may load the library, encodes with it (worker/fp8_data/sentencepiece_tokenizer.h).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace fp8::engine::data {

class Tokenizer {
 public:
  static std::unique_ptr<Tokenizer> bytes();
  // The SentencePiece model at `model_path` as far as shards need it: its fingerprint,
  // vocabulary and end-of-text id; Encode and Decode fail. Errors name the file (and
  // `field`, e.g. "data.tokenizer_model"): missing, not a model, or a model without an
  // end-of-sentence piece (documents need one to end with).
  static absl::StatusOr<std::unique_ptr<Tokenizer>> sentence_piece_facts(const std::string& model_path,
                                                                       const std::string& field);
  virtual ~Tokenizer() = default;

  // "bytes", or "sentencepiece (<model path>)", for messages and inspect.
  virtual std::string name() const = 0;
  // FNV-1a of "bytes", or of the SentencePiece model file's bytes.
  virtual uint64_t fingerprint() const = 0;
  virtual uint32_t vocab_size() const = 0;
  // The id that ends every document in a shard.
  virtual uint32_t end_of_text() const = 0;
  // Appends `text`'s ids to `out`.
  virtual absl::Status encode(std::string_view text, std::vector<uint32_t>& out) const = 0;
  // The text of `ids` (the bytes tokenizer's control bytes as they are); "" where the
  // tokenizer cannot decode.
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
};

}  // namespace fp8::engine::data
