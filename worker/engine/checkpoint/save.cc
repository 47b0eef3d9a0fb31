#include "worker/engine/checkpoint/save.h"

#include "worker/engine/checkpoint/commit_marker.h"
#include "worker/engine/checkpoint/layout.h"

namespace fp8::checkpoint {

absl::StatusOr<ShardInfo> write_rank_shard(const std::filesystem::path& root, int64_t step, int32_t rank,
                                         int32_t world_size, RecordWriterFn write_records) {
  absl::StatusOr<std::filesystem::path> dir = prepare_step_directory(root, step);
  if (!dir.ok()) return dir.status();
  absl::StatusOr<ShardWriter> writer = ShardWriter::create(*dir / shard_file_name(rank, world_size),
                                                           {.step = step, .rank = rank, .world_size = world_size});
  if (!writer.ok()) return writer.status();
  if (absl::Status s = write_records(*writer); !s.ok()) return s;  // ~ShardWriter deletes the .tmp
  return writer->finish();
}

absl::StatusOr<CommittedCheckpoint> save_single_process_checkpoint(const std::filesystem::path& root, int64_t step,
                                                                RecordWriterFn write_records) {
  absl::StatusOr<ShardInfo> shard = write_rank_shard(root, step, /*rank=*/0, /*world_size=*/1, write_records);
  if (!shard.ok()) return shard.status();
  CommittedCheckpoint checkpoint{.dir = step_directory(root, step),
                                 .marker = {.step = step, .world_size = 1, .shards = {*shard}}};
  if (absl::Status s = write_commit_marker(checkpoint.dir, step, 1, checkpoint.marker.shards); !s.ok()) return s;
  return checkpoint;
}

}  // namespace fp8::checkpoint
