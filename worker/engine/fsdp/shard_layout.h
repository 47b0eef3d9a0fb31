// How FSDP splits one parameter across ranks: along dimension 0, padded so that every rank
// holds the same number of rows (collectives move equal slices). Rank r holds rows
// [r * rows_per_rank, (r + 1) * rows_per_rank) of the padded tensor; rows past the real
// ones are zeros that stay zero (their gradient is zero, so AdamW never moves them).
#pragma once

#include <cstdint>

#include "worker/engine/tensor/tensor.h"

namespace fp8::engine::fsdp {

struct ShardLayout {
  int64_t rows = 0;           // dim 0 of the parameter
  int64_t row_elements = 0;   // elements per row: the product of the other dimensions (1 for a vector)
  int64_t rows_per_rank = 0;  // ceil(rows / world_size)
  int world_size = 1;

  int64_t shard_elements() const { return rows_per_rank * row_elements; }
  int64_t padded_rows() const { return rows_per_rank * world_size; }
  int64_t padded_elements() const { return padded_rows() * row_elements; }
  // Real (unpadded) rows in rank r's shard.
  int64_t real_rows_of(int rank) const;
};

ShardLayout shard_layout(const TensorShape& shape, int world_size);

// The full shape with dim 0 padded: what a gather produces.
TensorShape padded_shape(const TensorShape& shape, const ShardLayout& layout);

}  // namespace fp8::engine::fsdp
