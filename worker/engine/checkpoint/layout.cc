#include "worker/engine/checkpoint/layout.h"

#include <cerrno>
#include <cstdio>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "worker/engine/checkpoint/file_io.h"
#include "worker/engine/checkpoint/text.h"

namespace fp8::checkpoint {
namespace {
constexpr std::string_view kStepPrefix = "step-";
}  // namespace

std::string step_directory_name(int64_t step) { return absl::StrFormat("step-%08d", step); }

std::optional<int64_t> parse_step_directory_name(std::string_view name) {
  if (!name.starts_with(kStepPrefix)) return std::nullopt;
  const std::string_view digits = name.substr(kStepPrefix.size());
  if (digits.empty()) return std::nullopt;
  for (char c : digits) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return std::nullopt;
  }
  int64_t step = 0;
  if (!absl::SimpleAtoi(to_absl(digits), &step)) return std::nullopt;
  // Only the canonical spelling: "step-200" or "step-000000200" would be a second
  // directory for the same step.
  if (step_directory_name(step) != name) return std::nullopt;
  return step;
}

std::string shard_file_name(int32_t rank, int32_t world_size) {
  return absl::StrFormat("rank-%05d-of-%05d.ckpt", rank, world_size);
}

std::filesystem::path step_directory(const std::filesystem::path& root, int64_t step) {
  return root / step_directory_name(step);
}

std::filesystem::path shard_path(const std::filesystem::path& root, int64_t step, int32_t rank, int32_t world_size) {
  return step_directory(root, step) / shard_file_name(rank, world_size);
}

absl::StatusOr<std::filesystem::path> prepare_step_directory(const std::filesystem::path& root, int64_t step) {
  if (step < 0) return absl::InvalidArgumentError(cat("checkpoint step ", step, " is negative"));
  std::filesystem::path dir = step_directory(root, step);
  if (absl::Status s = create_directories_durably(dir); !s.ok()) return s;
  const std::filesystem::path marker = dir / kCommitMarkerFileName;
  if (std::remove(marker.c_str()) == 0) {
    if (absl::Status s = sync_directory(dir); !s.ok()) return s;
  } else if (errno != ENOENT) {
    return absl::ErrnoToStatus(errno, cat(marker.string(), ": cannot remove stale commit marker"));
  }
  return dir;
}

}  // namespace fp8::checkpoint
