#include "worker/engine/checkpoint/committed_checkpoint.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "worker/engine/checkpoint/text.h"

namespace fp8::checkpoint {

std::filesystem::path CommittedCheckpoint::shard_path(int32_t rank) const {
  return dir / marker.shards.at(static_cast<size_t>(rank)).file_name;
}

absl::StatusOr<ShardReader> open_committed_shard(const CommittedCheckpoint& checkpoint, int32_t rank) {
  const CommitMarker& marker = checkpoint.marker;
  if (rank < 0 || rank >= marker.world_size) {
    return absl::InvalidArgumentError(cat("rank ", rank, " is outside checkpoint step ", checkpoint.step(),
                                          ", which has ", marker.world_size, " ranks"));
  }
  const ShardInfo& expected = marker.shards[static_cast<size_t>(rank)];
  absl::StatusOr<ShardReader> reader = ShardReader::open(checkpoint.shard_path(rank));
  if (!reader.ok()) return reader.status();
  const std::string where = reader->path().string();
  const ShardInfo actual = reader->info();
  if (actual.size_bytes != expected.size_bytes) {
    return absl::DataLossError(
        cat(where, ": ", actual.size_bytes, " bytes, but the commit marker says ", expected.size_bytes));
  }
  if (actual.checksum != expected.checksum) {
    return absl::DataLossError(absl::StrFormat(
        "%s: checksum 0x%08x differs from the commit marker's 0x%08x (the file changed after the commit)", where,
        actual.checksum, expected.checksum));
  }
  const ShardIdentity want{.step = checkpoint.step(), .rank = rank, .world_size = marker.world_size};
  const ShardIdentity& got = reader->identity();
  if (got != want) {
    return absl::DataLossError(cat(where, ": written as rank ", got.rank, " of ", got.world_size, " for step ",
                                   got.step, "; the commit marker expects rank ", want.rank, " of ", want.world_size,
                                   " for step ", want.step));
  }
  return reader;
}

absl::Status verify_checkpoint(const CommittedCheckpoint& checkpoint, Verification verification) {
  for (int32_t rank = 0; rank < checkpoint.marker.world_size; ++rank) {
    absl::StatusOr<ShardReader> reader = open_committed_shard(checkpoint, rank);
    if (!reader.ok()) return reader.status();
    if (verification == Verification::kPayloads) {
      if (absl::Status s = reader->verify_payloads(); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace fp8::checkpoint
