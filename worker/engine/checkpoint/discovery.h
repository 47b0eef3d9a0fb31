// Finding checkpoints under a root directory, and choosing the one to resume from.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/engine/checkpoint/commit_marker.h"
#include "worker/engine/checkpoint/committed_checkpoint.h"

namespace fp8::checkpoint {

enum class CheckpointState {
  kCommitted,   // valid marker; every shard it lists is present with the recorded size
  kIncomplete,  // no marker: being written, or its writer died before the commit
  kDamaged,     // marker unreadable or inconsistent, or a listed shard missing or resized
};
std::string_view checkpoint_state_name(CheckpointState state);

struct CheckpointEntry {
  int64_t step = 0;
  std::filesystem::path dir;
  CheckpointState state = CheckpointState::kIncomplete;
  std::string problem;                 // why it is not committed; empty when it is
  std::optional<CommitMarker> marker;  // set when committed
};

// Every step directory under `root` (other entries are ignored), newest first, classified
// by cheap checks: the marker is read and the shards are stat()ed, nothing more. A root
// that does not exist yet is an empty list, not an error; failures other than damage
// (e.g. permission denied) are errors.
absl::StatusOr<std::vector<CheckpointEntry>> list_checkpoints(const std::filesystem::path& root);

struct ResumePoint {
  // The checkpoint to resume from; nullopt when there is none (start from scratch).
  std::optional<CommittedCheckpoint> checkpoint;
  // One line per newer step directory that was passed over, newest first, saying why
  // (incomplete, damaged, failed verification). Worth logging: a skipped checkpoint means
  // lost progress or a damaged disk.
  std::vector<std::string> warnings;
};

// The newest checkpoint under `root` that passes `verification`, written by any number of
// ranks (a job may resume at another world size: train/checkpoint_rows.h). The default
// reads every byte: a few seconds per GB on resume buys the guarantee
// that a damaged checkpoint is never chosen while an older good one exists (payloads are
// checked again as they are loaded, which also catches damage after this check). Large
// jobs where every rank calls this may prefer kIndex, or have one rank choose and tell
// the others the step.
//
// Only damage (a missing or corrupt file) makes a checkpoint one to skip; other failures
// (permissions, I/O errors, a newer format version) are returned as errors.
absl::StatusOr<ResumePoint> find_latest_good(const std::filesystem::path& root,
                                           Verification verification = Verification::kPayloads);

}  // namespace fp8::checkpoint
