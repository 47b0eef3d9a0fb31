#include "worker/fp8_data/train_tokenizer.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/tokenizer/sentencepiece_model.h"
#include "nlohmann/json.hpp"
#include "worker/fp8_data/inputs.h"
#include "worker/fp8_data/utf8.h"

namespace fp8::data_cli {

namespace fs = std::filesystem;

absl::Status train_tokenizer(const TrainTokenizerOptions& options) {
  if (options.out_prefix.empty()) return absl::InvalidArgumentError("--out: required");
  if (options.vocab_size < 8) return absl::InvalidArgumentError("--vocab-size: must be at least 8");
  if (options.model_type != "bpe" && options.model_type != "unigram") {
    return absl::InvalidArgumentError(
        absl::StrCat("--model-type '", options.model_type, "': expected bpe or unigram"));
  }
  const std::string model = options.out_prefix + ".model", vocab = options.out_prefix + ".vocab";
  if (fs::exists(model) || fs::exists(vocab)) {
    return absl::AlreadyExistsError(absl::StrCat(model, " or ", vocab, " already exists"));
  }
  absl::StatusOr<std::vector<std::string>> files = expand_inputs(options.inputs);
  if (!files.ok()) return files.status();
  // SentencePiece reads text files; every document (checked as prepare checks it) goes
  // into one staged file beside the output, one line per line of text.
  const std::string staged = absl::StrCat(options.out_prefix, ".partial-", ::getpid());
  std::error_code ec;
  auto clean = [&] {
    for (const char* ext : {".txt", ".model", ".vocab"}) fs::remove(staged + ext, ec);
  };
  {
    std::ofstream text(staged + ".txt", std::ios::binary | std::ios::trunc);
    if (!text) return absl::PermissionDeniedError(absl::StrCat(staged, ".txt: cannot create"));
    for (const std::string& file : *files) {
      absl::StatusOr<std::string> content = read_file(file);
      absl::Status s = content.status();
      if (s.ok() && content->empty()) s = absl::InvalidArgumentError(absl::StrCat(file, ": empty file"));
      if (s.ok()) {
        if (std::optional<size_t> bad = first_invalid_utf8(*content)) {
          s = absl::InvalidArgumentError(absl::StrCat(file, ", byte ", *bad, ": not UTF-8"));
        }
      }
      if (!s.ok()) {
        clean();
        return s;
      }
      if (!file.ends_with(".jsonl")) {
        text << *content << '\n';
        continue;
      }
      int64_t line = 0;
      for (absl::string_view piece : absl::StrSplit(*content, '\n')) {
        const std::string_view row(piece.data(), piece.size());
        ++line;
        if (row.find_first_not_of(" \t\r") == std::string_view::npos) continue;
        const nlohmann::json value = nlohmann::json::parse(row, nullptr, /*allow_exceptions=*/false);
        if (value.is_discarded() || !value.is_object() || !value.contains("text") || !value["text"].is_string()) {
          clean();
          return absl::InvalidArgumentError(
              absl::StrCat(file, ":", line, ": expected an object with a string \"text\""));
        }
        text << value["text"].get_ref<const std::string&>() << '\n';
      }
    }
    if (!text.good()) {
      clean();
      return absl::DataLossError(absl::StrCat(staged, ".txt: write error"));
    }
  }
  const std::string error = tokenizer::SentencePieceModel::train(absl::StrCat(
      "--input=", staged, ".txt --model_prefix=", staged, " --vocab_size=", options.vocab_size,
      " --model_type=", options.model_type, " --minloglevel=1"));
  if (!error.empty()) {
    clean();
    return absl::InvalidArgumentError(absl::StrCat("training the tokenizer: ", error));
  }
  fs::rename(staged + ".model", model, ec);
  if (!ec) fs::rename(staged + ".vocab", vocab, ec);
  if (ec) {
    fs::remove(model, ec);
    clean();
    return absl::InternalError(absl::StrCat("moving the model to ", model, ": ", ec.message()));
  }
  clean();
  return absl::OkStatus();
}

}  // namespace fp8::data_cli
