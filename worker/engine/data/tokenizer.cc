#include "worker/engine/data/tokenizer.h"

#include <fstream>
#include <optional>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/tokenizer/sentencepiece_model_info.h"
#include "worker/engine/data/corpus.h"
#include "worker/engine/data/token_shard.h"

namespace fp8::engine::data {
namespace {

class BytesTokenizer final : public Tokenizer {
 public:
  std::string name() const override { return kBytesTokenizerName; }
  uint64_t fingerprint() const override { return tokenizer_fingerprint(kBytesTokenizerName); }
  uint32_t vocab_size() const override { return kBytesVocabSize; }
  uint32_t end_of_text() const override { return kBytesEndOfText; }
  absl::Status encode(std::string_view text, std::vector<uint32_t>& out) const override {
    for (char c : text) out.push_back(static_cast<uint8_t>(c));
    return absl::OkStatus();
  }
  std::string decode(std::span<const int32_t> ids) const override {
    std::string text;
    for (int32_t id : ids) text += static_cast<char>(id);
    return text;
  }
};

// A SentencePiece model's facts, read without the library (sentencepiece_model_info.h).
class SentencePieceFactsTokenizer final : public Tokenizer {
 public:
  SentencePieceFactsTokenizer(std::string path, uint64_t fingerprint, tokenizer::SentencePieceModelInfo info)
      : path_(std::move(path)), fingerprint_(fingerprint), info_(info) {}

  std::string name() const override { return absl::StrCat("sentencepiece (", path_, ")"); }
  uint64_t fingerprint() const override { return fingerprint_; }
  uint32_t vocab_size() const override { return static_cast<uint32_t>(info_.pieces); }
  uint32_t end_of_text() const override { return static_cast<uint32_t>(info_.eos_id); }
  absl::Status encode(std::string_view, std::vector<uint32_t>&) const override {
    return absl::FailedPreconditionError(absl::StrCat("sentencepiece ", path_,
                                                      ": text is encoded by fp8-data prepare --tokenizer-model"));
  }
  std::string decode(std::span<const int32_t>) const override { return ""; }

 private:
  std::string path_;
  uint64_t fingerprint_;
  tokenizer::SentencePieceModelInfo info_;
};

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::bytes() { return std::make_unique<BytesTokenizer>(); }

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::sentence_piece_facts(const std::string& model_path,
                                                                         const std::string& field) {
  std::ifstream in(model_path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(field, ": cannot open ", model_path));
  std::ostringstream bytes;
  bytes << in.rdbuf();
  const std::string serialized = bytes.str();
  std::string error;
  const std::optional<tokenizer::SentencePieceModelInfo> info =
      tokenizer::read_sentence_piece_model_info(serialized, &error);
  if (!info) return absl::InvalidArgumentError(absl::StrCat(field, ": ", model_path, ": ", error));
  if (info->eos_id < 0 || info->eos_id >= info->pieces) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", model_path,
                                                   " has no end-of-sentence piece, which ends each document"));
  }
  return std::unique_ptr<Tokenizer>(
      std::make_unique<SentencePieceFactsTokenizer>(model_path, tokenizer_fingerprint(serialized), *info));
}

}  // namespace fp8::engine::data
