// Rows of a checkpoint's parameter-shaped records (params/, optim/exp_avg/,
// optim/exp_avg_sq/), whatever world size wrote it. One process writes each whole tensor;
// FSDP's rank r writes rows [r · rows_per_rank, (r + 1) · rows_per_rank) of it, flattened
// and padded with zero rows (fsdp/shard_layout.h). rows() reads any range of the whole
// tensor's rows from the shards that hold them and no others: how a job resumes at another
// world size, and how tools put a model back together.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/engine/checkpoint/committed_checkpoint.h"
#include "worker/engine/checkpoint/shard_reader.h"
#include "worker/engine/tensor/tensor.h"

namespace fp8::engine {

class CheckpointRows {
 public:
  // Opens every shard of `checkpoint` (their indexes; payloads are checked as rows() reads
  // them).
  static absl::StatusOr<CheckpointRows> open(const checkpoint::CommittedCheckpoint& checkpoint);

  int world_size() const { return static_cast<int>(shards_.size()); }
  // What every rank writes alike (step, delayed-scaling state, data position, seeds,
  // metadata) is read from the first shard.
  const checkpoint::ShardReader& first() const { return shards_.front(); }

  // Rows [begin, end) of `record`, written for a tensor of `shape` (shape[0] rows, the rest
  // one row), row-major. InvalidArgument for a range outside the tensor; the shard
  // reader's errors for a record that is missing, damaged or of another shape.
  absl::StatusOr<std::vector<float>> rows(const std::string& record, const TensorShape& shape, int64_t begin,
                                          int64_t end) const;

  // Whether `record` was written for a tensor of `shape` at this checkpoint's world size
  // (whole, or FSDP's flat row blocks).
  bool holds(const std::string& record, const TensorShape& shape) const;

 private:
  explicit CheckpointRows(std::vector<checkpoint::ShardReader> shards) : shards_(std::move(shards)) {}
  std::vector<checkpoint::ShardReader> shards_;
};

}  // namespace fp8::engine
