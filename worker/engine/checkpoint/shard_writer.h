// Writes one shard file (one rank's part of one checkpoint); format in shard_format.h.
//
//   ShardWriter w = *ShardWriter::create(shard_path(root, step, rank, world), {step, rank, world});
//   w.set_metadata("job", "llama-tiny");
//   w.WriteTensor<float>("params/tok_embeddings", weights, {vocab_shard, dim});
//   w.WriteScalar<int64_t>("data/position", position);
//   w.write_bytes("rng/state", rng_bytes);
//   ShardInfo info = *w.finish();   // durable under its final name only now
//
// Payloads stream from the caller's memory straight to the file (no copy), so a record of
// hundreds of MB needs no extra memory; BeginRecord/AppendPayload/EndRecord take a payload
// in pieces (e.g. staged out of GPU memory through a small host buffer).
//
// Until finish() succeeds everything goes to `<final>.tmp`; destroying an unfinished writer
// deletes that file. The first error (I/O or misuse) sticks: every later call, and Finish,
// return it, so a shard missing a record can never be finished by ignoring an error.
#pragma once

#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/engine/checkpoint/dtype.h"
#include "worker/engine/checkpoint/record_info.h"
#include "worker/engine/checkpoint/shard_info.h"

namespace fp8::checkpoint {

class ShardWriter {
 public:
  // The directory of `final_path` must exist (see PrepareStepDirectory in layout.h).
  static absl::StatusOr<ShardWriter> create(std::filesystem::path final_path, ShardIdentity identity);

  ShardWriter(ShardWriter&&) noexcept;
  ShardWriter& operator=(ShardWriter&&) noexcept;
  ~ShardWriter();

  // Free-form string metadata (job name, recipe, ...); a second value for a key replaces
  // the first. Stored in the index, written by finish().
  absl::Status set_metadata(std::string_view key, std::string_view value);

  // One record whose payload is in memory. `payload` must be exactly the size that `dtype`
  // and `shape` call for. Names must be unique within the shard.
  absl::Status write_record(std::string_view name, DType dtype, const Shape& shape, std::span<const std::byte> payload);

  template <TensorElement T>
  absl::Status write_tensor(std::string_view name, std::span<const T> values, const Shape& shape) {
    return write_record(name, d_type_of<T>(), shape, std::as_bytes(values));
  }
  template <TensorElement T>
  absl::Status write_scalar(std::string_view name, T value) {
    return write_tensor<T>(name, std::span<const T>(&value, 1), {});
  }
  // An opaque blob, stored with dtype kBytes and shape [size].
  absl::Status write_bytes(std::string_view name, std::span<const std::byte> bytes);
  absl::Status write_bytes(std::string_view name, std::string_view bytes);

  // One record whose payload arrives in pieces: the pieces must add up to the size that
  // `dtype` and `shape` call for. No other record may be written in between.
  absl::Status begin_record(std::string_view name, DType dtype, const Shape& shape);
  absl::Status append_payload(std::span<const std::byte> piece);
  absl::Status end_record();

  // Writes the index and footer, fsyncs, renames `<final>.tmp` to `<final>` and fsyncs the
  // directory. The returned summary goes into the commit marker.
  absl::StatusOr<ShardInfo> finish();

  const std::filesystem::path& final_path() const;

 private:
  struct State;
  explicit ShardWriter(std::unique_ptr<State> state);
  absl::Status fail(absl::Status status);
  absl::Status check_usable() const;

  std::unique_ptr<State> state_;
};

}  // namespace fp8::checkpoint
