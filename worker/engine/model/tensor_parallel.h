// Where a model split Megatron-style across tensor-parallel ranks meets its peers. Each rank
// holds part of every block: wq, wk, wv, w1 and w3 split by output rows (column-parallel:
// its share of the attention heads and feed-forward columns), wo and w2 by input columns
// (row-parallel), whose partial outputs the ranks sum. The embedding, the norms and the
// output projection are whole on every rank, which computes them alike.
//
// fp8 scales stay those of one process: a tensor split along the length of its rows (the
// row-parallel layers' inputs and weights, the column-parallel layers' output gradients)
// has its rows' amaxes reduced (MAX) across the ranks before its casts read them, and the
// column-parallel weights' row amaxes are reduced alike, which gives each tensorwise cast the
// whole weight's amax. A column-parallel weight cast per row or column (the rowwise recipes)
// is cast with the whole weight's scales before the layer takes it (split_weight_casts.h).
//
// The model knows nothing of process groups: the trainer hands it this interface
// (train/tensor_parallel_group.h). Every call is collective over the tensor-parallel ranks,
// in place on backend memory, and gives the same bits on every rank.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "fp8/fp8.h"

namespace fp8::engine {

class TensorParallelComm {
 public:
  virtual ~TensorParallelComm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual absl::Status sum(float* data, int64_t count) = 0;
  // Activations of either type (fp32 or bf16): bf16 values are summed in fp32 and the sum
  // rounded to bf16 once.
  virtual absl::Status sum(void* data, DType dtype, int64_t count) = 0;
  virtual absl::Status sum(double* data, int64_t count) = 0;
  virtual absl::Status max(float* data, int64_t count) = 0;
  // Sequence parallelism: recv [ranks × bytes_per_rank] = every rank's send, in rank order
  // (`fp8`: codes, counted apart); and each rank's slice of the sum of everyone's `send`
  // [ranks × count_per_rank] of activations (bf16 summed in fp32, rounded once).
  virtual absl::Status all_gather(const void* send, void* recv, size_t bytes_per_rank, bool fp8) = 0;
  virtual absl::Status reduce_scatter(const void* send, void* recv, int64_t count_per_rank, DType dtype) = 0;
};

}  // namespace fp8::engine
