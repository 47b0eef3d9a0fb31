#include "worker/fp8_data/sentencepiece_tokenizer.h"

#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/tokenizer/sentencepiece_model.h"
#include "worker/engine/data/token_shard.h"

namespace fp8::data_cli {
namespace {

class SentencePieceTokenizer final : public engine::data::Tokenizer {
 public:
  SentencePieceTokenizer(std::string path, uint64_t fingerprint, std::unique_ptr<tokenizer::SentencePieceModel> model)
      : path_(std::move(path)), fingerprint_(fingerprint), model_(std::move(model)) {}

  std::string name() const override { return absl::StrCat("sentencepiece (", path_, ")"); }
  uint64_t fingerprint() const override { return fingerprint_; }
  uint32_t vocab_size() const override { return static_cast<uint32_t>(model_->piece_size()); }
  uint32_t end_of_text() const override { return static_cast<uint32_t>(model_->eos_id()); }
  absl::Status encode(std::string_view text, std::vector<uint32_t>& out) const override {
    std::vector<int> ids;
    std::string error;
    if (!model_->encode(text, &ids, &error)) {
      return absl::InternalError(absl::StrCat("sentencepiece ", path_, ": ", error));
    }
    out.insert(out.end(), ids.begin(), ids.end());
    return absl::OkStatus();
  }
  std::string decode(std::span<const int32_t> ids) const override {
    return model_->decode(std::vector<int>(ids.begin(), ids.end()));
  }

 private:
  std::string path_;
  uint64_t fingerprint_;
  std::unique_ptr<tokenizer::SentencePieceModel> model_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<engine::data::Tokenizer>> load_sentence_piece(const std::string& model_path,
                                                                            const std::string& field) {
  // The engine's reading of the file first: the same checks and messages, and a model it
  // would refuse is refused here too.
  absl::StatusOr<std::unique_ptr<engine::data::Tokenizer>> facts =
      engine::data::Tokenizer::sentence_piece_facts(model_path, field);
  if (!facts.ok()) return facts.status();
  std::ifstream in(model_path, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  std::string error;
  std::unique_ptr<tokenizer::SentencePieceModel> model = tokenizer::SentencePieceModel::load(bytes.str(), &error);
  if (model == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", model_path, " is not a SentencePiece model (", error, ")"));
  }
  return std::unique_ptr<engine::data::Tokenizer>(std::make_unique<SentencePieceTokenizer>(
      model_path, engine::data::tokenizer_fingerprint(bytes.str()), std::move(model)));
}

absl::StatusOr<std::unique_ptr<engine::data::Tokenizer>> load_tokenizer(const std::string& model_path,
                                                                        const std::string& field) {
  if (model_path.empty()) return engine::data::Tokenizer::bytes();
  return load_sentence_piece(model_path, field);
}

}  // namespace fp8::data_cli
