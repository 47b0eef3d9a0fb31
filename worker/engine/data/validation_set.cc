#include "worker/engine/data/validation_set.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "worker/engine/data/epoch_order.h"

namespace fp8::engine::data {
namespace {

absl::Status check_options(const ValidationOptions& o) {
  auto invalid = [](auto&&... parts) { return absl::InvalidArgumentError(absl::StrCat(parts...)); };
  if (o.seq_len < 1) return invalid("data.seq_len: must be at least 1, got ", o.seq_len);
  if (o.batch_size < 1) return invalid("train.batch_size: must be at least 1, got ", o.batch_size);
  if (o.eval_batches < 1) return invalid("train.eval_batches: must be at least 1, got ", o.eval_batches);
  if (o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size) {
    return invalid("rank ", o.rank, " is not in a world of size ", o.world_size);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ValidationSet> ValidationSet::create(const Corpus& corpus, const ValidationOptions& options) {
  if (absl::Status status = check_options(options); !status.ok()) return status;
  const TokenStream& tokens = corpus.validation_tokens();
  if (tokens.empty()) {
    return absl::FailedPreconditionError(
        "evaluation needs held-out data, but data.val_fraction is 0 and there is no data.val_path");
  }
  const int64_t size = tokens.size();
  if (size < options.seq_len + 1) {
    return absl::FailedPreconditionError(absl::StrCat("data.path: validation split has ", size,
                                                      " tokens, fewer than seq_len+1 = ", options.seq_len + 1));
  }
  // Cut as an epoch with phase 0 is: non-overlapping windows at stride seq_len.
  return ValidationSet(tokens, options, max_windows_per_epoch(size, options.seq_len));
}

int64_t ValidationSet::distinct_windows() const {
  return std::min(windows_in_split_, options_.eval_batches * options_.batch_size * options_.world_size);
}

TokenBatch ValidationSet::batch(int64_t index) const {
  TokenBatch out;
  batch(index, out);
  return out;
}

void ValidationSet::batch(int64_t index, TokenBatch& batch) const {
  batch.resize(options_.batch_size, options_.seq_len);
  const int64_t world = options_.world_size;
  const int64_t first = index * options_.batch_size * world + options_.rank;
  for (int64_t row = 0; row < options_.batch_size; ++row) {
    const int64_t window = (first + row * world) % windows_in_split_;
    batch.fill_row(row, tokens_, window * options_.seq_len);
  }
}

}  // namespace fp8::engine::data
