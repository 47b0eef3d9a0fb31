#include "worker/engine/checkpoint/shard_reader.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "worker/engine/checkpoint/crc32c.h"
#include "worker/engine/checkpoint/text.h"

namespace fp8::checkpoint {
namespace {

// Payloads are read and checksummed in pieces this big, so each piece is checksummed
// while it is still in cache and VerifyPayloads needs only this much memory.
constexpr size_t kReadChunkBytes = size_t{8} << 20;

// Decoders report problems without the file's name; this adds it, keeping the code.
absl::Status in_file(const std::filesystem::path& path, const absl::Status& status) {
  return absl::Status(status.code(), cat(path.string(), ": ", status.message()));
}

absl::Status checksum_mismatch(const std::filesystem::path& path, const RecordInfo& record, uint32_t computed) {
  return absl::DataLossError(absl::StrFormat("%s: record '%s' checksum mismatch (stored 0x%08x, computed 0x%08x)",
                                             path.string(), record.name, record.crc32c, computed));
}

}  // namespace

absl::StatusOr<ShardReader> ShardReader::open(std::filesystem::path path) {
  absl::StatusOr<InputFile> file = InputFile::open(std::move(path));
  if (!file.ok()) return file.status();
  const std::filesystem::path& where = file->path();
  const uint64_t size = file->size();
  if (size < kShardHeaderBytes + kShardFooterBytes) {
    return absl::DataLossError(
        cat(where.string(), ": truncated: ", size, " bytes is smaller than an empty shard (header and footer)"));
  }

  std::byte header[kShardHeaderBytes];
  if (absl::Status s = file->read_at(0, header); !s.ok()) return s;
  if (absl::Status s = check_shard_header(header); !s.ok()) return in_file(where, s);

  std::byte footer_bytes[kShardFooterBytes];
  if (absl::Status s = file->read_at(size - kShardFooterBytes, footer_bytes); !s.ok()) return s;
  absl::StatusOr<ShardFooter> footer = decode_shard_footer(footer_bytes);
  if (!footer.ok()) return in_file(where, footer.status());
  // The footer's own checksum passed, so a size disagreement means bytes went missing or
  // were added, not that the footer is damaged.
  const uint64_t payload_and_index_end = size - kShardFooterBytes;
  if (footer->index_offset > payload_and_index_end ||
      footer->index_size != payload_and_index_end - footer->index_offset) {
    return absl::DataLossError(cat(where.string(), ": truncated or padded: the footer places the index at ",
                                   footer->index_offset, "+", footer->index_size, " but the file is ", size, " bytes"));
  }

  std::vector<std::byte> index_bytes(footer->index_size);
  if (absl::Status s = file->read_at(footer->index_offset, index_bytes); !s.ok()) return s;
  const uint32_t computed = crc32c(index_bytes);
  if (computed != footer->index_crc32c) {
    return absl::DataLossError(absl::StrFormat("%s: index checksum mismatch (stored 0x%08x, computed 0x%08x)",
                                               where.string(), footer->index_crc32c, computed));
  }
  absl::StatusOr<ShardIndex> index = decode_shard_index(index_bytes, footer->index_offset);
  if (!index.ok()) return in_file(where, index.status());
  if (index->records.size() != footer->record_count) {
    return absl::DataLossError(cat(where.string(), ": the footer counts ", footer->record_count,
                                   " records but the index holds ", index->records.size()));
  }
  return ShardReader(*std::move(file), *std::move(index), footer->index_crc32c);
}

ShardReader::ShardReader(InputFile file, ShardIndex index, uint32_t index_crc32c)
    : file_(std::move(file)), index_(std::move(index)), index_crc32c_(index_crc32c) {
  for (size_t i = 0; i < index_.records.size(); ++i) record_by_name_.emplace(index_.records[i].name, i);
}

const RecordInfo* ShardReader::find_record(std::string_view name) const {
  auto it = record_by_name_.find(name);
  return it == record_by_name_.end() ? nullptr : &index_.records[it->second];
}

absl::StatusOr<const RecordInfo*> ShardReader::find_or_not_found(std::string_view name) const {
  const RecordInfo* record = find_record(name);
  if (record == nullptr) return absl::NotFoundError(cat(path().string(), ": no record '", name, "'"));
  return record;
}

ShardInfo ShardReader::info() const {
  return ShardInfo{.file_name = path().filename().string(), .size_bytes = file_.size(), .checksum = index_crc32c_};
}

absl::Status ShardReader::read_and_check(const RecordInfo& record, std::span<std::byte> buffer) const {
  // A buffer of the record's size receives the payload; a smaller one is scratch space,
  // refilled piece by piece (VerifyPayloads).
  const bool keep_payload = buffer.size() == record.size_bytes;
  const uint64_t piece_limit = keep_payload ? kReadChunkBytes : buffer.size();
  uint32_t crc = 0;
  for (uint64_t done = 0; done < record.size_bytes;) {
    const auto piece = static_cast<size_t>(std::min(piece_limit, record.size_bytes - done));
    std::span<std::byte> chunk = keep_payload ? buffer.subspan(done, piece) : buffer.first(piece);
    if (absl::Status s = file_.read_at(record.offset + done, chunk); !s.ok()) return s;
    crc = crc32c_extend(crc, chunk);
    done += piece;
  }
  if (crc != record.crc32c) return checksum_mismatch(path(), record, crc);
  return absl::OkStatus();
}

absl::Status ShardReader::read_record(std::string_view name, DType dtype, const Shape& shape,
                                     std::span<std::byte> out) const {
  absl::StatusOr<const RecordInfo*> found = find_or_not_found(name);
  if (!found.ok()) return found.status();
  const RecordInfo& record = **found;
  if (record.dtype != dtype) {
    return absl::FailedPreconditionError(
        cat(path().string(), ": record '", name, "' is ", d_type_name(record.dtype), ", expected ", d_type_name(dtype)));
  }
  if (record.shape != shape) {
    return absl::FailedPreconditionError(cat(path().string(), ": record '", name, "' has shape ",
                                             shape_to_string(record.shape), ", expected ", shape_to_string(shape)));
  }
  if (out.size() != record.size_bytes) {
    return absl::InvalidArgumentError(cat(path().string(), ": record '", name, "' (", d_type_name(dtype), " ",
                                          shape_to_string(shape), ") is ", record.size_bytes,
                                          " bytes; the buffer given holds ", out.size()));
  }
  return read_and_check(record, out);
}

absl::StatusOr<std::string> ShardReader::read_bytes(std::string_view name) const {
  absl::StatusOr<const RecordInfo*> found = find_or_not_found(name);
  if (!found.ok()) return found.status();
  const RecordInfo& record = **found;
  if (record.dtype != DType::kBytes) {
    return absl::FailedPreconditionError(
        cat(path().string(), ": record '", name, "' is ", d_type_name(record.dtype), ", expected bytes"));
  }
  std::string bytes(record.size_bytes, '\0');
  if (absl::Status s = read_and_check(record, std::as_writable_bytes(std::span(bytes))); !s.ok()) return s;
  return bytes;
}

absl::Status ShardReader::verify_payloads() const {
  uint64_t largest = 0;
  for (const RecordInfo& record : index_.records) largest = std::max(largest, record.size_bytes);
  std::vector<std::byte> scratch(static_cast<size_t>(std::min<uint64_t>(largest, kReadChunkBytes)));
  for (const RecordInfo& record : index_.records) {
    const size_t buffer_size = static_cast<size_t>(std::min<uint64_t>(scratch.size(), record.size_bytes));
    if (absl::Status s = read_and_check(record, std::span(scratch).first(buffer_size)); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<ShardInfo> read_shard_info(const std::filesystem::path& file) {
  absl::StatusOr<ShardReader> reader = ShardReader::open(file);
  if (!reader.ok()) return reader.status();
  return reader->info();
}

}  // namespace fp8::checkpoint
