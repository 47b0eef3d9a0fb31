// A text file as a stream of byte tokens (vocabulary 256: a token is the byte's value),
// divided into a training split (the head) and a validation split (the tail; see
// corpus_split.h).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "worker/engine/data/mapped_file.h"

namespace fp8::engine::data {

struct CorpusOptions {
  // Tokens per training sequence (data.seq_len). Each split must hold at least one
  // window of seq_len + 1 tokens: the inputs plus the one extra target.
  int64_t seq_len = 0;
  // Share of the file held out as validation, in [0, 0.5] (data.val_fraction). With 0
  // there is no validation split and no check on its size.
  double val_fraction = 0.05;
};

class Corpus {
 public:
  // Maps the file at `path` (data.path). Errors, each naming the field and the file:
  // a missing or unreadable file, an empty file, options out of range, and a split too
  // short for one window (what to change is part of the message).
  static absl::StatusOr<Corpus> Load(const std::string& path, const CorpusOptions& options);

  const std::string& path() const { return path_; }
  // Byte offset in the file where validation begins (== file size without validation).
  int64_t split_offset() const { return split_offset_; }
  std::span<const uint8_t> train_tokens() const { return file_.bytes().first(split_offset_); }
  std::span<const uint8_t> validation_tokens() const { return file_.bytes().subspan(split_offset_); }

 private:
  Corpus(std::string path, MappedFile file, int64_t split_offset)
      : path_(std::move(path)), file_(std::move(file)), split_offset_(split_offset) {}

  std::string path_;
  MappedFile file_;
  int64_t split_offset_ = 0;
};

}  // namespace fp8::engine::data
