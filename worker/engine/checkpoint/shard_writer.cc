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
absl::Status PayloadSizeMismatch(const std::filesystem::path& path, const RecordInfo& record, std::string_view got) {
  return absl::InvalidArgumentError(Cat(path.string(), ": record '", record.name, "' (", DTypeName(record.dtype), " ",
                                        ShapeToString(record.shape), ") takes ", record.size_bytes, " bytes; got ",
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
  (void)state_->file.Close();
  ::unlink(temp.c_str());
}

const std::filesystem::path& ShardWriter::final_path() const { return state_->final_path; }

absl::StatusOr<ShardWriter> ShardWriter::Create(std::filesystem::path final_path, ShardIdentity identity) {
  if (identity.step < 0 || identity.world_size < 1 || identity.rank < 0 || identity.rank >= identity.world_size) {
    return absl::InvalidArgumentError(Cat(final_path.string(), ": invalid shard identity: step ", identity.step,
                                          ", rank ", identity.rank, " of world size ", identity.world_size));
  }
  absl::StatusOr<OutputFile> file = OutputFile::Create(TempPathFor(final_path));
  if (!file.ok()) return file.status();
  auto state = std::make_unique<State>(State{.final_path = std::move(final_path), .file = *std::move(file)});
  state->index.identity = identity;
  ShardWriter writer(std::move(state));
  const std::string header = EncodeShardHeader();
  if (absl::Status s = writer.state_->file.Write(AsBytes(header)); !s.ok()) return s;
  return writer;
}

absl::Status ShardWriter::Fail(absl::Status status) {
  if (state_->failure.ok()) state_->failure = status;
  return status;
}

absl::Status ShardWriter::CheckUsable() const {
  if (state_ == nullptr) return absl::FailedPreconditionError("use of a moved-from ShardWriter");
  if (!state_->failure.ok()) return state_->failure;
  if (state_->finished) {
    return absl::FailedPreconditionError(Cat(state_->final_path.string(), ": shard already finished"));
  }
  return absl::OkStatus();
}

absl::Status ShardWriter::SetMetadata(std::string_view key, std::string_view value) {
  if (absl::Status s = CheckUsable(); !s.ok()) return s;
  if (key.empty() || key.size() > kMaxMetadataKeyBytes) {
    return Fail(absl::InvalidArgumentError(Cat(state_->final_path.string(), ": metadata key of ", key.size(),
                                               " bytes; keys take 1 to ", kMaxMetadataKeyBytes)));
  }
  if (value.size() > kMaxMetadataValueBytes) {
    return Fail(
        absl::InvalidArgumentError(Cat(state_->final_path.string(), ": metadata '", key, "' has a value of ",
                                       value.size(), " bytes; at most ", kMaxMetadataValueBytes, " are allowed")));
  }
  state_->index.metadata.insert_or_assign(std::string(key), std::string(value));
  return absl::OkStatus();
}

absl::Status ShardWriter::BeginRecord(std::string_view name, DType dtype, const Shape& shape) {
  if (absl::Status s = CheckUsable(); !s.ok()) return s;
  const std::string where = state_->final_path.string();
  if (state_->record_open) {
    return Fail(absl::FailedPreconditionError(
        Cat(where, ": record '", name, "' begun while record '", state_->open_record.name, "' is still open")));
  }
  if (absl::Status s = CheckRecordName(name); !s.ok()) {
    return Fail(absl::InvalidArgumentError(Cat(where, ": ", s.message())));
  }
  if (state_->record_names.contains(name)) {
    return Fail(absl::InvalidArgumentError(Cat(where, ": record '", name, "' written twice")));
  }
  if (dtype == DType::kBytes && shape.size() != 1) {
    return Fail(absl::InvalidArgumentError(
        Cat(where, ": bytes record '", name, "' needs shape [size], got ", ShapeToString(shape))));
  }
  absl::StatusOr<uint64_t> size = PayloadBytes(dtype, shape, Cat("record '", name, "'"));
  if (!size.ok()) return Fail(absl::InvalidArgumentError(Cat(where, ": ", size.status().message())));

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

absl::Status ShardWriter::AppendPayload(std::span<const std::byte> piece) {
  if (absl::Status s = CheckUsable(); !s.ok()) return s;
  if (!state_->record_open) {
    return Fail(absl::FailedPreconditionError(Cat(state_->final_path.string(), ": AppendPayload without BeginRecord")));
  }
  RecordInfo& record = state_->open_record;
  if (piece.size() > record.size_bytes - state_->open_record_written) {
    return Fail(
        PayloadSizeMismatch(state_->final_path, record, Cat("at least ", state_->open_record_written + piece.size())));
  }
  // Checksum and write the same piece back to back, while it is still in cache.
  record.crc32c = Crc32cExtend(record.crc32c, piece);
  if (absl::Status s = state_->file.Write(piece); !s.ok()) return Fail(s);
  state_->open_record_written += piece.size();
  return absl::OkStatus();
}

absl::Status ShardWriter::EndRecord() {
  if (absl::Status s = CheckUsable(); !s.ok()) return s;
  if (!state_->record_open) {
    return Fail(absl::FailedPreconditionError(Cat(state_->final_path.string(), ": EndRecord without BeginRecord")));
  }
  RecordInfo& record = state_->open_record;
  if (state_->open_record_written != record.size_bytes) {
    return Fail(PayloadSizeMismatch(state_->final_path, record, Cat(state_->open_record_written)));
  }
  state_->end_offset += record.size_bytes;
  state_->record_names.insert(record.name);
  state_->index.records.push_back(std::move(record));
  state_->record_open = false;
  return absl::OkStatus();
}

absl::Status ShardWriter::WriteRecord(std::string_view name, DType dtype, const Shape& shape,
                                      std::span<const std::byte> payload) {
  if (absl::Status s = BeginRecord(name, dtype, shape); !s.ok()) return s;
  if (payload.size() != state_->open_record.size_bytes) {
    return Fail(PayloadSizeMismatch(state_->final_path, state_->open_record, Cat(payload.size())));
  }
  if (absl::Status s = AppendPayload(payload); !s.ok()) return s;
  return EndRecord();
}

absl::Status ShardWriter::WriteBytes(std::string_view name, std::span<const std::byte> bytes) {
  return WriteRecord(name, DType::kBytes, {static_cast<int64_t>(bytes.size())}, bytes);
}

absl::Status ShardWriter::WriteBytes(std::string_view name, std::string_view bytes) {
  return WriteBytes(name, AsBytes(bytes));
}

absl::StatusOr<ShardInfo> ShardWriter::Finish() {
  if (absl::Status s = CheckUsable(); !s.ok()) return s;
  if (state_->record_open) {
    return Fail(absl::FailedPreconditionError(
        Cat(state_->final_path.string(), ": Finish while record '", state_->open_record.name, "' is still open")));
  }
  const std::string index = EncodeShardIndex(state_->index);
  ShardFooter footer{.index_offset = state_->end_offset,
                     .index_size = index.size(),
                     .record_count = static_cast<uint32_t>(state_->index.records.size()),
                     .index_crc32c = Crc32c(AsBytes(index)),
                     .format_version = kShardFormatVersion};
  const std::string footer_bytes = EncodeShardFooter(footer);
  OutputFile& file = state_->file;
  const std::filesystem::path temp = file.path();
  if (absl::Status s = file.Write(AsBytes(index)); !s.ok()) return Fail(s);
  if (absl::Status s = file.Write(AsBytes(footer_bytes)); !s.ok()) return Fail(s);
  if (absl::Status s = file.Sync(); !s.ok()) return Fail(s);
  if (absl::Status s = file.Close(); !s.ok()) return Fail(s);
  if (absl::Status s = RenameDurably(temp, state_->final_path); !s.ok()) return Fail(s);
  state_->finished = true;
  return ShardInfo{.file_name = state_->final_path.filename().string(),
                   .size_bytes = footer.index_offset + footer.index_size + kShardFooterBytes,
                   .checksum = footer.index_crc32c};
}

}  // namespace fp8::checkpoint
