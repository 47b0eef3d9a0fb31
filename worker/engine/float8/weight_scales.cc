#include "worker/engine/float8/weight_scales.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"

namespace fp8::engine {

Fp8WeightScales::Fp8WeightScales(Backend& backend, std::vector<Shard> shards)
    : backend_(backend),
      shards_(std::move(shards)),
      amaxes_(backend),
      scales_(backend),
      inv_scales_(backend),
      row_amaxes_(backend) {}

absl::StatusOr<std::unique_ptr<Fp8WeightScales>> Fp8WeightScales::create(Backend& backend,
                                                                         std::vector<Shard> shards) {
  if (shards.empty()) return absl::InvalidArgumentError("Fp8WeightScales: no weights");
  for (const Shard& s : shards) {
    if (s.layer == nullptr || s.rows <= 0 || s.row_elements <= 0) {
      return absl::InvalidArgumentError("Fp8WeightScales: a shard needs a layer and a positive shape");
    }
  }
  std::unique_ptr<Fp8WeightScales> w(new Fp8WeightScales(backend, std::move(shards)));
  if (auto st = w->allocate(); !st.ok()) return st;
  return w;
}

// Finds whether every layer scales its weight by one dynamic rule and allocates the
// zeroed amaxes and scales.
absl::Status Fp8WeightScales::allocate() {
  const CastConfig& first = shards_[0].layer->info().config.output.weight;
  for (const Shard& s : shards_) {
    if (!s.layer->info().needs.fp8_weight) {
      return absl::FailedPreconditionError(
          "Fp8WeightScales: a layer takes no fp8 weight (Float8LinearNeeds::fp8_weight)");
    }
    const CastConfig& c = s.layer->info().config.output.weight;
    if (c.format() != first.format() || c.pow2_scale != first.pow2_scale) one_rule_ = false;
  }
  const size_t bytes = float_bytes(size());
  for (BackendBuffer* b : {&amaxes_, &scales_, &inv_scales_}) {
    if (auto st = b->reserve(bytes); !st.ok()) return st;
    if (auto st = backend_.fill_zero(b->as<void>(), bytes); !st.ok()) return st;
  }
  return absl::OkStatus();
}

Format Fp8WeightScales::format(int64_t i) const {
  return shards_[static_cast<size_t>(i)].layer->info().needs.weight_format;
}

Fp8Tensor Fp8WeightScales::bind(int64_t i) const {
  const Float8Linear& layer = *shards_[static_cast<size_t>(i)].layer;
  Fp8Tensor w;
  w.scale = scales_.as<float>() + i;
  w.inv_scale = inv_scales_.as<float>() + i;
  // Each weight's global amax is where the all-reduce leaves it, until the next one.
  w.amax = amaxes_.as<float>() + i;
  w.format = layer.info().needs.weight_format;
  w.granularity = Granularity::kTensorwise;
  w.rows = layer.info().out_features;
  w.cols = layer.info().in_features;
  return w;
}

absl::StatusOr<std::vector<float*>> Fp8WeightScales::row_amax_outputs() {
  if (row_amaxes_width_ == 0) {
    // Row i for weight i, as wide as the most rows a shard has; zeros past a shard's own,
    // which nothing writes.
    int64_t width = 0;
    for (const Shard& s : shards_) width = std::max(width, s.rows);
    const size_t bytes = float_bytes(size() * width);
    if (auto st = row_amaxes_.reserve(bytes); !st.ok()) return st;
    if (auto st = backend_.fill_zero(row_amaxes_.as<void>(), bytes); !st.ok()) return st;
    row_amaxes_width_ = width;
  }
  std::vector<float*> outputs;
  for (int64_t i = 0; i < size(); ++i) outputs.push_back(row_amaxes_.as<float>() + i * row_amaxes_width_);
  return outputs;
}

absl::Status Fp8WeightScales::write_shard_amaxes(absl::Span<const float* const> shard_values,
                                                 bool row_amaxes_current) {
  float* amaxes = amaxes_.as<float>();
  if (row_amaxes_current && row_amaxes_width_ > 0) {
    // The max of a shard's row amaxes is its amax, bit for bit; row i of row_amaxes_ holds
    // shard i's, zeros after them: one launch for all.
    const MatrixRef rows{row_amaxes_.as<void>(), DType::kFloat32, size(), row_amaxes_width_};
    return backend_.amax(rows, Granularity::kRowwise, amaxes);
  }
  for (int64_t i = 0; i < size(); ++i) {
    const Shard& s = shards_[static_cast<size_t>(i)];
    const MatrixRef shard{shard_values[static_cast<size_t>(i)], DType::kFloat32, s.rows, s.row_elements};
    if (auto st = backend_.amax(shard, Granularity::kTensorwise, amaxes + i); !st.ok()) return st;
  }
  return absl::OkStatus();
}

absl::Status Fp8WeightScales::refresh(absl::Span<const float* const> shard_values, bool row_amaxes_current,
                                      const AllReduceMax& all_reduce_max) {
  if (static_cast<int64_t>(shard_values.size()) != size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Fp8WeightScales::refresh: ", shard_values.size(), " shards for ", size(), " weights"));
  }
  if (auto st = write_shard_amaxes(shard_values, row_amaxes_current); !st.ok()) return st;
  float* amaxes = amaxes_.as<float>();
  if (auto st = all_reduce_max(amaxes, size()); !st.ok()) return st;
  // Exactly the scales (and inverses) the layers would have derived from the whole
  // weights, on the device: the host reads no amax.
  float* scales = scales_.as<float>();
  float* inv_scales = inv_scales_.as<float>();
  for (int64_t i = 0; i < size(); i += one_rule_ ? size() : 1) {
    const CastConfig& rule = shards_[static_cast<size_t>(i)].layer->info().config.output.weight;
    if (auto st = backend_.compute_scales(amaxes + i, one_rule_ ? size() : 1, rule.format(), rule.pow2_scale,
                                          scales + i, inv_scales + i);
        !st.ok()) {
      return st;
    }
  }
  // Delayed scaling: the history's scale, once it has one, in place of the dynamic one.
  for (int64_t i = 0; i < size(); ++i) {
    const std::optional<Float8Linear::DelayedCasts::ScaleRef> delayed =
        shards_[static_cast<size_t>(i)].layer->delayed().weight_scale();
    if (!delayed.has_value()) continue;
    if (auto st = backend_.copy(scales + i, delayed->scale, sizeof(float)); !st.ok()) return st;
    if (auto st = backend_.copy(inv_scales + i, delayed->inv_scale, sizeof(float)); !st.ok()) return st;
  }
  return absl::OkStatus();
}

absl::Status Fp8WeightScales::cast_shard(int64_t i, const float* shard_values, uint8_t* codes) const {
  const Shard& s = shards_[static_cast<size_t>(i)];
  CastArgs c;
  c.input = MatrixRef{shard_values, DType::kFloat32, s.rows, s.row_elements};
  c.format = s.layer->info().needs.weight_format;
  c.granularity = Granularity::kTensorwise;
  c.scale = scales_.as<float>() + i;
  c.saturate = true;
  c.out = codes;
  return backend_.cast(c);
}

}  // namespace fp8::engine
