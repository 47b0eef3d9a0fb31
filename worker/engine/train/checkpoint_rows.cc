#include "worker/engine/train/checkpoint_rows.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "worker/engine/fsdp/shard_layout.h"

namespace fp8::engine {

absl::StatusOr<CheckpointRows> CheckpointRows::open(const checkpoint::CommittedCheckpoint& checkpoint) {
  std::vector<checkpoint::ShardReader> shards;
  for (int r = 0; r < checkpoint.world_size(); ++r) {
    absl::StatusOr<checkpoint::ShardReader> shard = checkpoint::open_committed_shard(checkpoint, r);
    if (!shard.ok()) return shard.status();
    shards.push_back(*std::move(shard));
  }
  if (shards.empty()) return absl::DataLossError(absl::StrCat(checkpoint.dir.string(), ": no shards"));
  return CheckpointRows(std::move(shards));
}

absl::StatusOr<std::vector<float>> CheckpointRows::rows(const std::string& record, const TensorShape& shape,
                                                        int64_t begin, int64_t end) const {
  const fsdp::ShardLayout layout = fsdp::shard_layout(shape, world_size());
  if (begin < 0 || end < begin || end > layout.rows) {
    return absl::InvalidArgumentError(
        absl::StrCat(record, ": rows [", begin, ", ", end, ") of a tensor of ", layout.rows, " rows"));
  }
  std::vector<float> out(static_cast<size_t>((end - begin) * layout.row_elements));
  std::vector<float> shard(static_cast<size_t>(layout.shard_elements()));
  for (int q = 0; q < world_size(); ++q) {
    const int64_t first = static_cast<int64_t>(q) * layout.rows_per_rank;
    const int64_t lo = std::max(begin, first), hi = std::min(end, first + layout.real_rows_of(q));
    if (lo >= hi) continue;
    const checkpoint::ShardReader& reader = shards_[static_cast<size_t>(q)];
    // A single process saves whole tensors; FSDP, even of one rank, flat slices. Either
    // way the values are the rows in order.
    const checkpoint::RecordInfo* info = reader.find_record(record);
    const bool whole = world_size() == 1 && info != nullptr && info->shape == shape;
    const checkpoint::Shape stored = whole ? shape : checkpoint::Shape{layout.shard_elements()};
    if (absl::Status s = reader.read_tensor<float>(record, shard, stored); !s.ok()) return s;
    std::copy(shard.begin() + (lo - first) * layout.row_elements, shard.begin() + (hi - first) * layout.row_elements,
              out.begin() + (lo - begin) * layout.row_elements);
  }
  return out;
}

bool CheckpointRows::holds(const std::string& record, const TensorShape& shape) const {
  const checkpoint::RecordInfo* info = shards_.front().find_record(record);
  if (info == nullptr) return false;
  if (world_size() == 1 && info->shape == checkpoint::Shape(shape.begin(), shape.end())) return true;
  return info->shape == checkpoint::Shape{fsdp::shard_layout(shape, world_size()).shard_elements()};
}

}  // namespace fp8::engine
