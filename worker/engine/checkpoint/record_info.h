// What a checkpoint record is, apart from its bytes: name, element type, shape, and where
// its payload sits in the shard file with the payload's checksum.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/engine/checkpoint/dtype.h"

namespace fp8::checkpoint {

// Dimensions, outermost first. Empty = a scalar (one element). At most kMaxRank dims,
// each >= 0.
using Shape = std::vector<int64_t>;
inline constexpr size_t kMaxRank = 8;

// Record names are paths such as "params/layers.0.attention.wq" or "adam/m/tok_embeddings";
// the length cap keeps a corrupt index from asking for a huge allocation.
inline constexpr size_t kMaxRecordNameBytes = 4096;

struct RecordInfo {
  std::string name;
  DType dtype = DType::kU8;
  Shape shape;
  uint64_t offset = 0;      // of the payload's first byte in the shard file
  uint64_t size_bytes = 0;  // of the payload
  uint32_t crc32c = 0;      // of the payload
};

// "[64, 128]"; "[]" for a scalar.
std::string shape_to_string(const Shape& shape);

// Payload size for `dtype` elements of `shape`. InvalidArgument for a rank above kMaxRank,
// a negative dim, or a size that overflows 64 bits; `what` names the record in messages.
absl::StatusOr<uint64_t> payload_bytes(DType dtype, const Shape& shape, std::string_view what);

// InvalidArgument unless `name` is non-empty and at most kMaxRecordNameBytes long.
absl::Status check_record_name(std::string_view name);

}  // namespace fp8::checkpoint
