#include "worker/fp8_data/prepare.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <span>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "worker/engine/data/corpus.h"
#include "worker/engine/data/token_shard.h"
#include "worker/engine/data/tokenizer.h"
#include "worker/fp8_data/sentencepiece_tokenizer.h"
#include "worker/fp8_data/inputs.h"
#include "worker/fp8_data/utf8.h"

namespace fp8::data_cli {
namespace {

namespace fs = std::filesystem;
using engine::data::TokenShardHeader;
using engine::data::TokenShardWriter;

// One document's tokens, its end-of-text id included; thread-safe (the tokenizers' Encode
// is). Errors name `where`.
absl::StatusOr<std::vector<uint32_t>> encode_document(const engine::data::Tokenizer& tokenizer, std::string_view text,
                                                     const std::string& where) {
  if (std::optional<size_t> bad = first_invalid_utf8(text)) {
    return absl::InvalidArgumentError(absl::StrCat(where, ", byte ", *bad, ": not UTF-8"));
  }
  const bool bytes = tokenizer.fingerprint() == engine::data::tokenizer_fingerprint(engine::data::kBytesTokenizerName);
  if (const size_t eot = text.find(static_cast<char>(engine::data::kBytesEndOfText));
      bytes && eot != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ", byte ", eot, ": the end-of-text byte 0x03, which separates documents"));
  }
  std::vector<uint32_t> tokens;
  if (absl::Status s = tokenizer.encode(text, tokens); !s.ok()) return s;
  tokens.push_back(tokenizer.end_of_text());
  return tokens;
}

// A document as found in the input: a whole text file, or one line of a JSON Lines file
// (parsed with the encoding, on the worker threads).
struct RawDocument {
  std::string_view text;
  std::string where;  // "file" or "file:line"
  bool json_line = false;
};

absl::StatusOr<std::vector<uint32_t>> encode_raw(const engine::data::Tokenizer& tokenizer, const RawDocument& doc) {
  if (!doc.json_line) return encode_document(tokenizer, doc.text, doc.where);
  const nlohmann::json value = nlohmann::json::parse(doc.text, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(doc.where, ": not a JSON value"));
  if (!value.is_object() || !value.contains("text") || !value["text"].is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(doc.where, ": expected an object with a string \"text\""));
  }
  return encode_document(tokenizer, value["text"].get_ref<const std::string&>(), doc.where);
}

// Writes documents' tokens into shards of at most options.shard_tokens tokens, in a
// staging folder, in the order they are added.
class ShardSink {
 public:
  ShardSink(const PrepareOptions& options, const engine::data::Tokenizer& tokenizer, fs::path staging)
      : options_(options), tokenizer_(tokenizer), staging_(std::move(staging)) {}

  absl::Status add_document(std::span<const uint32_t> tokens, int64_t text_bytes) {
    std::span<const uint32_t> rest = tokens;
    while (!rest.empty()) {
      if (!writer_ || writer_->tokens() == options_.shard_tokens) {
        if (absl::Status s = next_shard(); !s.ok()) return s;
      }
      const auto room = static_cast<size_t>(options_.shard_tokens - writer_->tokens());
      const size_t n = std::min(room, rest.size());
      if (absl::Status s = writer_->append(rest.first(n)); !s.ok()) return s;
      rest = rest.subspan(n);
    }
    ++summary_.documents;
    summary_.tokens += static_cast<int64_t>(tokens.size());
    summary_.bytes += text_bytes;
    return absl::OkStatus();
  }

  absl::StatusOr<PrepareSummary> finish() {
    if (writer_) {
      if (absl::Status s = writer_->finish(); !s.ok()) return s;
    }
    return summary_;
  }

 private:
  absl::Status next_shard() {
    if (writer_) {
      if (absl::Status s = writer_->finish(); !s.ok()) return s;
    }
    const std::string name = absl::StrFormat("%s-%05d.tokens", options_.name, summary_.shards.size());
    TokenShardHeader header;
    header.width = tokenizer_.vocab_size() <= (1u << 16) ? 2 : 4;
    header.vocab_size = tokenizer_.vocab_size();
    header.end_of_text = tokenizer_.end_of_text();
    header.tokenizer = tokenizer_.fingerprint();
    absl::StatusOr<TokenShardWriter> writer = TokenShardWriter::create((staging_ / name).string(), header);
    if (!writer.ok()) return writer.status();
    writer_.emplace(*std::move(writer));
    summary_.shards.push_back(name);
    return absl::OkStatus();
  }

  const PrepareOptions& options_;
  const engine::data::Tokenizer& tokenizer_;
  fs::path staging_;
  std::optional<TokenShardWriter> writer_;
  PrepareSummary summary_;
};

// A file's documents: the file itself, or its non-blank JSON lines.
std::vector<RawDocument> documents_of(const std::string& path, const std::string& text) {
  if (!path.ends_with(".jsonl")) return {RawDocument{text, path, false}};
  std::vector<RawDocument> out;
  size_t start = 0;
  for (int64_t line = 1; start < text.size(); ++line) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string_view row(text.data() + start, end - start);
    start = end + 1;
    if (row.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    out.push_back(RawDocument{row, absl::StrCat(path, ":", line), true});
  }
  return out;
}

