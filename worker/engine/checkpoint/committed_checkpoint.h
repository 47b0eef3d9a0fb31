// A checkpoint with a valid commit marker, and the checks that tie its shard files to that
// marker: a shard is the one the marker recorded only if its size, its checksum and its
// identity (step, rank, world size) all agree.
#pragma once

#include <cstdint>
#include <filesystem>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/engine/checkpoint/commit_marker.h"
#include "worker/engine/checkpoint/shard_reader.h"

namespace fp8::checkpoint {

struct CommittedCheckpoint {
  std::filesystem::path dir;  // <root>/step-N
  CommitMarker marker;

  int64_t step() const { return marker.step; }
  int32_t world_size() const { return marker.world_size; }
  std::filesystem::path shard_path(int32_t rank) const;
};

// How much of a checkpoint to read before calling it good.
enum class Verification {
  // Shard headers, footers and indexes, and their sizes and checksums against the marker.
  // Reads kilobytes; payloads are still checked when they are loaded.
  kIndex,
  // All of kIndex, plus every payload's checksum: reads the whole checkpoint.
  kPayloads,
};

// Opens rank `rank`'s shard, checking it against the marker (size, checksum, identity).
// This is how a rank loads its shard on resume; payloads are checked as they are read.
absl::StatusOr<ShardReader> open_committed_shard(const CommittedCheckpoint& checkpoint, int32_t rank);

// Checks every shard of `checkpoint` as `verification` says; the first problem found is
// the error.
absl::Status verify_checkpoint(const CommittedCheckpoint& checkpoint, Verification verification);

}  // namespace fp8::checkpoint
