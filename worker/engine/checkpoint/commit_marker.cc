#include "worker/engine/checkpoint/commit_marker.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "worker/engine/checkpoint/byte_codec.h"
#include "worker/engine/checkpoint/crc32c.h"
#include "worker/engine/checkpoint/file_io.h"
#include "worker/engine/checkpoint/layout.h"
#include "worker/engine/checkpoint/text.h"

namespace fp8::checkpoint {
namespace {

constexpr absl::string_view kFirstWord = "fp8-checkpoint-commit";
constexpr absl::string_view kChecksumWord = "crc32c";

absl::Status damaged(std::string_view problem) { return absl::DataLossError(cat("commit marker damaged: ", problem)); }

// "0x1234abcd" -> 0x1234abcd; exactly what EncodeCommitMarker writes.
bool parse_hex32(absl::string_view text, uint32_t& value) {
  if (text.size() != 10 || text.substr(0, 2) != "0x") return false;
  return absl::SimpleHexAtoi(text.substr(2), &value);
}

std::string hex32(uint32_t value) { return absl::StrFormat("0x%08x", value); }

// The step a step directory stands for, tolerating a trailing separator.
std::optional<int64_t> step_of_directory(const std::filesystem::path& step_dir) {
  std::filesystem::path name = step_dir.filename();
  if (name.empty()) name = step_dir.parent_path().filename();
  return parse_step_directory_name(name.string());
}

}  // namespace

absl::Status check_commit_marker(const CommitMarker& marker) {
  if (marker.step < 0) return absl::InvalidArgumentError(cat("commit marker: step ", marker.step));
  if (marker.world_size < 1) {
    return absl::InvalidArgumentError(cat("commit marker: world size ", marker.world_size));
  }
  if (marker.shards.size() != static_cast<size_t>(marker.world_size)) {
    return absl::InvalidArgumentError(cat("commit marker for step ", marker.step, ": ", marker.shards.size(),
                                          " shards for world size ", marker.world_size));
  }
  for (int32_t rank = 0; rank < marker.world_size; ++rank) {
    const std::string expected = shard_file_name(rank, marker.world_size);
    if (marker.shards[static_cast<size_t>(rank)].file_name != expected) {
      return absl::InvalidArgumentError(cat("commit marker for step ", marker.step, ": shard ", rank, " is '",
                                            marker.shards[static_cast<size_t>(rank)].file_name, "', expected '",
                                            expected, "'"));
    }
  }
  return absl::OkStatus();
}

std::string encode_commit_marker(const CommitMarker& marker) {
  std::string text = cat(kFirstWord, " ", kCommitMarkerVersion, "\n", "step ", marker.step, "\n", "world_size ",
                         marker.world_size, "\n");
  for (const ShardInfo& shard : marker.shards) {
    text += cat("shard ", shard.file_name, " ", shard.size_bytes, " ", hex32(shard.checksum), "\n");
  }
  text += cat(kChecksumWord, " ", hex32(crc32c(as_bytes(text))), "\n");
  return text;
}

absl::StatusOr<CommitMarker> parse_commit_marker(std::string_view std_text) {
  const absl::string_view text = to_absl(std_text);  // absl's splitting and parsing want absl's type
  // The checksum line comes last; check it before believing anything else.
  if (text.size() < 2 || text.back() != '\n') return damaged("cut short (no final newline)");
  const size_t last_line_start = text.rfind('\n', text.size() - 2);
  const size_t body_size = last_line_start == absl::string_view::npos ? 0 : last_line_start + 1;
  const absl::string_view body = text.substr(0, body_size);
  const std::vector<absl::string_view> checksum_words =
      absl::StrSplit(text.substr(body_size, text.size() - body_size - 1), ' ');
  uint32_t stored = 0;
  if (checksum_words.size() != 2 || checksum_words[0] != kChecksumWord || !parse_hex32(checksum_words[1], stored)) {
    return damaged("cut short (no checksum line at its end)");
  }
  const uint32_t computed = crc32c(as_bytes(to_std(body)));
  if (stored != computed) {
    return damaged(absl::StrFormat("checksum mismatch (stored 0x%08x, computed 0x%08x)", stored, computed));
  }

  std::vector<absl::string_view> lines = absl::StrSplit(body, '\n');
  lines.pop_back();  // body ends with '\n': the last piece is empty
  if (lines.size() < 3) return damaged("fewer than 3 lines");
  auto words_of = [](absl::string_view line) { return std::vector<absl::string_view>(absl::StrSplit(line, ' ')); };

  const std::vector<absl::string_view> first = words_of(lines[0]);
  uint32_t version = 0;
  if (first.size() != 2 || first[0] != kFirstWord || !absl::SimpleAtoi(first[1], &version)) {
    return damaged(cat("first line is '", lines[0], "'"));
  }
  if (version != kCommitMarkerVersion) {
    return absl::FailedPreconditionError(
        cat("commit marker version ", version, "; this build reads version ", kCommitMarkerVersion));
  }
  CommitMarker marker;
  const std::vector<absl::string_view> step = words_of(lines[1]);
  if (step.size() != 2 || step[0] != "step" || !absl::SimpleAtoi(step[1], &marker.step)) {
    return damaged(cat("line 2 is '", lines[1], "'"));
  }
  const std::vector<absl::string_view> world = words_of(lines[2]);
  if (world.size() != 2 || world[0] != "world_size" || !absl::SimpleAtoi(world[1], &marker.world_size)) {
    return damaged(cat("line 3 is '", lines[2], "'"));
  }
  for (size_t i = 3; i < lines.size(); ++i) {
    const std::vector<absl::string_view> words = words_of(lines[i]);
    ShardInfo shard;
    if (words.size() != 4 || words[0] != "shard" || !absl::SimpleAtoi(words[2], &shard.size_bytes) ||
        !parse_hex32(words[3], shard.checksum)) {
      return damaged(cat("line ", i + 1, " is '", lines[i], "'"));
    }
    shard.file_name = std::string(words[1]);
    marker.shards.push_back(std::move(shard));
  }
  if (absl::Status s = check_commit_marker(marker); !s.ok()) return damaged(to_std(s.message()));
  return marker;
}

absl::Status write_commit_marker(const std::filesystem::path& step_dir, int64_t step, int32_t world_size,
                               std::span<const ShardInfo> shards) {
  if (step_of_directory(step_dir) != step) {
    return absl::InvalidArgumentError(
        cat(step_dir.string(), ": not the directory of step ", step, " (expected ", step_directory_name(step), ")"));
  }
  CommitMarker marker{.step = step, .world_size = world_size, .shards = {shards.begin(), shards.end()}};
  // Zero-padded names of one world size sort in rank order.
  std::sort(marker.shards.begin(), marker.shards.end(),
            [](const ShardInfo& a, const ShardInfo& b) { return a.file_name < b.file_name; });
  if (absl::Status s = check_commit_marker(marker); !s.ok()) {
    return absl::InvalidArgumentError(cat(step_dir.string(), ": ", s.message()));
  }
  return write_file_durably(step_dir / kCommitMarkerFileName, encode_commit_marker(marker));
}

absl::StatusOr<CommitMarker> read_commit_marker(const std::filesystem::path& step_dir) {
  const std::filesystem::path path = step_dir / kCommitMarkerFileName;
  absl::StatusOr<std::string> text = read_small_file(path, kMaxCommitMarkerBytes);
  if (!text.ok()) return text.status();
  absl::StatusOr<CommitMarker> marker = parse_commit_marker(*text);
  if (!marker.ok()) return absl::Status(marker.status().code(), cat(path.string(), ": ", marker.status().message()));
  if (std::optional<int64_t> dir_step = step_of_directory(step_dir); dir_step != marker->step) {
    return absl::DataLossError(cat(path.string(), ": says step ", marker->step, " but lies in the directory of step ",
                                   dir_step ? cat(*dir_step) : std::string("(none)")));
  }
  return marker;
}

}  // namespace fp8::checkpoint
