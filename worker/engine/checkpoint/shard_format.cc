#include "worker/engine/checkpoint/shard_format.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "worker/engine/checkpoint/byte_codec.h"
#include "worker/engine/checkpoint/crc32c.h"
#include "worker/engine/checkpoint/text.h"

namespace fp8::checkpoint {
namespace {

absl::Status index_malformed(std::string_view problem) { return absl::DataLossError(cat("index malformed: ", problem)); }

absl::Status check_version(uint32_t version, std::string_view where) {
  if (version == kShardFormatVersion) return absl::OkStatus();
  if (version > kShardFormatVersion) {
    return absl::FailedPreconditionError(cat(where, " says format version ", version, "; this build reads version ",
                                             kShardFormatVersion, " (written by a newer build?)"));
  }
  return absl::DataLossError(cat(where, " has invalid format version ", version));
}

absl::StatusOr<RecordInfo> decode_record(ByteCursor& cursor, uint32_t i) {
  RecordInfo record;
  uint8_t tag = 0;
  uint8_t rank = 0;
  if (!cursor.read_string(kMaxRecordNameBytes, record.name) || !cursor.read_u8(tag) || !cursor.read_u8(rank)) {
    return index_malformed(cat("record #", i, " is cut short"));
  }
  const std::optional<DType> dtype = d_type_from_tag(tag);
  if (!dtype) return index_malformed(cat("record '", record.name, "' has unknown dtype tag ", tag));
  record.dtype = *dtype;
  if (rank > kMaxRank) return index_malformed(cat("record '", record.name, "' has rank ", rank));
  record.shape.resize(rank);
  for (int64_t& dim : record.shape) {
    if (!cursor.read_i64(dim)) return index_malformed(cat("record '", record.name, "' is cut short"));
  }
  if (!cursor.read_u64(record.offset) || !cursor.read_u64(record.size_bytes) || !cursor.read_u32(record.crc32c)) {
    return index_malformed(cat("record '", record.name, "' is cut short"));
  }
  return record;
}

}  // namespace

std::string encode_shard_header() {
  std::string out(kShardHeaderMagic);
  append_u32(out, kShardFormatVersion);
  append_u32(out, crc32c(as_bytes(out)));
  return out;
}

std::string encode_shard_index(const ShardIndex& index) {
  std::string out;
  append_i64(out, index.identity.step);
  append_u32(out, static_cast<uint32_t>(index.identity.rank));
  append_u32(out, static_cast<uint32_t>(index.identity.world_size));
  append_u32(out, static_cast<uint32_t>(index.metadata.size()));
  for (const auto& [key, value] : index.metadata) {
    append_string(out, key);
    append_string(out, value);
  }
  append_u32(out, static_cast<uint32_t>(index.records.size()));
  for (const RecordInfo& record : index.records) {
    append_string(out, record.name);
    append_u8(out, static_cast<uint8_t>(record.dtype));
    append_u8(out, static_cast<uint8_t>(record.shape.size()));
    for (int64_t dim : record.shape) append_i64(out, dim);
    append_u64(out, record.offset);
    append_u64(out, record.size_bytes);
    append_u32(out, record.crc32c);
  }
  return out;
}

std::string encode_shard_footer(const ShardFooter& footer) {
  std::string out;
  append_u64(out, footer.index_offset);
  append_u64(out, footer.index_size);
  append_u32(out, footer.record_count);
  append_u32(out, footer.index_crc32c);
  append_u32(out, footer.format_version);
  append_u32(out, crc32c(as_bytes(out)));
  out.append(kShardFooterMagic);
  return out;
}

absl::Status check_shard_header(std::span<const std::byte> header) {
  if (header.size() != kShardHeaderBytes) return absl::DataLossError("header cut short");
  ByteCursor cursor(header);
  std::span<const std::byte> magic;
  uint32_t version = 0;
  uint32_t stored_crc = 0;
  (void)cursor.read_bytes(kShardHeaderMagic.size(), magic);
  (void)cursor.read_u32(version);
  (void)cursor.read_u32(stored_crc);
  if (std::string_view(reinterpret_cast<const char*>(magic.data()), magic.size()) != kShardHeaderMagic) {
    return absl::DataLossError("not a checkpoint shard (bad magic in header)");
  }
  const uint32_t computed = crc32c(header.first(12));
  if (stored_crc != computed) {
    return absl::DataLossError(
        absl::StrFormat("header checksum mismatch (stored 0x%08x, computed 0x%08x)", stored_crc, computed));
  }
  return check_version(version, "header");
}

absl::StatusOr<ShardFooter> decode_shard_footer(std::span<const std::byte> bytes) {
  if (bytes.size() != kShardFooterBytes) return absl::DataLossError("truncated: footer missing");
  const auto magic = bytes.last(kShardFooterMagic.size());
  if (std::string_view(reinterpret_cast<const char*>(magic.data()), magic.size()) != kShardFooterMagic) {
    return absl::DataLossError("truncated: footer missing (no end marker at the end of the file)");
  }
  ByteCursor cursor(bytes);
  ShardFooter footer;
  uint32_t stored_crc = 0;
  (void)cursor.read_u64(footer.index_offset);
  (void)cursor.read_u64(footer.index_size);
  (void)cursor.read_u32(footer.record_count);
  (void)cursor.read_u32(footer.index_crc32c);
  (void)cursor.read_u32(footer.format_version);
  (void)cursor.read_u32(stored_crc);
  const uint32_t computed = crc32c(bytes.first(28));
  if (stored_crc != computed) {
    return absl::DataLossError(
        absl::StrFormat("footer checksum mismatch (stored 0x%08x, computed 0x%08x)", stored_crc, computed));
  }
  if (absl::Status s = check_version(footer.format_version, "footer"); !s.ok()) return s;
  return footer;
}

absl::StatusOr<ShardIndex> decode_shard_index(std::span<const std::byte> bytes, uint64_t index_offset) {
  if (index_offset < kShardHeaderBytes) return index_malformed(cat("index offset ", index_offset));
  ByteCursor cursor(bytes);
  ShardIndex index;
  uint32_t rank = 0;
  uint32_t world_size = 0;
  uint32_t metadata_count = 0;
  if (!cursor.read_i64(index.identity.step) || !cursor.read_u32(rank) || !cursor.read_u32(world_size) ||
      !cursor.read_u32(metadata_count)) {
    return index_malformed("cut short");
  }
  if (index.identity.step < 0 || world_size < 1 || world_size > INT32_MAX || rank >= world_size) {
    return index_malformed(
        cat("impossible identity: step ", index.identity.step, ", rank ", rank, " of world size ", world_size));
  }
  index.identity.rank = static_cast<int32_t>(rank);
  index.identity.world_size = static_cast<int32_t>(world_size);

  for (uint32_t i = 0; i < metadata_count; ++i) {
    std::string key;
    std::string value;
    if (!cursor.read_string(kMaxMetadataKeyBytes, key) || !cursor.read_string(kMaxMetadataValueBytes, value)) {
      return index_malformed(cat("metadata entry #", i, " is cut short"));
    }
    if (!index.metadata.emplace(std::move(key), std::move(value)).second) {
      return index_malformed("duplicate metadata key");
    }
  }

  uint32_t record_count = 0;
  if (!cursor.read_u32(record_count)) return index_malformed("record count missing");
  // Each record takes at least 26 bytes of index; checking first keeps reserve() honest.
  if (record_count > cursor.remaining() / 26) return index_malformed(cat("record count ", record_count));
  index.records.reserve(record_count);
  std::set<std::string> names;
  uint64_t expected_offset = kShardHeaderBytes;
  for (uint32_t i = 0; i < record_count; ++i) {
    absl::StatusOr<RecordInfo> record = decode_record(cursor, i);
    if (!record.ok()) return record.status();
    absl::StatusOr<uint64_t> size = payload_bytes(record->dtype, record->shape, record->name);
    if (!size.ok()) return index_malformed(to_std(size.status().message()));
    if (*size != record->size_bytes) {
      return index_malformed(cat("record '", record->name, "' is ", record->size_bytes, " bytes but ",
                                d_type_name(record->dtype), " ", shape_to_string(record->shape), " needs ", *size));
    }
    if (record->dtype == DType::kBytes && record->shape.size() != 1) {
      return index_malformed(cat("bytes record '", record->name, "' has shape ", shape_to_string(record->shape),
                                "; bytes records are one-dimensional"));
    }
    if (record->offset != expected_offset || record->size_bytes > index_offset - record->offset) {
      return index_malformed(cat("record '", record->name, "' lies at ", record->offset, "+", record->size_bytes,
                                ", expected at ", expected_offset, " and before the index at ", index_offset));
    }
    expected_offset = record->offset + record->size_bytes;
    if (!names.insert(record->name).second) {
      return index_malformed(cat("record '", record->name, "' appears twice"));
    }
    index.records.push_back(*std::move(record));
  }
  if (expected_offset != index_offset) {
    return index_malformed(cat("payloads end at ", expected_offset, " but the index starts at ", index_offset));
  }
  if (cursor.remaining() != 0) return index_malformed(cat(cursor.remaining(), " stray bytes at its end"));
  return index;
}

}  // namespace fp8::checkpoint
