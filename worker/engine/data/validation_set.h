// The held-out batches of an evaluation: a fixed list of windows of the validation
// split, the same at every evaluation, so that validation losses of one run (and of runs
// over the same corpus and global batch) compare like with like.
//
// Windows are cut at stride seq_len from the start of the validation split, in order:
// evaluation batch b is global windows [b * G, (b + 1) * G) with G = batch_size *
// world_size, sharded over ranks exactly as training is (batcher.h): rank r takes
// windows b * G + r, b * G + r + world_size, ... When the split holds fewer than
// eval_batches * G windows, the list wraps around to the first window again, so every
// batch keeps its full size; distinct_windows() tells how many differ.
#pragma once

#include <cstdint>
#include <span>

#include "absl/status/statusor.h"
#include "worker/engine/data/corpus.h"
#include "worker/engine/data/token_batch.h"

namespace fp8::engine::data {

struct ValidationOptions {
  int64_t seq_len = 0;       // data.seq_len
  int64_t batch_size = 0;    // train.batch_size: sequences per batch on each rank
  int64_t eval_batches = 0;  // train.eval_batches
  int rank = 0;
  int world_size = 1;
};

class ValidationSet {
 public:
  // `corpus` must outlive the set. FailedPrecondition when the corpus has no validation
  // split (data.val_fraction 0) or one shorter than a window; InvalidArgument for
  // options out of range.
  static absl::StatusOr<ValidationSet> create(const Corpus& corpus, const ValidationOptions& options);

  int64_t num_batches() const { return options_.eval_batches; }
  // Distinct windows in the whole list (over all ranks); less than eval_batches *
  // batch_size * world_size when it wraps.
  int64_t distinct_windows() const;

  // This rank's share of evaluation batch `index` (in [0, num_batches())): batch_size
  // rows. The second form reuses `batch`'s memory.
  TokenBatch batch(int64_t index) const;
  void batch(int64_t index, TokenBatch& batch) const;

 private:
  ValidationSet(const TokenStream& tokens, const ValidationOptions& options, int64_t windows_in_split)
      : tokens_(tokens), options_(options), windows_in_split_(windows_in_split) {}

  TokenStream tokens_;
  ValidationOptions options_;
  int64_t windows_in_split_;
};

}  // namespace fp8::engine::data
