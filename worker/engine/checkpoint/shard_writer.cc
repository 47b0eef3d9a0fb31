#include "worker/engine/checkpoint/shard_writer.h"

#include <unistd.h>

#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "worker/engine/checkpoint/byte_codec.h"
#include "worker/engine/checkpoint/crc32c.h"
#include "worker/engine/checkpoint/file_io.h"
#include "worker/engine/checkpoint/shard_format.h"
#include "worker/engine/checkpoint/text.h"

namespace fp8::checkpoint {

namespace {

// "<file>: record 'params/w' (f32 [2, 2]) takes 16 bytes; got 24"
absl::Status payload_size_mismatch(const std::filesystem::path& path, const RecordInfo& record, std::string_view got) {
  return absl::InvalidArgumentError(cat(path.string(), ": record '", record.name, "' (", d_type_name(record.dtype), " ",
                                        shape_to_string(record.shape), ") takes ", record.size_bytes, " bytes; got ",
                                        got));
}

}  // namespace

struct ShardWriter::State {
  std::filesystem::path final_path;
  OutputFile file;
  ShardIndex index;
  std::set<std::string, std::less<>> record_names;
  uint64_t end_offset = kShardHeaderBytes;  // where the next payload byte goes

  // The record being streamed by BeginRecord/AppendPayload, if any.
  bool record_open = false;
  RecordInfo open_record;
  uint64_t open_record_written = 0;

