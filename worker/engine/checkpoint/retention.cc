#include "worker/engine/checkpoint/retention.h"

#include <cerrno>
#include <cstdio>
#include <optional>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "worker/engine/checkpoint/discovery.h"
#include "worker/engine/checkpoint/file_io.h"
#include "worker/engine/checkpoint/layout.h"
#include "worker/engine/checkpoint/text.h"

namespace fp8::checkpoint {
namespace {

absl::Status delete_step_directory(const std::filesystem::path& dir) {
  const std::filesystem::path marker = dir / kCommitMarkerFileName;
  if (std::remove(marker.c_str()) == 0) {
    if (absl::Status s = sync_directory(dir); !s.ok()) return s;
  } else if (errno != ENOENT) {
    return absl::ErrnoToStatus(errno, cat(marker.string(), ": cannot remove"));
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  if (ec) return absl::UnavailableError(cat(dir.string(), ": cannot delete: ", ec.message()));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PruneResult> prune_checkpoints(const std::filesystem::path& root, int keep) {
  if (keep < 1) return absl::InvalidArgumentError(cat("keep must be at least 1, got ", keep));
  absl::StatusOr<std::vector<CheckpointEntry>> entries = list_checkpoints(root);
  if (!entries.ok()) return entries.status();

  PruneResult result;
  std::optional<int64_t> newest_committed;
  for (const CheckpointEntry& entry : *entries) {  // newest first
    bool remove = false;
    if (entry.state == CheckpointState::kCommitted) {
      if (!newest_committed) newest_committed = entry.step;
      remove = result.kept.size() >= static_cast<size_t>(keep);
      if (!remove) result.kept.push_back(entry.step);
    } else {
      remove = newest_committed.has_value();  // entries are newest first: this one is older
    }
    if (!remove) continue;
    if (absl::Status s = delete_step_directory(entry.dir); !s.ok()) return s;
    result.deleted.push_back(entry.step);
  }
  if (!result.deleted.empty()) {
    if (absl::Status s = sync_directory(root); !s.ok()) return s;
  }
  return result;
}

}  // namespace fp8::checkpoint
