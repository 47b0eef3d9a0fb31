// The shard file format, version 1. One file per rank per checkpoint:
//
//   offset 0     header   "FP8-CKPT" | format_version u32 | crc32c(previous 12 bytes) u32
//   offset 16    payloads each record's bytes, back to back, in the order written
//   index_offset index    step i64 | rank u32 | world_size u32
//                         metadata_count u32 | { key str | value str } * metadata_count
//                         record_count u32   | { name str | dtype u8 | rank u8 |
//                                                dims i64 * rank | offset u64 |
//                                                size u64 | crc32c u32 } * record_count
//   last 40 B    footer   index_offset u64 | index_size u64 | record_count u32 |
//                         index crc32c u32 | format_version u32 |
//                         crc32c(previous 28 bytes) u32 | "CKPT-END"
//
// All integers little-endian; `str` is a u32 length and that many bytes; payloads are the
// tensors' bytes as they lie in memory (row-major, little-endian).
//
// Why the index sits at the end rather than before each payload: the writer streams a
// payload straight from the caller's memory and learns its checksum only afterwards, and
// the reader finds any record with one read of the index instead of a scan. Every byte is
// covered by a checksum (header, each payload, index, footer), and the footer's magic at
// the very end plus the size equation header + payloads + index + footer == file size
// detect truncation.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/engine/checkpoint/record_info.h"
#include "worker/engine/checkpoint/shard_info.h"

namespace fp8::checkpoint {

inline constexpr uint32_t kShardFormatVersion = 1;
inline constexpr std::string_view kShardHeaderMagic = "FP8-CKPT";
inline constexpr std::string_view kShardFooterMagic = "CKPT-END";
inline constexpr uint64_t kShardHeaderBytes = 16;
inline constexpr uint64_t kShardFooterBytes = 40;

// Caps that keep a corrupt length from turning into a huge allocation.
inline constexpr size_t kMaxMetadataKeyBytes = 4096;
inline constexpr size_t kMaxMetadataValueBytes = size_t{16} << 20;

struct ShardIndex {
  ShardIdentity identity;
  std::map<std::string, std::string> metadata;  // free-form: job name, recipe, ...
  std::vector<RecordInfo> records;              // in file order
};

struct ShardFooter {
  uint64_t index_offset = 0;
  uint64_t index_size = 0;
  uint32_t record_count = 0;
  uint32_t index_crc32c = 0;
  uint32_t format_version = kShardFormatVersion;
};

std::string encode_shard_header();
std::string encode_shard_index(const ShardIndex& index);
std::string encode_shard_footer(const ShardFooter& footer);

// Decoders return DataLoss (or FailedPrecondition for a newer format version) with a
// message that does not name the file; the reader prefixes the path.
absl::Status check_shard_header(std::span<const std::byte> header);
absl::StatusOr<ShardFooter> decode_shard_footer(std::span<const std::byte> footer);
// Also checks the index against the file's layout: records back to back from the end of
// the header up to `index_offset`, sizes matching dtype and shape, names unique, identity
// sensible (0 <= rank < world_size, step >= 0).
absl::StatusOr<ShardIndex> decode_shard_index(std::span<const std::byte> index, uint64_t index_offset);

}  // namespace fp8::checkpoint
