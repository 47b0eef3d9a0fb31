#include "worker/engine/model/split_weight_casts.h"

#include <utility>

#include "worker/engine/status_macros.h"

namespace fp8::engine {

absl::StatusOr<std::unique_ptr<SplitWeightCasts>> SplitWeightCasts::create(Backend& backend, TensorParallelComm& tp,
                                                                           std::vector<LinearUnit*> units) {
  std::unique_ptr<SplitWeightCasts> c(new SplitWeightCasts(backend, tp));
  std::vector<Fp8WeightScales::Shard> shards;
  for (LinearUnit* u : units) {
    const Parameter& w = *u->weight;
    if (w.split.axis != 0) return absl::InvalidArgumentError("SplitWeightCasts: " + u->name + " is not split by rows");
    const int64_t rows = w.shape.at(0), cols = w.shape.at(1);
    auto cast = std::make_unique<Cast>(Cast{u, rows * w.split.index, BackendBuffer(backend), BackendBuffer(backend),
                                            BackendBuffer(backend), {}});
    for (BackendBuffer* b : {&cast->output_codes, &cast->grad_input_codes, &cast->grad_input_codes_t}) {
      FP8_RETURN_IF_ERROR(b->reserve(static_cast<size_t>(rows * cols)));
    }
    shards.push_back({u->layer.get(), rows, cols, cast->first_row, rows * w.split.parts, 0, 0, cast->first_row});
    c->casts_.push_back(std::move(cast));
  }
  FP8_ASSIGN_OR_RETURN(c->scales_, Fp8WeightScales::create(backend, std::move(shards)));
  for (size_t i = 0; i < c->casts_.size(); ++i) {
    Cast& cast = *c->casts_[i];
    // The whole weight's scales for this rank's rows (Shard::part_first_row).
    Fp8Weight bound = c->scales_->bind(static_cast<int64_t>(i));
    if (bound.output.granularity == Granularity::kBlock128x128) {
      return absl::InvalidArgumentError("SplitWeightCasts: " + cast.unit->name + " is cast per block");
    }
    bound.output.codes = cast.output_codes.as<uint8_t>();
    bound.grad_input.codes_t = cast.grad_input_codes_t.as<uint8_t>();
    cast.weight = bound;
    cast.unit->gathered_fp8 = &cast.weight;
  }
  return c;
}

absl::Status SplitWeightCasts::refresh() {
  std::vector<const float*> values;
  for (const auto& cast : casts_) values.push_back(cast->unit->weight->value.data<float>());
  FP8_RETURN_IF_ERROR(scales_->refresh(values, /*row_amaxes_current=*/false,
                                       [this](float* amaxes, int64_t count) { return tp_.max(amaxes, count); }));
  for (size_t i = 0; i < casts_.size(); ++i) {
    Cast& cast = *casts_[i];
    const auto index = static_cast<int64_t>(i);
    const bool own = scales_->has_grad_input_codes(index);
    FP8_RETURN_IF_ERROR(scales_->cast_shard(index, values[i], cast.output_codes.as<uint8_t>(),
                                            own ? cast.grad_input_codes.as<uint8_t>() : nullptr));
    const int64_t rows = cast.unit->weight->shape.at(0), cols = cast.unit->weight->shape.at(1);
    // The grad_input GEMM reads its codes transposed: [in, out].
    const uint8_t* from = own ? cast.grad_input_codes.as<uint8_t>() : cast.output_codes.as<uint8_t>();
    FP8_RETURN_IF_ERROR(backend_.transpose_bytes(from, rows, cols, cast.grad_input_codes_t.as<uint8_t>()));
  }
  return absl::OkStatus();
}

}  // namespace fp8::engine
