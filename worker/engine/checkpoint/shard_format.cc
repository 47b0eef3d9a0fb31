#include "worker/engine/checkpoint/shard_format.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "worker/engine/checkpoint/byte_codec.h"
#include "worker/engine/checkpoint/crc32c.h"
#include "worker/engine/checkpoint/text.h"

namespace fp8::checkpoint {
namespace {

absl::Status IndexMalformed(std::string_view problem) { return absl::DataLossError(Cat("index malformed: ", problem)); }

absl::Status CheckVersion(uint32_t version, std::string_view where) {
  if (version == kShardFormatVersion) return absl::OkStatus();
  if (version > kShardFormatVersion) {
    return absl::FailedPreconditionError(Cat(where, " says format version ", version, "; this build reads version ",
                                             kShardFormatVersion, " (written by a newer build?)"));
  }
  return absl::DataLossError(Cat(where, " has invalid format version ", version));
}

absl::StatusOr<RecordInfo> DecodeRecord(ByteCursor& cursor, uint32_t i) {
  RecordInfo record;
  uint8_t tag = 0;
  uint8_t rank = 0;
  if (!cursor.ReadString(kMaxRecordNameBytes, record.name) || !cursor.ReadU8(tag) || !cursor.ReadU8(rank)) {
    return IndexMalformed(Cat("record #", i, " is cut short"));
  }
  const std::optional<DType> dtype = DTypeFromTag(tag);
  if (!dtype) return IndexMalformed(Cat("record '", record.name, "' has unknown dtype tag ", tag));
  record.dtype = *dtype;
  if (rank > kMaxRank) return IndexMalformed(Cat("record '", record.name, "' has rank ", rank));
  record.shape.resize(rank);
  for (int64_t& dim : record.shape) {
    if (!cursor.ReadI64(dim)) return IndexMalformed(Cat("record '", record.name, "' is cut short"));
  }
  if (!cursor.ReadU64(record.offset) || !cursor.ReadU64(record.size_bytes) || !cursor.ReadU32(record.crc32c)) {
    return IndexMalformed(Cat("record '", record.name, "' is cut short"));
  }
  return record;
}

}  // namespace

std::string EncodeShardHeader() {
  std::string out(kShardHeaderMagic);
  AppendU32(out, kShardFormatVersion);
  AppendU32(out, Crc32c(AsBytes(out)));
  return out;
}

std::string EncodeShardIndex(const ShardIndex& index) {
  std::string out;
  AppendI64(out, index.identity.step);
  AppendU32(out, static_cast<uint32_t>(index.identity.rank));
  AppendU32(out, static_cast<uint32_t>(index.identity.world_size));
  AppendU32(out, static_cast<uint32_t>(index.metadata.size()));
  for (const auto& [key, value] : index.metadata) {
    AppendString(out, key);
    AppendString(out, value);
  }
  AppendU32(out, static_cast<uint32_t>(index.records.size()));
  for (const RecordInfo& record : index.records) {
    AppendString(out, record.name);
    AppendU8(out, static_cast<uint8_t>(record.dtype));
    AppendU8(out, static_cast<uint8_t>(record.shape.size()));
    for (int64_t dim : record.shape) AppendI64(out, dim);
    AppendU64(out, record.offset);
    AppendU64(out, record.size_bytes);
    AppendU32(out, record.crc32c);
  }
  return out;
}

std::string EncodeShardFooter(const ShardFooter& footer) {
  std::string out;
  AppendU64(out, footer.index_offset);
  AppendU64(out, footer.index_size);
  AppendU32(out, footer.record_count);
  AppendU32(out, footer.index_crc32c);
  AppendU32(out, footer.format_version);
  AppendU32(out, Crc32c(AsBytes(out)));
  out.append(kShardFooterMagic);
  return out;
}

absl::Status CheckShardHeader(std::span<const std::byte> header) {
  if (header.size() != kShardHeaderBytes) return absl::DataLossError("header cut short");
  ByteCursor cursor(header);
  std::span<const std::byte> magic;
  uint32_t version = 0;
  uint32_t stored_crc = 0;
  (void)cursor.ReadBytes(kShardHeaderMagic.size(), magic);
  (void)cursor.ReadU32(version);
  (void)cursor.ReadU32(stored_crc);
  if (std::string_view(reinterpret_cast<const char*>(magic.data()), magic.size()) != kShardHeaderMagic) {
    return absl::DataLossError("not a checkpoint shard (bad magic in header)");
  }
  const uint32_t computed = Crc32c(header.first(12));
  if (stored_crc != computed) {
    return absl::DataLossError(
        absl::StrFormat("header checksum mismatch (stored 0x%08x, computed 0x%08x)", stored_crc, computed));
  }
  return CheckVersion(version, "header");
}

absl::StatusOr<ShardFooter> DecodeShardFooter(std::span<const std::byte> bytes) {
  if (bytes.size() != kShardFooterBytes) return absl::DataLossError("truncated: footer missing");
  const auto magic = bytes.last(kShardFooterMagic.size());
  if (std::string_view(reinterpret_cast<const char*>(magic.data()), magic.size()) != kShardFooterMagic) {
    return absl::DataLossError("truncated: footer missing (no end marker at the end of the file)");
  }
  ByteCursor cursor(bytes);
  ShardFooter footer;
  uint32_t stored_crc = 0;
  (void)cursor.ReadU64(footer.index_offset);
  (void)cursor.ReadU64(footer.index_size);
  (void)cursor.ReadU32(footer.record_count);
  (void)cursor.ReadU32(footer.index_crc32c);
  (void)cursor.ReadU32(footer.format_version);
  (void)cursor.ReadU32(stored_crc);
  const uint32_t computed = Crc32c(bytes.first(28));
  if (stored_crc != computed) {
    return absl::DataLossError(
        absl::StrFormat("footer checksum mismatch (stored 0x%08x, computed 0x%08x)", stored_crc, computed));
  }
  if (absl::Status s = CheckVersion(footer.format_version, "footer"); !s.ok()) return s;
  return footer;
}

absl::StatusOr<ShardIndex> DecodeShardIndex(std::span<const std::byte> bytes, uint64_t index_offset) {
  if (index_offset < kShardHeaderBytes) return IndexMalformed(Cat("index offset ", index_offset));
  ByteCursor cursor(bytes);
  ShardIndex index;
  uint32_t rank = 0;
  uint32_t world_size = 0;
  uint32_t metadata_count = 0;
  if (!cursor.ReadI64(index.identity.step) || !cursor.ReadU32(rank) || !cursor.ReadU32(world_size) ||
      !cursor.ReadU32(metadata_count)) {
    return IndexMalformed("cut short");
  }
  if (index.identity.step < 0 || world_size < 1 || world_size > INT32_MAX || rank >= world_size) {
    return IndexMalformed(
        Cat("impossible identity: step ", index.identity.step, ", rank ", rank, " of world size ", world_size));
  }
  index.identity.rank = static_cast<int32_t>(rank);
  index.identity.world_size = static_cast<int32_t>(world_size);

  for (uint32_t i = 0; i < metadata_count; ++i) {
    std::string key;
    std::string value;
    if (!cursor.ReadString(kMaxMetadataKeyBytes, key) || !cursor.ReadString(kMaxMetadataValueBytes, value)) {
      return IndexMalformed(Cat("metadata entry #", i, " is cut short"));
    }
    if (!index.metadata.emplace(std::move(key), std::move(value)).second) {
      return IndexMalformed("duplicate metadata key");
    }
  }

  uint32_t record_count = 0;
  if (!cursor.ReadU32(record_count)) return IndexMalformed("record count missing");
  // Each record takes at least 26 bytes of index; checking first keeps reserve() honest.
  if (record_count > cursor.remaining() / 26) return IndexMalformed(Cat("record count ", record_count));
  index.records.reserve(record_count);
  std::set<std::string> names;
  uint64_t expected_offset = kShardHeaderBytes;
  for (uint32_t i = 0; i < record_count; ++i) {
    absl::StatusOr<RecordInfo> record = DecodeRecord(cursor, i);
    if (!record.ok()) return record.status();
    absl::StatusOr<uint64_t> size = PayloadBytes(record->dtype, record->shape, record->name);
    if (!size.ok()) return IndexMalformed(ToStd(size.status().message()));
    if (*size != record->size_bytes) {
      return IndexMalformed(Cat("record '", record->name, "' is ", record->size_bytes, " bytes but ",
                                DTypeName(record->dtype), " ", ShapeToString(record->shape), " needs ", *size));
    }
    if (record->dtype == DType::kBytes && record->shape.size() != 1) {
      return IndexMalformed(Cat("bytes record '", record->name, "' has shape ", ShapeToString(record->shape),
                                "; bytes records are one-dimensional"));
    }
    if (record->offset != expected_offset || record->size_bytes > index_offset - record->offset) {
      return IndexMalformed(Cat("record '", record->name, "' lies at ", record->offset, "+", record->size_bytes,
                                ", expected at ", expected_offset, " and before the index at ", index_offset));
    }
    expected_offset = record->offset + record->size_bytes;
    if (!names.insert(record->name).second) {
      return IndexMalformed(Cat("record '", record->name, "' appears twice"));
    }
    index.records.push_back(*std::move(record));
  }
  if (expected_offset != index_offset) {
    return IndexMalformed(Cat("payloads end at ", expected_offset, " but the index starts at ", index_offset));
  }
  if (cursor.remaining() != 0) return IndexMalformed(Cat(cursor.remaining(), " stray bytes at its end"));
  return index;
}

}  // namespace fp8::checkpoint
