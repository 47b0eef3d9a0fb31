// The COMMITTED marker: written into a step directory after every rank's shard is durable,
// it is what makes a checkpoint exist. It is a small text file, so a person can read it:
//
//   fp8-checkpoint-commit 1
//   step 200
//   world_size 2
//   shard rank-00000-of-00002.ckpt 1048712 0x1c2d3e4f
//   shard rank-00001-of-00002.ckpt 1048712 0x5a6b7c8d
//   crc32c 0x9e8f7a6b
//
// One `shard` line per rank, in rank order: file name, size in bytes, and the shard's
// checksum (ShardInfo::checksum). The last line is the CRC-32C of every byte before it,
// so a damaged marker is detected rather than half-believed.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/engine/checkpoint/shard_info.h"

namespace fp8::checkpoint {

inline constexpr uint32_t kCommitMarkerVersion = 1;
inline constexpr size_t kMaxCommitMarkerBytes = size_t{16} << 20;

struct CommitMarker {
  int64_t step = 0;
  int32_t world_size = 1;
  std::vector<ShardInfo> shards;  // shards[r] is rank r's

  bool operator==(const CommitMarker&) const = default;
};

// InvalidArgument unless there is one shard per rank, named shard_file_name(rank,
// world_size), in rank order, and step >= 0.
absl::Status check_commit_marker(const CommitMarker& marker);

std::string encode_commit_marker(const CommitMarker& marker);
// DataLoss for damaged text (message without the file's name), FailedPrecondition for a
// newer marker version.
absl::StatusOr<CommitMarker> parse_commit_marker(std::string_view text);

// Writes <step_dir>/COMMITTED durably (temp file, fsync, rename, fsync directory). The
// shards may come in any order (e.g. as ranks reported); they must be exactly one per
// rank, and `step_dir` must be the step's directory. The shard files themselves are not
// read here: rank 0 may not see them all, and every reader verifies them anyway.
absl::Status write_commit_marker(const std::filesystem::path& step_dir, int64_t step, int32_t world_size,
                               std::span<const ShardInfo> shards);

// Reads and checks <step_dir>/COMMITTED, including that its step is the directory's.
// NotFound if there is none (the checkpoint is incomplete); DataLoss if it is damaged.
absl::StatusOr<CommitMarker> read_commit_marker(const std::filesystem::path& step_dir);

}  // namespace fp8::checkpoint
