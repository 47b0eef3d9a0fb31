#include "worker/engine/data/batcher.h"

#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"

namespace fp8::engine::data {
namespace {

absl::Status check_options(const BatcherOptions& o, int64_t train_tokens) {
  auto invalid = [](auto&&... parts) { return absl::InvalidArgumentError(absl::StrCat(parts...)); };
  if (o.seq_len < 1) return invalid("data.seq_len: must be at least 1, got ", o.seq_len);
  if (o.batch_size < 1) return invalid("train.batch_size: must be at least 1, got ", o.batch_size);
  if (o.grad_accum < 1 || o.batch_size % o.grad_accum != 0) {
    return invalid("train.grad_accum: ", o.grad_accum, " does not divide train.batch_size (", o.batch_size, ")");
  }
  if (o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size) {
    return invalid("rank ", o.rank, " is not in a world of size ", o.world_size);
  }
  if (train_tokens < o.seq_len + 1) {
    return invalid("data.seq_len: training split has ", train_tokens,
                   " tokens, fewer than seq_len+1 = ", o.seq_len + 1);
  }
  if (max_windows_per_epoch(train_tokens, o.seq_len) > std::numeric_limits<uint32_t>::max()) {
    return invalid("data.seq_len: ", o.seq_len, " cuts the training split into more than 2^32 - 1 windows; ",
                   "raise it or use a smaller file");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Batcher> Batcher::create(const Corpus& corpus, const BatcherOptions& options) {
  const int64_t train_tokens = corpus.train_tokens().size();
  if (absl::Status status = check_options(options, train_tokens); !status.ok()) return status;
  return Batcher(corpus.train_tokens(), options);
}

Batcher::Batcher(const TokenStream& train_tokens, const BatcherOptions& options)
    : train_tokens_(train_tokens), options_(options), micro_batch_size_(options.batch_size / options.grad_accum) {}

TokenBatch Batcher::next_micro_batch() {
  TokenBatch batch;
  next_micro_batch(batch);
  return batch;
}

void Batcher::next_micro_batch(TokenBatch& batch) {
  batch.resize(micro_batch_size_, options_.seq_len);
  // The global micro-batch is micro_batch_size * world_size consecutive windows of the
  // stream; this rank's rows are those at offsets rank, rank + world_size, ...
  const int64_t world = options_.world_size;
  const int64_t global_windows = micro_batch_size_ * world;
  for (int64_t offset = 0; offset < global_windows; ++offset) {
    if (offset % world == options_.rank) {
      batch.fill_row(offset / world, train_tokens_, order(position_.epoch).start(position_.index));
    }
    advance(position_);
  }
}

absl::Status Batcher::restore(const DataPosition& position) {
  if (position.epoch < 0) {
    return absl::InvalidArgumentError(absl::StrCat("data position: epoch ", position.epoch, " is negative"));
  }
  const int64_t windows = order(position.epoch).size();
  if (position.index < 0 || position.index >= windows) {
    return absl::InvalidArgumentError(absl::StrCat("data position: index ", position.index, " is outside epoch ",
                                                   position.epoch, ", which has ", windows,
                                                   " windows (a checkpoint of another corpus or seq_len?)"));
  }
  position_ = position;
  return absl::OkStatus();
}

const EpochOrder& Batcher::order(int64_t epoch) {
  for (const std::optional<EpochOrder>& order : orders_) {
    if (order && order->epoch() == epoch) return *order;
  }
  // Fill an empty slot, or else replace the earlier epoch: the stream only moves forward.
  std::optional<EpochOrder>* slot = &orders_[0];
  if (orders_[0] && (!orders_[1] || orders_[1]->epoch() < orders_[0]->epoch())) slot = &orders_[1];
  slot->emplace(train_tokens_.size(), options_.seq_len, options_.seed, epoch);
  return **slot;
}

void Batcher::advance(DataPosition& position) {
  if (++position.index == order(position.epoch).size()) {
    ++position.epoch;
    position.index = 0;
  }
}

}  // namespace fp8::engine::data