// Encodes `docs` on `threads` threads (each takes every threads-th document) and adds them
// to the sink in their order; the first bad document in that order is the error.
absl::Status encode_and_add(const engine::data::Tokenizer& tokenizer, const std::vector<RawDocument>& docs,
                          int threads, ShardSink& sink) {
  std::vector<absl::StatusOr<std::vector<uint32_t>>> encoded(docs.size());
  auto work = [&](size_t first) {
    for (size_t i = first; i < docs.size(); i += static_cast<size_t>(threads)) encoded[i] = encode_raw(tokenizer, docs[i]);
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads && static_cast<size_t>(t) < docs.size(); ++t) pool.emplace_back(work, t);
  work(0);
  for (std::thread& t : pool) t.join();
  for (size_t i = 0; i < docs.size(); ++i) {
    if (!encoded[i].ok()) return encoded[i].status();
    if (absl::Status s = sink.add_document(*encoded[i], static_cast<int64_t>(docs[i].text.size())); !s.ok()) return s;
    encoded[i] = std::vector<uint32_t>();  // free as we go
  }
  return absl::OkStatus();
}

absl::StatusOr<PrepareSummary> prepare_into(const PrepareOptions& options, const engine::data::Tokenizer& tokenizer,
                                           const std::vector<std::string>& files, const fs::path& staging,
                                           const PrepareProgress& progress) {
  const int threads = options.threads > 0 ? options.threads
                                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  int64_t total = 0, done = 0;
  for (const std::string& f : files) total += static_cast<int64_t>(fs::file_size(f));
  ShardSink sink(options, tokenizer, staging);
  // Files are read a batch at a time, so that many small files also spread over the threads
  // while memory stays bounded by the batch.
  constexpr int64_t kBatchBytes = int64_t{64} << 20;
  std::vector<std::string> texts;
  std::vector<RawDocument> docs;
  int64_t batch_bytes = 0;
  auto flush = [&]() -> absl::Status {
    if (absl::Status s = encode_and_add(tokenizer, docs, threads, sink); !s.ok()) return s;
    done += batch_bytes;
    if (progress) progress(total > 0 ? static_cast<double>(done) / static_cast<double>(total) : 1.0);
    docs.clear();
    texts.clear();
    batch_bytes = 0;
    return absl::OkStatus();
  };
  texts.reserve(files.size());  // the documents point into these strings: never reallocated
  for (const std::string& file : files) {
    absl::StatusOr<std::string> text = read_file(file);
    if (!text.ok()) return text.status();
    if (text->empty()) return absl::InvalidArgumentError(absl::StrCat(file, ": empty file"));
    texts.push_back(*std::move(text));
    batch_bytes += static_cast<int64_t>(texts.back().size());
    for (RawDocument& d : documents_of(file, texts.back())) docs.push_back(std::move(d));
    if (batch_bytes >= kBatchBytes) {
      if (absl::Status s = flush(); !s.ok()) return s;
    }
  }
  if (absl::Status s = flush(); !s.ok()) return s;
  return sink.finish();
}

}  // namespace

absl::StatusOr<PrepareSummary> prepare(const PrepareOptions& options, const PrepareProgress& progress) {
  if (options.out_dir.empty()) return absl::InvalidArgumentError("--out: required");
  if (options.shard_tokens < 2) return absl::InvalidArgumentError("--shard-tokens: must be at least 2");
  if (options.name.empty() || options.name.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("--name '", options.name, "': must be a plain file name prefix"));
  }
  absl::StatusOr<std::vector<std::string>> files = expand_inputs(options.inputs);
  if (!files.ok()) return files.status();
  absl::StatusOr<std::unique_ptr<engine::data::Tokenizer>> tokenizer =
      load_tokenizer(options.tokenizer_model, "--tokenizer-model");
  if (!tokenizer.ok()) return tokenizer.status();

  const fs::path out(options.out_dir);
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec) return absl::PermissionDeniedError(absl::StrCat("--out ", out.string(), ": ", ec.message()));
  if (fs::exists(out / absl::StrFormat("%s-00000.tokens", options.name))) {
    return absl::AlreadyExistsError(absl::StrCat("--out ", out.string(), " already holds shards named ",
                                                 options.name, "-*.tokens; choose another --name or folder"));
  }
  const fs::path staging = out / absl::StrCat(".", options.name, ".partial-", ::getpid());
  fs::create_directories(staging, ec);
  if (ec) return absl::PermissionDeniedError(absl::StrCat(staging.string(), ": ", ec.message()));

  absl::StatusOr<PrepareSummary> summary = prepare_into(options, **tokenizer, *files, staging, progress);
  if (summary.ok()) {
    // Into place one by one; a failure takes back the ones already moved.
    std::vector<fs::path> moved;
    absl::Status status;
    for (std::string& shard : summary->shards) {
      fs::rename(staging / shard, out / shard, ec);
      if (ec) {
        status = absl::InternalError(absl::StrCat("moving ", shard, " into ", out.string(), ": ", ec.message()));
        break;
      }
      moved.push_back(out / shard);
      shard = moved.back().string();
    }
    if (!status.ok()) {
      for (const fs::path& m : moved) fs::remove(m, ec);
      summary = status;
    }
  }
  fs::remove_all(staging, ec);
  return summary;
}

}  // namespace fp8::data_cli
