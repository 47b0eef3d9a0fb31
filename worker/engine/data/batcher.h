// The training stream: micro-batches of windows in the shuffled epoch order
// (epoch_order.h), sharded over data-parallel ranks.
//
// Global order and sharding. All ranks walk one global stream of windows, epoch after
// epoch. An optimizer step takes the next G = batch_size * world_size windows of it (the
// global batch) in grad_accum micro-batches of G / grad_accum consecutive windows; rank
// r takes every world_size-th window of each micro-batch, starting with the r-th. So the
// union over ranks of step s is the global batch of step s, the same set a single rank
// with batch_size * world_size would train on. A step may straddle two epochs.
//
// Batch size convention: batch_size is per rank, as train.batch_size in job.proto (the
// job validator sizes micro-batches as batch_size / grad_accum). Runs with different
// world sizes see the same data when their global batch G is the same.
//
// Resuming: position() is where the global stream stands and is the same on every rank.
// Saved in a checkpoint and given to restore(), it continues with exactly the windows
// that would have come next, also under a different world size with the same G.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/engine/data/corpus.h"
#include "worker/engine/data/epoch_order.h"
#include "worker/engine/data/token_batch.h"

namespace fp8::engine::data {

struct BatcherOptions {
  int64_t seq_len = 0;     // data.seq_len
  int64_t batch_size = 0;  // train.batch_size: sequences per optimizer step on each rank
  int64_t grad_accum = 1;  // train.grad_accum: micro-batches per step; divides batch_size
  uint64_t seed = 0;       // data.seed
  int rank = 0;
  int world_size = 1;
};

// The next global window is the index-th of epoch `epoch`'s order; index is always less
// than that epoch's size.
struct DataPosition {
  int64_t epoch = 0;
  int64_t index = 0;
  friend bool operator==(const DataPosition&, const DataPosition&) = default;
};

class Batcher {
 public:
  // `corpus` must outlive the batcher. Errors: options out of range (naming the field),
  // a training split too short for one window of seq_len + 1 tokens, or one with more
  // than 2^32 - 1 windows per epoch.
  static absl::StatusOr<Batcher> create(const Corpus& corpus, const BatcherOptions& options);

  // Rows of every micro-batch this rank receives: batch_size / grad_accum.
  int64_t micro_batch_size() const { return micro_batch_size_; }

  // This rank's next micro-batch; grad_accum of them make one optimizer step. The second
  // form reuses `batch`'s memory.
  TokenBatch next_micro_batch();
  void next_micro_batch(TokenBatch& batch);

  DataPosition position() const { return position_; }
  // Continues from `position` (from position(), possibly of another run or rank). An
  // index outside its epoch is InvalidArgument and changes nothing.
  absl::Status restore(const DataPosition& position);

 private:
  Batcher(const TokenStream& train_tokens, const BatcherOptions& options);

  // The order of `epoch`, built on first use. Two are kept: a micro-batch needs at most
  // the current epoch and the next one (unless an epoch is smaller than a micro-batch,
  // when rebuilding is cheap anyway). The reference is valid until the next call.
  const EpochOrder& order(int64_t epoch);
  void advance(DataPosition& position);

  TokenStream train_tokens_;
  BatcherOptions options_;
  int64_t micro_batch_size_;
  DataPosition position_;
  std::array<std::optional<EpochOrder>, 2> orders_;
};

}  // namespace fp8::engine::data
