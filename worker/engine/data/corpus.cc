#include "worker/engine/data/corpus.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "worker/engine/data/corpus_split.h"

namespace fp8::engine::data {
namespace {

absl::Status CheckOptions(const CorpusOptions& options) {
  if (options.seq_len < 1) {
    return absl::InvalidArgumentError(absl::StrCat("data.seq_len: must be at least 1, got ", options.seq_len));
  }
  // The negated form also rejects NaN.
  if (!(options.val_fraction >= 0 && options.val_fraction <= 0.5)) {
    return absl::InvalidArgumentError(
        absl::StrCat("data.val_fraction: must be in [0, 0.5], got ", options.val_fraction));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Corpus> Corpus::Load(const std::string& path, const CorpusOptions& options) {
  if (absl::Status status = CheckOptions(options); !status.ok()) return status;

  absl::StatusOr<MappedFile> file = MappedFile::Open(path);
  if (!file.ok()) {
    return absl::Status(file.status().code(), absl::StrCat("data.path: ", file.status().message()));
  }
  const std::span<const uint8_t> bytes = file->bytes();
  if (bytes.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("data.path: ", path, " is empty"));
  }

  const int64_t split = ValidationSplitOffset(bytes, options.val_fraction);
  const int64_t window = options.seq_len + 1;
  const auto train_size = split;
  const auto validation_size = static_cast<int64_t>(bytes.size()) - split;
  if (train_size < window) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data.path: training split of ", path, " has ", train_size, " tokens, fewer than seq_len+1 = ", window,
        "; use a larger file, or lower data.seq_len or data.val_fraction"));
  }
  if (options.val_fraction > 0 && validation_size < window) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data.path: validation split of ", path, " has ", validation_size, " tokens, fewer than seq_len+1 = ",
        window, "; raise data.val_fraction, lower data.seq_len or use a larger file"));
  }
  return Corpus(path, *std::move(file), split);
}

}  // namespace fp8::engine::data
