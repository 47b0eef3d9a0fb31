// Where a gathered weight's fp8 scales are computed. FSDP's fp8 all-gather
// (fp8.all_gather_fp8) casts each rank's shard of a weight with the WHOLE weight's scales
// and gathers the codes; bind() makes them, those scales and the amaxes they came from one
// Fp8Weight, which the layer takes as given. For training to be bit for bit that of one
// process, every scale must be the one the layer would have derived from the whole fp32
// weight, at the granularity of its cast (Float8LinearNeeds' weight_output and
// weight_grad_input): one per tensor, row, column or 128x128 block. Once per step, after
// the optimizer changed the shards (refresh()):
//
//   1. amax     each shard's part of every cast's amaxes, laid out over the whole weight
//               (padded to whole shards) and zero elsewhere: a tensorwise cast's one amax;
//               a rowwise cast's amaxes of the shard's own rows; a columnwise cast's every
//               column's amax over the shard's rows; a block cast's amaxes of the blocks its
//               rows fall in (a block that straddles two shards gets a part from each).
//               Tensorwise and rowwise amaxes come from the row amaxes the optimizer wrote
//               (row_amax_outputs()) when those are current;
//   2. reduce   one all-reduce (MAX) of all of them, packed, across ranks (the caller's
//               collective): every rank then holds every amax of the whole weights;
//   3. scale    the dynamic scale of each amax (Backend::compute_scales: one launch when
//               every cast rounds alike), after a block cast for the grad_input GEMM has had
//               its amax grid transposed (that GEMM reads the transposed weight, whose block
//               grid is the transposed grid); then, for a weight under delayed scaling
//               whose history has a scale, that scale instead
//               (Float8Linear::DelayedCasts::weight_scale).
//
// The reduction is what a tensorwise weight needs anyway; rows, columns and blocks add their
// small vectors to the same one collective. cast_shard() casts a shard with those scales
// for each GEMM that reads codes of its own. The layer consumes the weight in
// Float8Linear::State::adopt_fp8_weight (casts.cc). FsdpModel (fsdp/fsdp_model.cc) owns
// the shards and the all-gather itself.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "fp8/fp8.h"
#include "worker/engine/float8/backend_buffer.h"
#include "worker/engine/float8/fp8_tensor.h"
#include "worker/engine/float8/linear.h"

namespace fp8::engine {

class Fp8WeightScales {
 public:
  // One weight whose shards travel as fp8 codes: its layer (info().needs.fp8_weight), the
  // shape of this rank's fp32 shard, [rows, row_elements] (padding rows included), and
  // where the shard lies in the weight padded to whole shards: its first row, and the
  // padded weight's rows (0: `rows`, a shard that is the whole weight).
  //
  // Under tensor parallelism the layer computes with a part of a weight split across ranks
  // (ParameterSplit), and the scales are the whole weight's: the shard's rows and columns
  // are then placed in that whole (rows of a part split by rows, first_col and padded_cols
  // for one split by columns), and `part_first_row` is where the layer's own part starts,
  // from which bind() gives it row scales (its column scales from first_col). Block casts
  // take no such placement.
  struct Shard {
    Float8Linear* layer = nullptr;
    int64_t rows = 0;
    int64_t row_elements = 0;
    int64_t first_row = 0;
    int64_t padded_rows = 0;
    int64_t first_col = 0;
    int64_t padded_cols = 0;  // 0: row_elements
    int64_t part_first_row = 0;
  };
  // Reduces `count` floats of backend memory in place across ranks, MAX (queued or not:
  // the scales are derived after it, on the same backend).
  using AllReduceMax = std::function<absl::Status(float* values, int64_t count)>;

  // The amax and scale buffers of `shards` (at least one), on `backend`. The layers must
  // outlive this object.
  static absl::StatusOr<std::unique_ptr<Fp8WeightScales>> create(Backend& backend, std::vector<Shard> shards);
  Fp8WeightScales(const Fp8WeightScales&) = delete;
  Fp8WeightScales& operator=(const Fp8WeightScales&) = delete;

  int64_t size() const { return static_cast<int64_t>(weights_.size()); }
  // Whether weight i's grad_input GEMM reads codes of their own (a rowwise recipe's
  // columnwise cast), which cast_shard() then writes too; otherwise it reads the output
  // GEMM's codes transposed (Float8LinearNeeds::weight_codes_shared).
  bool has_grad_input_codes(int64_t i) const;
  // Floats of the one all-reduce refresh() makes: every cast's amaxes, packed.
  int64_t reduced_floats() const { return reduced_floats_; }

