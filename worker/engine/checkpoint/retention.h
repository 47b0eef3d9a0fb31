// Deleting old checkpoints (CheckpointSpec.keep).
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

#include "absl/status/statusor.h"

namespace fp8::checkpoint {

struct PruneResult {
  std::vector<int64_t> kept;     // committed checkpoints kept, newest first
  std::vector<int64_t> deleted;  // step directories deleted, newest first
};

// Keeps the newest `keep` (>= 1) committed checkpoints and deletes older committed ones,
// plus incomplete or damaged step directories older than the newest committed one (left
// over from crashes, never to be completed). Step directories newer than the newest
// committed checkpoint are left alone: another process may be writing one right now.
//
// "Committed" here is ListCheckpoints' cheap check (marker valid, shards present with the
// recorded sizes); payloads are not re-read on every save. A directory is deleted marker
// first, so one whose deletion is interrupted reads as incomplete, never as committed.
absl::StatusOr<PruneResult> prune_checkpoints(const std::filesystem::path& root, int keep);

}  // namespace fp8::checkpoint
