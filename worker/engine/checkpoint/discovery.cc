#include "worker/engine/checkpoint/discovery.h"

#include <algorithm>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "worker/engine/checkpoint/layout.h"
#include "worker/engine/checkpoint/text.h"

namespace fp8::checkpoint {
namespace {

// Damage to the checkpoint itself (a missing file, bad bytes) makes it one to skip. Any
// other failure (permissions, I/O errors, a newer format) is the caller's to see: skipping
// back to an older checkpoint because of a passing EIO would silently lose progress.
bool is_damage(const absl::Status& status) { return absl::IsDataLoss(status) || absl::IsNotFound(status); }

// The marker is valid: are the shards it lists there, with the sizes it recorded?
// Returns the problem, or "" when there is none.
absl::StatusOr<std::string> problem_with_shard_files(const std::filesystem::path& dir, const CommitMarker& marker) {
  for (const ShardInfo& shard : marker.shards) {
    const std::filesystem::path path = dir / shard.file_name;
    std::error_code ec;
    const uintmax_t size = std::filesystem::file_size(path, ec);
    if (ec == std::errc::no_such_file_or_directory) {
      return cat(path.string(), ": shard listed in the commit marker is missing");
    }
    if (ec) return absl::UnavailableError(cat(path.string(), ": cannot inspect: ", ec.message()));
    if (size != shard.size_bytes) {
      return cat(path.string(), ": ", size, " bytes, but the commit marker says ", shard.size_bytes,
                 " (truncated or replaced)");
    }
  }
  return std::string();
}

absl::StatusOr<CheckpointEntry> classify(int64_t step, std::filesystem::path dir) {
  CheckpointEntry entry{.step = step, .dir = std::move(dir)};
  absl::StatusOr<CommitMarker> marker = read_commit_marker(entry.dir);
  if (absl::IsNotFound(marker.status())) {
    entry.state = CheckpointState::kIncomplete;
    entry.problem = cat(entry.dir.string(), ": incomplete: no ", kCommitMarkerFileName, " marker");
    return entry;
  }
  if (!marker.ok() && !is_damage(marker.status())) return marker.status();
  if (!marker.ok()) {
    entry.state = CheckpointState::kDamaged;
    entry.problem = std::string(marker.status().message());
    return entry;
  }
  absl::StatusOr<std::string> problem = problem_with_shard_files(entry.dir, *marker);
  if (!problem.ok()) return problem.status();
  if (!problem->empty()) {
    entry.state = CheckpointState::kDamaged;
    entry.problem = *std::move(problem);
    return entry;
  }
  entry.state = CheckpointState::kCommitted;
  entry.marker = *std::move(marker);
  return entry;
}

}  // namespace

std::string_view checkpoint_state_name(CheckpointState state) {
  switch (state) {
    case CheckpointState::kCommitted:
      return "committed";
    case CheckpointState::kIncomplete:
      return "incomplete";
    case CheckpointState::kDamaged:
      return "damaged";
  }
  return "unknown";
}

absl::StatusOr<std::vector<CheckpointEntry>> list_checkpoints(const std::filesystem::path& root) {
  std::error_code ec;
  const std::filesystem::file_status root_status = std::filesystem::status(root, ec);
  if (root_status.type() == std::filesystem::file_type::not_found) return std::vector<CheckpointEntry>{};
  if (ec) return absl::UnavailableError(cat(root.string(), ": cannot inspect: ", ec.message()));
  if (root_status.type() != std::filesystem::file_type::directory) {
    return absl::FailedPreconditionError(cat(root.string(), ": checkpoint root is not a directory"));
  }

  std::vector<CheckpointEntry> entries;
  std::filesystem::directory_iterator it(root, ec);
  if (ec) return absl::UnavailableError(cat(root.string(), ": cannot list: ", ec.message()));
  for (; it != std::filesystem::directory_iterator(); it.increment(ec)) {
    const std::optional<int64_t> step = parse_step_directory_name(it->path().filename().string());
    std::error_code type_ec;
    if (!step || !it->is_directory(type_ec)) continue;
    absl::StatusOr<CheckpointEntry> entry = classify(*step, it->path());
    if (!entry.ok()) return entry.status();
    entries.push_back(*std::move(entry));
  }
  if (ec) return absl::UnavailableError(cat(root.string(), ": cannot list: ", ec.message()));
  std::sort(entries.begin(), entries.end(),
            [](const CheckpointEntry& a, const CheckpointEntry& b) { return a.step > b.step; });
  return entries;
}

absl::StatusOr<ResumePoint> find_latest_good(const std::filesystem::path& root, Verification verification) {
  absl::StatusOr<std::vector<CheckpointEntry>> entries = list_checkpoints(root);
  if (!entries.ok()) return entries.status();

  ResumePoint result;
  for (CheckpointEntry& entry : *entries) {
    if (entry.state != CheckpointState::kCommitted) {
      result.warnings.push_back(cat("skipped checkpoint step ", entry.step, ": ", entry.problem));
      continue;
    }
    CommittedCheckpoint checkpoint{.dir = std::move(entry.dir), .marker = *std::move(entry.marker)};
    if (absl::Status s = verify_checkpoint(checkpoint, verification); !s.ok()) {
      if (!is_damage(s)) return s;
      result.warnings.push_back(cat("skipped checkpoint step ", entry.step, ": ", s.message()));
      continue;
    }
    result.checkpoint = std::move(checkpoint);
    return result;
  }
  return result;
}

}  // namespace fp8::checkpoint
