// The training data as a stream of tokens, divided into a training split and a validation
// split. data.path is a token shard (token_shard.h: tokens made by `fp8-data prepare`), a
// glob pattern of shards (read in name order as one stream: a window may span two), or a
// text file read by the bytes tokenizer (vocabulary 256: a token is the byte's value).
// Validation is the tail of that data (corpus_split.h), or data.val_path of its own.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/engine/data/mapped_file.h"
#include "worker/engine/data/token_shard.h"
#include "worker/engine/data/token_stream.h"
#include "worker/engine/data/tokenizer.h"

namespace fp8::engine::data {

// The bytes tokenizer's vocabulary, end-of-text id (ASCII ETX) and fingerprint name.
inline constexpr uint32_t kBytesVocabSize = 256;
inline constexpr uint32_t kBytesEndOfText = 3;
inline constexpr char kBytesTokenizerName[] = "bytes";

struct CorpusOptions {
  // Tokens per training sequence (data.seq_len). Each split must hold at least one
  // window of seq_len + 1 tokens: the inputs plus the one extra target.
  int64_t seq_len = 0;
  // Share of data.path held out as validation, in [0, 0.5] (data.val_fraction). With 0
  // there is no validation split and no check on its size.
  double val_fraction = 0.05;
  // data.val_path: validation data of its own, the same kind as data.path (val_fraction
  // must then be 0).
  std::string val_path;
  // data.tokenizer: shards must have been made by it; text is read only by the bytes
  // tokenizer. Null: the bytes tokenizer. Not owned; used only while loading.
  const Tokenizer* tokenizer = nullptr;
};

class Corpus {
 public:
  // Maps the data. Errors name the field and the file: a missing or unreadable file, an
  // empty one, a damaged shard, shards of different tokenizers, options out of range, and
  // a split too short for one window (what to change is part of the message).
  static absl::StatusOr<Corpus> load(const std::string& path, const CorpusOptions& options);
  // The same with data.path's files already found (a pattern's matches, opened beneath
  // the data root by the caller): `files` in order, `path` for messages.
  static absl::StatusOr<Corpus> load_files(const std::string& path, const std::vector<std::string>& files,
                                          const CorpusOptions& options);

  const std::string& path() const { return path_; }
  // The tokenizer's facts (for a text file, the bytes tokenizer's); `tokens` is unused.
  const TokenShardHeader& tokenizer() const { return tokenizer_; }
  const TokenStream& train_tokens() const { return train_; }
  const TokenStream& validation_tokens() const { return validation_; }

 private:
  Corpus() = default;

  std::string path_;
  TokenShardHeader tokenizer_;
  std::vector<MappedFile> texts_;   // what the streams point into: text files
  std::vector<TokenShard> shards_;  // or shards
  TokenStream train_, validation_;
};

}  // namespace fp8::engine::data