  // Weight i, whole (under tensor parallelism the layer's part), as an Fp8Weight: shapes,
  // formats, granularities, scales, inverse scales and amaxes; the caller points the output
  // tensor's codes and the grad_input tensor's codes_t at the gathered codes. The scale
  // buffers do not move for this object's life, and refresh() rewrites them.
  Fp8Weight bind(int64_t i) const;

  // Where an update writes shard i's row amaxes ([rows] fp32, backend memory; AdamW's
  // param_row_amax), one per weight in order. Allocated zeroed by the first call.
  absl::StatusOr<std::vector<float*>> row_amax_outputs();

  // Steps 1 to 3 above, queued; the host reads nothing. shard_values[i]: shard i's fp32
  // values (backend memory). row_amaxes_current: row_amax_outputs() hold the shards' row
  // amaxes as they are.
  absl::Status refresh(absl::Span<const float* const> shard_values, bool row_amaxes_current,
                       const AllReduceMax& all_reduce_max);

  // Shard i's fp32 values cast, saturating, with weight i's scales: for the output GEMM into
  // `output_codes` and, when has_grad_input_codes(i), for the grad_input GEMM into
  // `grad_input_codes` (else ignored), each rows * row_elements bytes as stored. The bits
  // the layer would have cast from the gathered weight (the grad_input GEMM's transposed
  // once gathered).
  absl::Status cast_shard(int64_t i, const float* shard_values, uint8_t* output_codes, uint8_t* grad_input_codes);

 private:
  // `count` floats at `offset` in amaxes_, scales_ and inv_scales_.
  struct Span {
    int64_t offset = 0;
    int64_t count = 0;
  };
  struct Weight {
    Shard shard;
    Fp8WeightCast output, grad_input;
    bool own_grad_input_codes = false;
    Span output_scales;      // reduced across ranks
    Span grad_input_cast;    // what the grad_input codes are cast with: its own (reduced) or output's
    Span grad_input_scales;  // what the layer reads: grad_input_cast, or a block grid transposed
  };

  Fp8WeightScales(Backend& backend, std::vector<Shard> shards);
  absl::Status allocate();
  // Step 1 for one cast of weight w.
  absl::Status write_amaxes(const Weight& w, const Fp8WeightCast& cast, Span span, const float* values,
                            const float* row_amaxes);
  // A block cast's shard, zero rows around it to whole blocks of the padded weight (the
  // shard itself when it starts and ends on block boundaries): [block rows * 128, cols].
  absl::StatusOr<MatrixRef> block_aligned(const Shard& s, const float* values);
  int64_t first_block_row(const Shard& s) const;
  // The layer's view of a block grid for the grad_input GEMM: `from` (the weight's grid)
  // transposed into `to`.
  absl::Status transpose_grid(const Weight& w, Span from, Span to);
  absl::Status cast_one(const Weight& w, const Fp8WeightCast& cast, Span span, const float* values, uint8_t* codes);

  Backend& backend_;
  std::vector<Weight> weights_;
  int64_t reduced_floats_ = 0;  // the all-reduced amaxes come first in the buffers
  int64_t total_floats_ = 0;    // then the transposed block grids
  // Whether every cast derives its scales by one rule (format, pow2), so that one launch
  // computes all of them.
  bool one_rule_ = true;
  // Whether every output cast is tensorwise (their amaxes are then the first size() floats,
  // one launch computes them from the row amaxes).
  bool all_output_tensorwise_ = true;
  // Whether a shard writes only some of a cast's amaxes (rowwise, blocks): the rest are
  // zeroed before each refresh.
  bool partial_amaxes_ = false;
  BackendBuffer amaxes_;
  BackendBuffer scales_;
  BackendBuffer inv_scales_;
  // [size(), row_amaxes_width_]: row i holds shard i's row amaxes, zeros after them (an
  // amax is never below zero), so one rowwise amax gives every shard's amax.
  BackendBuffer row_amaxes_;
  int64_t row_amaxes_width_ = 0;  // the most rows a shard has; 0 until allocated
  // block_aligned()'s copy of a shard and its codes, and transpose_grid()'s byte planes.
  BackendBuffer block_values_, block_codes_, grid_planes_, grid_planes_t_;
};

}  // namespace fp8::engine
