// Writing a checkpoint: one rank's shard, and the whole thing for a single process.
//
// Distributed save (the coordination between ranks lives elsewhere):
//   every rank:  ShardInfo info = *write_rank_shard(root, step, rank, world, write_records);
//   gather the ShardInfos on rank 0 (or rank 0 calls ReadShardInfo on each file); if
//   every rank succeeded:
//   rank 0:      write_commit_marker(step_directory(root, step), step, world, infos);
// If any rank failed, no marker is written: the step directory stays incomplete, resume
// ignores it, and PruneCheckpoints removes it once a newer checkpoint is committed.
#pragma once

#include <cstdint>
#include <filesystem>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/engine/checkpoint/committed_checkpoint.h"
#include "worker/engine/checkpoint/shard_info.h"
#include "worker/engine/checkpoint/shard_writer.h"

namespace fp8::checkpoint {

// Fills a shard with the caller's records and metadata.
using RecordWriterFn = absl::FunctionRef<absl::Status(ShardWriter&)>;

// Prepares <root>/step-N (PrepareStepDirectory), writes this rank's shard through
// `write_records` and finishes it durably. An error from `write_records` is returned as
// is, and the partial shard is deleted.
absl::StatusOr<ShardInfo> write_rank_shard(const std::filesystem::path& root, int64_t step, int32_t rank,
                                         int32_t world_size, RecordWriterFn write_records);

// The single-process case: WriteRankShard for rank 0 of 1, then the commit marker.
absl::StatusOr<CommittedCheckpoint> save_single_process_checkpoint(const std::filesystem::path& root, int64_t step,
                                                                RecordWriterFn write_records);

}  // namespace fp8::checkpoint