  absl::Status failure;  // the first error; sticky
  bool finished = false;
};

ShardWriter::ShardWriter(std::unique_ptr<State> state) : state_(std::move(state)) {}
ShardWriter::ShardWriter(ShardWriter&&) noexcept = default;
ShardWriter& ShardWriter::operator=(ShardWriter&&) noexcept = default;

ShardWriter::~ShardWriter() {
  if (state_ == nullptr || state_->finished) return;
  // Abandoned: leave nothing behind. Readers ignore .tmp files, so this is tidiness only.
  const std::filesystem::path temp = state_->file.path();
  (void)state_->file.close();
  ::unlink(temp.c_str());
}

const std::filesystem::path& ShardWriter::final_path() const { return state_->final_path; }

absl::StatusOr<ShardWriter> ShardWriter::create(std::filesystem::path final_path, ShardIdentity identity) {
  if (identity.step < 0 || identity.world_size < 1 || identity.rank < 0 || identity.rank >= identity.world_size) {
    return absl::InvalidArgumentError(cat(final_path.string(), ": invalid shard identity: step ", identity.step,
                                          ", rank ", identity.rank, " of world size ", identity.world_size));
  }
  absl::StatusOr<OutputFile> file = OutputFile::create(temp_path_for(final_path));
  if (!file.ok()) return file.status();
  auto state = std::make_unique<State>(State{.final_path = std::move(final_path), .file = *std::move(file)});
  state->index.identity = identity;
  ShardWriter writer(std::move(state));
  const std::string header = encode_shard_header();
  if (absl::Status s = writer.state_->file.write(as_bytes(header)); !s.ok()) return s;
  return writer;
}

absl::Status ShardWriter::fail(absl::Status status) {
  if (state_->failure.ok()) state_->failure = status;
  return status;
}

absl::Status ShardWriter::check_usable() const {
  if (state_ == nullptr) return absl::FailedPreconditionError("use of a moved-from ShardWriter");
  if (!state_->failure.ok()) return state_->failure;
  if (state_->finished) {
    return absl::FailedPreconditionError(cat(state_->final_path.string(), ": shard already finished"));
  }
  return absl::OkStatus();
}

absl::Status ShardWriter::set_metadata(std::string_view key, std::string_view value) {
  if (absl::Status s = check_usable(); !s.ok()) return s;
  if (key.empty() || key.size() > kMaxMetadataKeyBytes) {
    return fail(absl::InvalidArgumentError(cat(state_->final_path.string(), ": metadata key of ", key.size(),
                                               " bytes; keys take 1 to ", kMaxMetadataKeyBytes)));
  }
  if (value.size() > kMaxMetadataValueBytes) {
    return fail(
        absl::InvalidArgumentError(cat(state_->final_path.string(), ": metadata '", key, "' has a value of ",
                                       value.size(), " bytes; at most ", kMaxMetadataValueBytes, " are allowed")));
  }
  state_->index.metadata.insert_or_assign(std::string(key), std::string(value));
  return absl::OkStatus();
}

absl::Status ShardWriter::begin_record(std::string_view name, DType dtype, const Shape& shape) {
  if (absl::Status s = check_usable(); !s.ok()) return s;
  const std::string where = state_->final_path.string();
  if (state_->record_open) {
    return fail(absl::FailedPreconditionError(
        cat(where, ": record '", name, "' begun while record '", state_->open_record.name, "' is still open")));
  }
  if (absl::Status s = check_record_name(name); !s.ok()) {
    return fail(absl::InvalidArgumentError(cat(where, ": ", s.message())));
  }
  if (state_->record_names.contains(name)) {
    return fail(absl::InvalidArgumentError(cat(where, ": record '", name, "' written twice")));
  }
  if (dtype == DType::kBytes && shape.size() != 1) {
    return fail(absl::InvalidArgumentError(
        cat(where, ": bytes record '", name, "' needs shape [size], got ", shape_to_string(shape))));
  }
  absl::StatusOr<uint64_t> size = payload_bytes(dtype, shape, cat("record '", name, "'"));
  if (!size.ok()) return fail(absl::InvalidArgumentError(cat(where, ": ", size.status().message())));

  state_->record_open = true;
  state_->open_record = RecordInfo{.name = std::string(name),
                                   .dtype = dtype,
                                   .shape = shape,
                                   .offset = state_->end_offset,
                                   .size_bytes = *size,
                                   .crc32c = 0};
  state_->open_record_written = 0;
  return absl::OkStatus();
}

absl::Status ShardWriter::append_payload(std::span<const std::byte> piece) {
  if (absl::Status s = check_usable(); !s.ok()) return s;
  if (!state_->record_open) {
    return fail(absl::FailedPreconditionError(cat(state_->final_path.string(), ": AppendPayload without BeginRecord")));
  }
  RecordInfo& record = state_->open_record;
  if (piece.size() > record.size_bytes - state_->open_record_written) {
    return fail(
        payload_size_mismatch(state_->final_path, record, cat("at least ", state_->open_record_written + piece.size())));
  }
  // Checksum and write the same piece back to back, while it is still in cache.
  record.crc32c = crc32c_extend(record.crc32c, piece);
  if (absl::Status s = state_->file.write(piece); !s.ok()) return fail(s);
  state_->open_record_written += piece.size();
  return absl::OkStatus();
}

absl::Status ShardWriter::end_record() {
  if (absl::Status s = check_usable(); !s.ok()) return s;
  if (!state_->record_open) {
    return fail(absl::FailedPreconditionError(cat(state_->final_path.string(), ": EndRecord without BeginRecord")));
  }
  RecordInfo& record = state_->open_record;
  if (state_->open_record_written != record.size_bytes) {
    return fail(payload_size_mismatch(state_->final_path, record, cat(state_->open_record_written)));
  }
  state_->end_offset += record.size_bytes;
  state_->record_names.insert(record.name);
  state_->index.records.push_back(std::move(record));
  state_->record_open = false;
  return absl::OkStatus();
}

absl::Status ShardWriter::write_record(std::string_view name, DType dtype, const Shape& shape,
                                      std::span<const std::byte> payload) {
  if (absl::Status s = begin_record(name, dtype, shape); !s.ok()) return s;
  if (payload.size() != state_->open_record.size_bytes) {
    return fail(payload_size_mismatch(state_->final_path, state_->open_record, cat(payload.size())));
  }
  if (absl::Status s = append_payload(payload); !s.ok()) return s;
  return end_record();
}

absl::Status ShardWriter::write_bytes(std::string_view name, std::span<const std::byte> bytes) {
  return write_record(name, DType::kBytes, {static_cast<int64_t>(bytes.size())}, bytes);
}

absl::Status ShardWriter::write_bytes(std::string_view name, std::string_view bytes) {
  return write_bytes(name, as_bytes(bytes));
}

absl::StatusOr<ShardInfo> ShardWriter::finish() {
  if (absl::Status s = check_usable(); !s.ok()) return s;
  if (state_->record_open) {
    return fail(absl::FailedPreconditionError(
        cat(state_->final_path.string(), ": Finish while record '", state_->open_record.name, "' is still open")));
  }
  const std::string index = encode_shard_index(state_->index);
  ShardFooter footer{.index_offset = state_->end_offset,
                     .index_size = index.size(),
                     .record_count = static_cast<uint32_t>(state_->index.records.size()),
                     .index_crc32c = crc32c(as_bytes(index)),
                     .format_version = kShardFormatVersion};
  const std::string footer_bytes = encode_shard_footer(footer);
  OutputFile& file = state_->file;
  const std::filesystem::path temp = file.path();
  if (absl::Status s = file.write(as_bytes(index)); !s.ok()) return fail(s);
  if (absl::Status s = file.write(as_bytes(footer_bytes)); !s.ok()) return fail(s);
  if (absl::Status s = file.sync(); !s.ok()) return fail(s);
  if (absl::Status s = file.close(); !s.ok()) return fail(s);
  if (absl::Status s = rename_durably(temp, state_->final_path); !s.ok()) return fail(s);
  state_->finished = true;
  return ShardInfo{.file_name = state_->final_path.filename().string(),
                   .size_bytes = footer.index_offset + footer.index_size + kShardFooterBytes,
                   .checksum = footer.index_crc32c};
}

}  // namespace fp8::checkpoint
