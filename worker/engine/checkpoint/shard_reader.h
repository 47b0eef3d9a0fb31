// Reads one shard file, checking everything it returns.
//
// open() checks the structure: header (magic, version, checksum), footer (end marker,
// checksum, sizes adding up to the file's size, so truncation shows), and the index
// (checksum, layout). Each payload is checked against its CRC-32C as it is read;
// verify_payloads() checks them all without keeping them. Nothing unchecked is ever handed
// out: on any mismatch the result is an error naming the file and the problem, e.g.
//   ckpt/step-00000200/rank-00000-of-00001.ckpt: record 'params/wq' checksum mismatch
//   (stored 0x1234abcd, computed 0x0badf00d)
//
// Error codes: DataLoss for a damaged file; NotFound for a missing file or record;
// FailedPrecondition when a good record does not match what the caller expects (dtype,
// shape) or the file is of a newer format version; InvalidArgument for a caller buffer of
// the wrong size.
#pragma once

#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/engine/checkpoint/dtype.h"
#include "worker/engine/checkpoint/file_io.h"
#include "worker/engine/checkpoint/record_info.h"
#include "worker/engine/checkpoint/shard_format.h"
#include "worker/engine/checkpoint/shard_info.h"

namespace fp8::checkpoint {

class ShardReader {
 public:
  static absl::StatusOr<ShardReader> open(std::filesystem::path path);

  const std::filesystem::path& path() const { return file_.path(); }
  const ShardIdentity& identity() const { return index_.identity; }
  const std::map<std::string, std::string>& metadata() const { return index_.metadata; }
  const std::vector<RecordInfo>& records() const { return index_.records; }
  // nullptr if there is no such record.
  const RecordInfo* find_record(std::string_view name) const;
  // What the commit marker records for this file.
  ShardInfo info() const;

  // Reads record `name` into `out` after checking it has `dtype` and `shape` and that
  // `out` has its size; then checks the payload's checksum. On error `out` may hold part
  // of the payload and must not be used.
  absl::Status read_record(std::string_view name, DType dtype, const Shape& shape, std::span<std::byte> out) const;

  template <TensorElement T>
  absl::Status read_tensor(std::string_view name, std::span<T> out, const Shape& shape) const {
    return read_record(name, d_type_of<T>(), shape, std::as_writable_bytes(out));
  }
  // A record written by WriteScalar (shape []).
  template <TensorElement T>
  absl::StatusOr<T> read_scalar(std::string_view name) const {
    T value{};
    if (absl::Status s = read_tensor<T>(name, std::span<T>(&value, 1), {}); !s.ok()) return s;
    return value;
  }
  // A record written by WriteBytes, whatever its size.
  absl::StatusOr<std::string> read_bytes(std::string_view name) const;

  // Checks every payload's checksum, streaming through a bounded buffer.
  absl::Status verify_payloads() const;

 private:
  ShardReader(InputFile file, ShardIndex index, uint32_t index_crc32c);
  absl::StatusOr<const RecordInfo*> find_or_not_found(std::string_view name) const;
  absl::Status read_and_check(const RecordInfo& record, std::span<std::byte> out) const;

  InputFile file_;
  ShardIndex index_;
  uint32_t index_crc32c_ = 0;
  // Position in index_.records by name: a shard can hold tens of thousands of records.
  std::map<std::string, size_t, std::less<>> record_by_name_;
};

// The summary of a finished shard (name, size, index checksum), from its structure alone:
// the header, footer and index are checked, the payloads are not. Rank 0 can use it to
// build the commit marker from files on a shared filesystem.
absl::StatusOr<ShardInfo> read_shard_info(const std::filesystem::path& file);

}  // namespace fp8::checkpoint
