// How much device memory one rank of a job holds at its peak, by part, from the resolved
// job spec alone (no model is built): what `fp8-train --estimate` and `fp8ctl submit
// --dry-run` print. It follows the training engine's allocations (worker/engine: the
// parameters and their shards, AdamW's moments, the activations each
// train.activation_checkpointing mode keeps (without checkpointing, a linear's
// high-precision input only where its backward reads it), each fp8 layer's cast buffers,
// FSDP's gathered units, a tensor-parallel rank's shares, sequence parallelism's split
// residual stream and gather buffers); tests hold it against the measured peak of the CPU
// backend.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "fp8/v1/job.pb.h"

namespace fp8::jobspec {

struct MemoryPart {
  std::string name;    // "parameters", "activations", ...
  std::string detail;  // what it counts, for the printout
  int64_t bytes = 0;
};

struct MemoryEstimate {
  int world_size = 1;
  int tensor_parallel = 1;  // parallel.tensor
  bool sequence_parallel = false;  // parallel.sequence, with tensor_parallel > 1
  std::vector<MemoryPart> parts;
  int64_t total_bytes() const;
};

// The estimate for one rank of `spec` (defaults filled, as the loader returns it). Fails
// for a spec whose model shape is unknown.
absl::StatusOr<MemoryEstimate> estimate_rank_memory(const v1::JobSpec& spec);

// The estimate as lines of text: a header with the total, then one line per part.
std::string format_memory_estimate(const MemoryEstimate& estimate);

// "1.25 GiB", "310.0 MiB", "12.0 KiB".
std::string format_bytes(int64_t bytes);

}  // namespace fp8::jobspec
