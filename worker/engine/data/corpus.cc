#include "worker/engine/data/corpus.h"

#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "worker/engine/data/corpus_split.h"
#include "worker/engine/data/file_pattern.h"
#include "worker/engine/data/tokenizer.h"

namespace fp8::engine::data {
namespace {

absl::Status check_options(const CorpusOptions& options) {
  if (options.seq_len < 1) {
    return absl::InvalidArgumentError(absl::StrCat("data.seq_len: must be at least 1, got ", options.seq_len));
  }
  // The negated form also rejects NaN.
  if (!(options.val_fraction >= 0 && options.val_fraction <= 0.5)) {
    return absl::InvalidArgumentError(
        absl::StrCat("data.val_fraction: must be in [0, 0.5], got ", options.val_fraction));
  }
  if (!options.val_path.empty() && options.val_fraction != 0) {
    return absl::InvalidArgumentError("data.val_path and data.val_fraction: give one of them, not both");
  }
  return absl::OkStatus();
}

// One file's tokens and its tokenizer's facts, mapped into `texts` or `shards`: a shard's,
// or a text file's bytes (the bytes tokenizer's).
absl::StatusOr<TokenRun> map_tokens(const std::string& field, const std::string& path, bool* is_shard,
                                   TokenShardHeader* tokenizer, std::vector<MappedFile>& texts,
                                   std::vector<TokenShard>& shards) {
  absl::StatusOr<MappedFile> file = MappedFile::open(path);
  if (!file.ok()) return absl::Status(file.status().code(), absl::StrCat(field, ": ", file.status().message()));
  if (file->bytes().empty()) return absl::InvalidArgumentError(absl::StrCat(field, ": ", path, " is empty"));
  *is_shard = looks_like_token_shard(file->bytes());
  if (!*is_shard) {
    const std::unique_ptr<Tokenizer> bytes_tokenizer = Tokenizer::bytes();
    *tokenizer = {1, 0, bytes_tokenizer->vocab_size(), bytes_tokenizer->end_of_text(),
                  bytes_tokenizer->fingerprint()};
    const std::span<const uint8_t> bytes = file->bytes();
    texts.push_back(*std::move(file));
    return TokenRun{bytes.data(), static_cast<int64_t>(bytes.size()), 1};
  }
  absl::StatusOr<TokenShard> shard = TokenShard::from_mapped(path, *std::move(file));
  if (!shard.ok()) return absl::Status(shard.status().code(), absl::StrCat(field, ": ", shard.status().message()));
  if (shard->header().tokens == 0) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": token shard ", path, " holds no tokens"));
  }
  *tokenizer = shard->header();
  shards.push_back(*std::move(shard));
  return shards.back().tokens();
}

}  // namespace

absl::StatusOr<Corpus> Corpus::load(const std::string& path, const CorpusOptions& options) {
  if (!is_file_pattern(path)) return load_files(path, {path}, options);
  absl::StatusOr<std::vector<std::string>> files = expand_file_pattern(path, "data.path");
  if (!files.ok()) return files.status();
  return load_files(path, *files, options);
}

absl::StatusOr<Corpus> Corpus::load_files(const std::string& path, const std::vector<std::string>& files,
                                         const CorpusOptions& options) {
  if (absl::Status status = check_options(options); !status.ok()) return status;
  if (files.empty()) return absl::InvalidArgumentError(absl::StrCat("data.path: '", path, "' names no file"));
  const std::unique_ptr<Tokenizer> bytes = Tokenizer::bytes();
  const Tokenizer& options_tokenizer = options.tokenizer != nullptr ? *options.tokenizer : *bytes;
  Corpus corpus;
  corpus.path_ = path;
  bool is_shard = false;
  // Several files must all be shards of one tokenizer: they are read as one stream.
  std::vector<TokenRun> runs;
  for (const std::string& file : files) {
    bool file_is_shard = false;
    TokenShardHeader tokenizer;
    absl::StatusOr<TokenRun> run =
        map_tokens("data.path", file, &file_is_shard, &tokenizer, corpus.texts_, corpus.shards_);
    if (!run.ok()) return run.status();
    if (files.size() > 1 && !file_is_shard) {
      return absl::InvalidArgumentError(
          absl::StrCat("data.path: ", file, " (matching '", path, "') is not a token shard; a pattern names shards"));
    }
    if (&file != &files.front() && tokenizer.tokenizer != corpus.tokenizer_.tokenizer) {
      return absl::InvalidArgumentError(absl::StrCat("data.path: ", file, " was made by another tokenizer than ",
                                                     files.front()));
    }
    if (!file_is_shard && options_tokenizer.fingerprint() != tokenizer_fingerprint(kBytesTokenizerName)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "data.path: ", file, " is text; with data.tokenizer ", options_tokenizer.name(),
          " the data are token shards: make them with fp8-data prepare --tokenizer-model"));
    }
    if (file_is_shard && tokenizer.tokenizer != options_tokenizer.fingerprint()) {
      return absl::InvalidArgumentError(absl::StrCat("data.path: the tokens of ", file,
                                                     " were made by another tokenizer than data.tokenizer (",
                                                     options_tokenizer.name(), ")"));
    }
    is_shard = file_is_shard;
    corpus.tokenizer_ = tokenizer;
    runs.push_back(*run);
  }
  const TokenStream all(std::move(runs));

  if (options.val_path.empty()) {
    // A text file splits at a line start, a shard at a document's.
    const int64_t split = is_shard ? validation_split_index(all, options.val_fraction,
                                                          static_cast<int32_t>(corpus.tokenizer_.end_of_text))
                                   : validation_split_index(all, options.val_fraction, '\n');
    corpus.train_ = all.slice(0, split);
    corpus.validation_ = all.slice(split, all.size() - split);
  } else {
    corpus.train_ = all;
    bool val_is_shard = false;
    TokenShardHeader val_tokenizer;
    absl::StatusOr<TokenRun> validation = map_tokens("data.val_path", options.val_path, &val_is_shard,
                                                    &val_tokenizer, corpus.texts_, corpus.shards_);
    if (!validation.ok()) return validation.status();
    if (val_tokenizer.tokenizer != corpus.tokenizer_.tokenizer || val_is_shard != is_shard) {
      return absl::InvalidArgumentError(absl::StrCat("data.val_path: ", options.val_path,
                                                     " was tokenized otherwise than data.path ", path,
                                                     " (another tokenizer, or text beside a token shard)"));
    }
    corpus.validation_ = TokenStream({*validation});
  }
  const int64_t window = options.seq_len + 1;
  const int64_t train_size = corpus.train_.size();
  const int64_t validation_size = corpus.validation_.size();
  if (train_size < window) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data.path: training split of ", path, " has ", train_size, " tokens, fewer than seq_len+1 = ", window,
        "; use a larger file, or lower data.seq_len or data.val_fraction"));
  }
  const bool wants_validation = options.val_fraction > 0 || !options.val_path.empty();
  if (wants_validation && validation_size < window) {
    const std::string& where = options.val_path.empty() ? path : options.val_path;
    return absl::InvalidArgumentError(absl::StrCat(
        options.val_path.empty() ? "data.path" : "data.val_path", ": validation split of ", where, " has ",
        validation_size, " tokens, fewer than seq_len+1 = ", window,
        options.val_path.empty() ? "; raise data.val_fraction, lower data.seq_len or use a larger file"
                                 : "; lower data.seq_len or give more validation data"));
  }
  return corpus;
}

}  // namespace fp8::engine::data
