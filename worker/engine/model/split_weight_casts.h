// Under tensor parallelism (tensor_parallel.h), the column-parallel weights of one block
// whose casts scale per row or per column (the rowwise recipes): each rank holds whole rows
// of the weight, so a column's scale needs every rank's rows. Fp8WeightScales
// (float8/weight_scales.h), which does exactly that for FSDP's row shards, computes the
// whole weight's scales with one all-reduce (MAX) across the tensor-parallel ranks; each
// rank casts its rows with them and its layer takes the codes as an Fp8Weight, as under
// FSDP's fp8 all-gather, but without gathering: a rank computes with its own rows.
#pragma once

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/engine/float8/backend_buffer.h"
#include "worker/engine/float8/weight_scales.h"
#include "worker/engine/model/linear_unit.h"
#include "worker/engine/model/tensor_parallel.h"

namespace fp8::engine {

class SplitWeightCasts {
 public:
  // `units`: column-parallel units (weights split by rows) whose layers take an Fp8Weight;
  // each unit's gathered_fp8 is pointed at this object's casts. Not owned; they and `tp`
  // must outlive it.
  static absl::StatusOr<std::unique_ptr<SplitWeightCasts>> create(Backend& backend, TensorParallelComm& tp,
                                                                  std::vector<LinearUnit*> units);

  // Casts the units' weights as they are now (present in memory): the scales' all-reduce,
  // then each rank's rows.
  absl::Status refresh();

 private:
  struct Cast {
    LinearUnit* unit = nullptr;
    int64_t first_row = 0;
    BackendBuffer output_codes, grad_input_codes, grad_input_codes_t;
    Fp8Weight weight;  // what unit->gathered_fp8 points at
  };
  SplitWeightCasts(Backend& backend, TensorParallelComm& tp) : backend_(backend), tp_(tp) {}

  Backend& backend_;
  TensorParallelComm& tp_;
  std::unique_ptr<Fp8WeightScales> scales_;
  std::vector<std::unique_ptr<Cast>> casts_;  // pointers stay put: units point into them
};

}  // namespace fp8::engine
