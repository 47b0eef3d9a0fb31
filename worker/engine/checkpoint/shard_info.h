// Who wrote a shard file, and the summary of a finished shard that the commit marker
// records. Plain values: they travel between ranks (each rank reports its ShardInfo to
// rank 0, which writes the marker).
#pragma once

#include <cstdint>
#include <string>

namespace fp8::checkpoint {

// Stored inside every shard, so a shard copied or renamed into the wrong place is caught.
struct ShardIdentity {
  int64_t step = 0;
  int32_t rank = 0;
  int32_t world_size = 1;

  bool operator==(const ShardIdentity&) const = default;
};

struct ShardInfo {
  std::string file_name;  // base name inside the step directory: "rank-00000-of-00002.ckpt"
  uint64_t size_bytes = 0;
  // CRC-32C of the shard's index. The index holds the CRC-32C of every payload, so this one
  // number pins the whole content, yet reading it costs only the index, not the payloads.
  uint32_t checksum = 0;

  bool operator==(const ShardInfo&) const = default;
};

}  // namespace fp8::checkpoint
