// `fp8-data prepare`: text files, globs of them, or JSON Lines with a "text" field, into
// token shards (worker/engine/data/token_shard.h) of the bytes tokenizer or a SentencePiece
// model. Each text file is one document, each JSON line another; every document ends with
// the end-of-text id. Documents are encoded on every core.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace fp8::data_cli {

struct PrepareOptions {
  // Files or glob patterns; a name ending in ".jsonl" is read as JSON Lines.
  std::vector<std::string> inputs;
  std::string out_dir;               // created if missing
  std::string name = "shard";        // shards are <out_dir>/<name>-00000.tokens, ...
  int64_t shard_tokens = int64_t{1} << 28;  // tokens per shard at most (the last may hold fewer)
  std::string tokenizer_model;       // a SentencePiece .model; empty: the bytes tokenizer
  // Threads that parse and encode documents (0: one per core). Documents are written in
  // input order whatever the count: the shards are the same bytes.
  int threads = 0;
};

struct PrepareSummary {
  int64_t documents = 0;
  int64_t tokens = 0;  // end-of-text ids included
  int64_t bytes = 0;   // of text read
  std::vector<std::string> shards;
};

// Progress: the share of the input bytes read so far, in [0, 1].
using PrepareProgress = std::function<void(double)>;

// Errors name the file and where in it (byte offset or line): a missing input, a pattern
// matching nothing, an empty file, text that is not UTF-8 or holds the end-of-text byte,
// a JSON line without a string "text", shards of this name already in out_dir. On an
// error nothing is left in out_dir: shards are staged and moved in only at the end.
absl::StatusOr<PrepareSummary> prepare(const PrepareOptions& options, const PrepareProgress& progress = {});

}  // namespace fp8::data_cli
