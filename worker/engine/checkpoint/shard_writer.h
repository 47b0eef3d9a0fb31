// Writes one shard file (one rank's part of one checkpoint); format in shard_format.h.
//
//   ShardWriter w = *ShardWriter::Create(ShardPath(root, step, rank, world), {step, rank, world});
//   w.SetMetadata("job", "llama-tiny");
//   w.WriteTensor<float>("params/tok_embeddings", weights, {vocab_shard, dim});
//   w.WriteScalar<int64_t>("data/position", position);
//   w.WriteBytes("rng/state", rng_bytes);
//   ShardInfo info = *w.Finish();   // durable under its final name only now
//
// Payloads stream from the caller's memory straight to the file (no copy), so a record of
// hundreds of MB needs no extra memory; BeginRecord/AppendPayload/EndRecord take a payload
// in pieces (e.g. staged out of GPU memory through a small host buffer).
//
// Until Finish() succeeds everything goes to `<final>.tmp`; destroying an unfinished writer
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
  static absl::StatusOr<ShardWriter> Create(std::filesystem::path final_path, ShardIdentity identity);

  ShardWriter(ShardWriter&&) noexcept;
  ShardWriter& operator=(ShardWriter&&) noexcept;
  ~ShardWriter();

  // Free-form string metadata (job name, recipe, ...); a second value for a key replaces
  // the first. Stored in the index, written by Finish().
  absl::Status SetMetadata(std::string_view key, std::string_view value);

  // One record whose payload is in memory. `payload` must be exactly the size that `dtype`
  // and `shape` call for. Names must be unique within the shard.
  absl::Status WriteRecord(std::string_view name, DType dtype, const Shape& shape, std::span<const std::byte> payload);

  template <TensorElement T>
  absl::Status WriteTensor(std::string_view name, std::span<const T> values, const Shape& shape) {
    return WriteRecord(name, DTypeOf<T>(), shape, std::as_bytes(values));
  }
  template <TensorElement T>
  absl::Status WriteScalar(std::string_view name, T value) {
    return WriteTensor<T>(name, std::span<const T>(&value, 1), {});
  }
  // An opaque blob, stored with dtype kBytes and shape [size].
  absl::Status WriteBytes(std::string_view name, std::span<const std::byte> bytes);
  absl::Status WriteBytes(std::string_view name, std::string_view bytes);

  // One record whose payload arrives in pieces: the pieces must add up to the size that
  // `dtype` and `shape` call for. No other record may be written in between.
  absl::Status BeginRecord(std::string_view name, DType dtype, const Shape& shape);
  absl::Status AppendPayload(std::span<const std::byte> piece);
  absl::Status EndRecord();

  // Writes the index and footer, fsyncs, renames `<final>.tmp` to `<final>` and fsyncs the
  // directory. The returned summary goes into the commit marker.
  absl::StatusOr<ShardInfo> Finish();

  const std::filesystem::path& final_path() const;

 private:
  struct State;
  explicit ShardWriter(std::unique_ptr<State> state);
  absl::Status Fail(absl::Status status);
  absl::Status CheckUsable() const;

  std::unique_ptr<State> state_;
};

}  // namespace fp8::checkpoint
