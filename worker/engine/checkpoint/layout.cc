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

std::string StepDirectoryName(int64_t step) { return absl::StrFormat("step-%08d", step); }

std::optional<int64_t> ParseStepDirectoryName(std::string_view name) {
  if (!name.starts_with(kStepPrefix)) return std::nullopt;
  const std::string_view digits = name.substr(kStepPrefix.size());
  if (digits.empty()) return std::nullopt;
  for (char c : digits) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return std::nullopt;
  }
  int64_t step = 0;
  if (!absl::SimpleAtoi(ToAbsl(digits), &step)) return std::nullopt;
  // Only the canonical spelling: "step-200" or "step-000000200" would be a second
  // directory for the same step.
  if (StepDirectoryName(step) != name) return std::nullopt;
  return step;
}

std::string ShardFileName(int32_t rank, int32_t world_size) {
  return absl::StrFormat("rank-%05d-of-%05d.ckpt", rank, world_size);
}

std::filesystem::path StepDirectory(const std::filesystem::path& root, int64_t step) {
  return root / StepDirectoryName(step);
}

std::filesystem::path ShardPath(const std::filesystem::path& root, int64_t step, int32_t rank, int32_t world_size) {
  return StepDirectory(root, step) / ShardFileName(rank, world_size);
}

absl::StatusOr<std::filesystem::path> PrepareStepDirectory(const std::filesystem::path& root, int64_t step) {
  if (step < 0) return absl::InvalidArgumentError(Cat("checkpoint step ", step, " is negative"));
  std::filesystem::path dir = StepDirectory(root, step);
  if (absl::Status s = CreateDirectoriesDurably(dir); !s.ok()) return s;
  const std::filesystem::path marker = dir / kCommitMarkerFileName;
  if (std::remove(marker.c_str()) == 0) {
    if (absl::Status s = SyncDirectory(dir); !s.ok()) return s;
  } else if (errno != ENOENT) {
    return absl::ErrnoToStatus(errno, Cat(marker.string(), ": cannot remove stale commit marker"));
  }
  return dir;
}

}  // namespace fp8::checkpoint
