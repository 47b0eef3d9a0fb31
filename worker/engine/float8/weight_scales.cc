#include "worker/engine/float8/weight_scales.h"

#include <algorithm>
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

// Takes each layer's own scale slots, finds whether every layer scales its weight by one
// dynamic rule (then the scales are computed together, here), and allocates the zeroed
// amaxes and, with a shared rule, the scales.
absl::Status Fp8WeightScales::allocate() {
  for (const Shard& s : shards_) {
    absl::StatusOr<Float8Linear::Fp8WeightScaleSlots> slots = s.layer->fp8_weight_scale_slots();
    if (!slots.ok()) return slots.status();
    slots_.push_back(*slots);
  }
  // One rule for every weight's scale (the tensorwise recipe's, not delayed scaling's).
  shared_rule_ = shards_[0].layer->dynamic_weight_scale_rule();
  for (const Shard& s : shards_) {
    if (s.layer->dynamic_weight_scale_rule() != shared_rule_) shared_rule_.reset();
  }
  const size_t bytes = float_bytes(size());
  if (shared_rule_.has_value()) {
    for (BackendBuffer* b : {&scales_, &inv_scales_}) {
      if (auto st = b->reserve(bytes); !st.ok()) return st;
      if (auto st = backend_.fill_zero(b->as<void>(), bytes); !st.ok()) return st;
    }
  }
  if (auto st = amaxes_.reserve(bytes); !st.ok()) return st;
  return backend_.fill_zero(amaxes_.as<void>(), bytes);
}

Format Fp8WeightScales::format(int64_t i) const { return shards_[static_cast<size_t>(i)].layer->weight_format(); }

void Fp8WeightScales::bind(int64_t i, Fp8Weight& w) const {
  if (shared_rule_.has_value()) {
    w.scale = scales_.as<float>() + i;
    w.inv_scale = inv_scales_.as<float>() + i;
    w.scales_stay = true;
  } else {
    w.scale = slots_[static_cast<size_t>(i)].scale;
    w.inv_scale = slots_[static_cast<size_t>(i)].inv_scale;
  }
  // Each weight's global amax is read where the all-reduce leaves it, until the next one
  // (the next step's first forward): by the layer too, which then copies none in.
  w.amax = amaxes_.as<float>() + i;
  w.amax_stays = true;
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
  // weights, on the device: the host reads no amax. All at once where every layer takes the
  // same dynamic rule, into the scales the layers read where they are.
  if (shared_rule_.has_value()) {
    return backend_.compute_scales(amaxes, size(), shared_rule_->format, shared_rule_->pow2, scales_.as<float>(),
                                   inv_scales_.as<float>());
  }
  for (int64_t i = 0; i < size(); ++i) {
    const Float8Linear::Fp8WeightScaleSlots& slots = slots_[static_cast<size_t>(i)];
    if (auto st = shards_[static_cast<size_t>(i)].layer->write_fp8_weight_scale(amaxes + i, slots.scale,
                                                                                  slots.inv_scale);
        !st.ok()) {
      return st;
    }
  }
  return absl::OkStatus();
}

absl::Status Fp8WeightScales::cast_shard(int64_t i, const float* shard_values, uint8_t* codes) const {
  const Shard& s = shards_[static_cast<size_t>(i)];
  CastArgs c;
  c.input = MatrixRef{shard_values, DType::kFloat32, s.rows, s.row_elements};
  c.format = s.layer->weight_format();
  c.granularity = Granularity::kTensorwise;
  c.scale = shared_rule_.has_value() ? scales_.as<float>() + i : slots_[static_cast<size_t>(i)].scale;
  c.saturate = true;
  c.out = codes;
  return backend_.cast(c);
}

}  // namespace fp8::engine
