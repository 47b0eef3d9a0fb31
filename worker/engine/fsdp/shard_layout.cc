#include "worker/engine/fsdp/shard_layout.h"

#include <algorithm>

namespace fp8::engine::fsdp {

int64_t ShardLayout::real_rows_of(int rank) const {
  const int64_t begin = static_cast<int64_t>(rank) * rows_per_rank;
  return std::clamp<int64_t>(rows - begin, 0, rows_per_rank);
}

ShardLayout shard_layout(const TensorShape& shape, int world_size) {
  ShardLayout l;
  l.world_size = world_size;
  l.rows = shape.empty() ? 1 : shape[0];
  l.row_elements = 1;
  for (size_t i = 1; i < shape.size(); ++i) l.row_elements *= shape[i];
  l.rows_per_rank = (l.rows + world_size - 1) / world_size;
  return l;
}

TensorShape padded_shape(const TensorShape& shape, const ShardLayout& layout) {
  TensorShape padded = shape.empty() ? TensorShape{1} : shape;
  padded[0] = layout.padded_rows();
  return padded;
}

}  // namespace fp8::engine::fsdp
