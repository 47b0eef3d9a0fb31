// Where checkpoints live on disk:
//
//   <root>/step-00000200/rank-00000-of-00002.ckpt   rank 0's shard (shard_format.h)
//   <root>/step-00000200/rank-00001-of-00002.ckpt   rank 1's shard
//   <root>/step-00000200/COMMITTED                   written last (commit_marker.h)
//
// A step directory without a valid COMMITTED marker is incomplete: being written, or its
// writer died. Files ending in ".tmp" are writes in progress and are never read.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace fp8::checkpoint {

inline constexpr std::string_view kCommitMarkerFileName = "COMMITTED";

// "step-00000200": zero-padded to 8 digits so names sort like steps in a listing; larger
// steps simply take more digits.
std::string step_directory_name(int64_t step);
// The step of a name StepDirectoryName produced; nullopt for any other name.
std::optional<int64_t> parse_step_directory_name(std::string_view name);

// "rank-00000-of-00002.ckpt".
std::string shard_file_name(int32_t rank, int32_t world_size);

std::filesystem::path step_directory(const std::filesystem::path& root, int64_t step);
std::filesystem::path shard_path(const std::filesystem::path& root, int64_t step, int32_t rank, int32_t world_size);

// Makes <root>/step-N/ ready for shards to be written: creates it (and root) durably and
// removes a COMMITTED marker left by an earlier attempt at the same step, so the
// directory reads as incomplete while its shards are being replaced. Safe to call from
// every rank, as long as the marker is written only after all ranks have finished.
absl::StatusOr<std::filesystem::path> prepare_step_directory(const std::filesystem::path& root, int64_t step);

}  // namespace fp8::checkpoint
