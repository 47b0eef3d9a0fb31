// Where a gathered weight's fp8 scale is computed. FSDP's fp8 all-gather
// (fp8.all_gather_fp8) casts each rank's shard of a weight with ONE global scale and
// gathers the codes; bind() makes them, that scale and the amax it came from one Fp8Tensor,
// which the layer takes as given. For training to be bit for bit that of one process, the
// scale must be the one the layer would have derived from the whole fp32 weight. Once per
// step, after the optimizer changed the shards (refresh()):
//
//   1. amax     each shard's amax: one rowwise Backend::amax over the row amaxes the
//               optimizer wrote (row_amax_outputs()), or a pass over each shard when those
//               are not current (the first step, after a checkpoint load);
//   2. reduce   one all-reduce (MAX) of the packed amaxes across ranks (the caller's
//               collective);
//   3. scale    the dynamic scale of each reduced amax (one Backend::compute_scales for all
//               weights whose layers cast to one format and scale rounding), then, for a
//               weight under delayed scaling whose history has a scale, that scale instead
//               (Float8Linear::DelayedCasts::weight_scale).
//
// cast_shard() casts a shard with that scale. The layer consumes the tensor in
// Float8Linear::State::adopt_fp8_weight (casts.cc). FsdpModel (fsdp/fsdp_model.cc) owns the
// shards and the all-gather itself.
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
  // One weight whose shards travel as fp8 codes: its layer (info().needs.fp8_weight) and the
  // shape of this rank's fp32 shard, [rows, row_elements] (padding rows included).
  struct Shard {
    Float8Linear* layer = nullptr;
    int64_t rows = 0;
    int64_t row_elements = 0;
  };
  // Reduces `count` floats of backend memory in place across ranks, MAX (queued or not:
  // the scales are derived after it, on the same backend).
  using AllReduceMax = std::function<absl::Status(float* values, int64_t count)>;

  // The amax and scale buffers of `shards` (at least one), on `backend`. The layers must
  // outlive this object.
  static absl::StatusOr<std::unique_ptr<Fp8WeightScales>> create(Backend& backend, std::vector<Shard> shards);
  Fp8WeightScales(const Fp8WeightScales&) = delete;
  Fp8WeightScales& operator=(const Fp8WeightScales&) = delete;

  int64_t size() const { return static_cast<int64_t>(shards_.size()); }
  // The fp8 format of weight i's codes (its layer's info().needs.weight_format).
  Format format(int64_t i) const;

  // Weight i, whole, as an Fp8Tensor: its shape, format, scale, inverse scale and amax;
  // the caller points codes and codes_t at the gathered codes. The scale buffers do not move
  // for this object's life, and refresh() rewrites them.
  Fp8Tensor bind(int64_t i) const;

  // Where an update writes shard i's row amaxes ([rows] fp32, backend memory; AdamW's
  // param_row_amax), one per weight in order. Allocated zeroed by the first call.
  absl::StatusOr<std::vector<float*>> row_amax_outputs();

  // Steps 1 to 3 above: every weight's global amax, reduced, and its scale and inverse,
  // queued; the host reads nothing. shard_values[i]: shard i's fp32 values (backend
  // memory). row_amaxes_current: row_amax_outputs() hold the shards' row amaxes as they are.
  absl::Status refresh(absl::Span<const float* const> shard_values, bool row_amaxes_current,
                       const AllReduceMax& all_reduce_max);

  // Shard i's fp32 values cast, tensorwise and saturating, with weight i's scale into
  // `codes` (rows * row_elements bytes): the bits the layer would have cast from the
  // gathered weight.
  absl::Status cast_shard(int64_t i, const float* shard_values, uint8_t* codes) const;

 private:
  Fp8WeightScales(Backend& backend, std::vector<Shard> shards);
  absl::Status allocate();
  // Step 1 alone: each shard's amax into amaxes_.
  absl::Status write_shard_amaxes(absl::Span<const float* const> shard_values, bool row_amaxes_current);

  Backend& backend_;
  std::vector<Shard> shards_;
  // Whether every layer derives a dynamic weight scale by one rule (format, pow2), so that
  // one launch computes all of them.
  bool one_rule_ = true;
  BackendBuffer amaxes_;      // [size()], one per weight, reduced in place
  BackendBuffer scales_;      // [size()]
  BackendBuffer inv_scales_;  // [size()]
  // [size(), row_amaxes_width_]: row i holds shard i's row amaxes, zeros after them (an
  // amax is never below zero), so one rowwise amax gives every shard's amax.
  BackendBuffer row_amaxes_;
  int64_t row_amaxes_width_ = 0;  // the most rows a shard has; 0 until allocated
};

}  // namespace fp8::engine
