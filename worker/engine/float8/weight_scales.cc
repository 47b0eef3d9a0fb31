#include "worker/engine/float8/weight_scales.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "worker/engine/float8/transpose_elements.h"

namespace fp8::engine {

namespace {

// Amaxes (and scales) a cast of the whole padded weight [rows, cols] has.
int64_t cast_floats(const Fp8WeightCast& c, int64_t rows, int64_t cols) { return scale_count(c.granularity, rows, cols); }

bool supported(Granularity g) { return g != Granularity::kBlock1x128; }

}  // namespace

Fp8WeightScales::Fp8WeightScales(Backend& backend, std::vector<Shard> shards)
    : backend_(backend),
      amaxes_(backend),
      scales_(backend),
      inv_scales_(backend),
      row_amaxes_(backend),
      block_values_(backend),
      block_codes_(backend),
      grid_planes_(backend),
      grid_planes_t_(backend) {
  for (Shard& s : shards) {
    if (s.padded_rows == 0) s.padded_rows = s.rows;
    if (s.padded_cols == 0) s.padded_cols = s.row_elements;
    Weight w;
    w.shard = s;
    weights_.push_back(w);
  }
}

absl::StatusOr<std::unique_ptr<Fp8WeightScales>> Fp8WeightScales::create(Backend& backend,
                                                                         std::vector<Shard> shards) {
  if (shards.empty()) return absl::InvalidArgumentError("Fp8WeightScales: no weights");
  for (const Shard& s : shards) {
    if (s.layer == nullptr || s.rows <= 0 || s.row_elements <= 0 || s.first_row < 0 ||
        (s.padded_rows != 0 && s.first_row + s.rows > s.padded_rows) || s.first_col < 0 ||
        (s.padded_cols != 0 && s.first_col + s.row_elements > s.padded_cols) || s.part_first_row < 0 ||
        s.part_first_row > s.first_row) {
      return absl::InvalidArgumentError(
          "Fp8WeightScales: a shard needs a layer, a positive shape and rows and columns inside the padded weight");
    }
    if (!s.layer->info().needs.fp8_weight) {
      return absl::FailedPreconditionError(
          "Fp8WeightScales: a layer takes no fp8 weight (Float8LinearNeeds::fp8_weight)");
    }
    if (s.row_elements != s.layer->info().in_features) {
      return absl::InvalidArgumentError(absl::StrCat("Fp8WeightScales: a shard's rows have ", s.row_elements,
                                                     " elements, its layer's weight ", s.layer->info().in_features));
    }
  }
  std::unique_ptr<Fp8WeightScales> w(new Fp8WeightScales(backend, std::move(shards)));
  if (auto st = w->allocate(); !st.ok()) return st;
  return w;
}

// Lays the casts out in the buffers (every output cast first, in weight order, then the
// grad_input casts of their own, then the transposed block grids), finds whether one rule
// scales them all, and allocates the zeroed buffers.
absl::Status Fp8WeightScales::allocate() {
  const Fp8WeightCast& first = weights_[0].shard.layer->info().needs.weight_output;
  auto take = [](int64_t& end, int64_t count) { return Span{std::exchange(end, end + count), count}; };
  for (Weight& w : weights_) {
    const Float8LinearNeeds& needs = w.shard.layer->info().needs;
    w.output = needs.weight_output;
    w.grad_input = needs.weight_grad_input;
    w.own_grad_input_codes = !needs.weight_codes_shared;
    if (!supported(w.output.granularity) || !supported(w.grad_input.granularity)) {
      return absl::InvalidArgumentError("Fp8WeightScales: a weight is cast at 1x128 tiles");
    }
    const bool placed = w.shard.padded_cols != w.shard.row_elements || w.shard.part_first_row != 0;
    if (placed && (w.output.granularity == Granularity::kBlock128x128 ||
                   w.grad_input.granularity == Granularity::kBlock128x128)) {
      return absl::InvalidArgumentError("Fp8WeightScales: a block-cast weight placed in a larger one");
    }
    if (placed) partial_amaxes_ = true;  // its columns' amaxes too are some of the whole's
    for (const Fp8WeightCast* c : {&w.output, &w.grad_input}) {
      if (c->format != first.format || c->pow2_scale != first.pow2_scale) one_rule_ = false;
    }
    all_output_tensorwise_ = all_output_tensorwise_ && w.output.granularity == Granularity::kTensorwise;
    for (const Fp8WeightCast* c : {&w.output, &w.grad_input}) {
      if (c->granularity == Granularity::kRowwise || c->granularity == Granularity::kBlock128x128) {
        partial_amaxes_ = true;
      }
    }
    w.output_scales = take(reduced_floats_, cast_floats(w.output, w.shard.padded_rows, w.shard.padded_cols));
  }
  for (Weight& w : weights_) {
    w.grad_input_cast = w.own_grad_input_codes
                            ? take(reduced_floats_, cast_floats(w.grad_input, w.shard.padded_rows,
                                                                w.shard.padded_cols))
                            : w.output_scales;
  }
  total_floats_ = reduced_floats_;
  for (Weight& w : weights_) {
    const Float8LinearInfo& info = w.shard.layer->info();
    // The grad_input GEMM reads the transpose [in, out], scaled by its own block grid.
    w.grad_input_scales = w.grad_input.granularity == Granularity::kBlock128x128
                              ? take(total_floats_, scale_count(Granularity::kBlock128x128, info.in_features,
                                                                info.out_features))
                              : w.grad_input_cast;
  }
  const size_t bytes = float_bytes(total_floats_);
  for (BackendBuffer* b : {&amaxes_, &scales_, &inv_scales_}) {
    if (auto st = b->reserve(bytes); !st.ok()) return st;
    if (auto st = backend_.fill_zero(b->as<void>(), bytes); !st.ok()) return st;
  }
  return absl::OkStatus();
}

bool Fp8WeightScales::has_grad_input_codes(int64_t i) const {
  return weights_[static_cast<size_t>(i)].own_grad_input_codes;
}

Fp8Weight Fp8WeightScales::bind(int64_t i) const {
  const Weight& w = weights_[static_cast<size_t>(i)];
  const Float8LinearInfo& info = w.shard.layer->info();
  auto tensor = [&](const Fp8WeightCast& c, Span span, int64_t rows, int64_t cols) {
    // The layer's part of a placed weight: its rows' scales, or its columns'.
    const int64_t at = span.offset + (c.granularity == Granularity::kRowwise      ? w.shard.part_first_row
                                      : c.granularity == Granularity::kColumnwise ? w.shard.first_col
                                                                                  : 0);
    Fp8Tensor t;
    t.scale = scales_.as<float>() + at;
    t.inv_scale = inv_scales_.as<float>() + at;
    // The whole weight's amaxes are where the all-reduce leaves them, until the next one.
    t.amax = amaxes_.as<float>() + at;
    t.format = c.format;
    t.granularity = c.granularity;
    t.rows = rows;
    t.cols = cols;
    return t;
  };
  Fp8Weight bound;
  bound.output = tensor(w.output, w.output_scales, info.out_features, info.in_features);
  const bool block = w.grad_input.granularity == Granularity::kBlock128x128;
  bound.grad_input = tensor(w.grad_input, w.grad_input_scales, block ? info.in_features : info.out_features,
                            block ? info.out_features : info.in_features);
  return bound;
}

absl::StatusOr<std::vector<float*>> Fp8WeightScales::row_amax_outputs() {
  if (row_amaxes_width_ == 0) {
    // Row i for weight i, as wide as the most rows a shard has; zeros past a shard's own,
    // which nothing writes.
    int64_t width = 0;
    for (const Weight& w : weights_) width = std::max(width, w.shard.rows);
    const size_t bytes = float_bytes(size() * width);
    if (auto st = row_amaxes_.reserve(bytes); !st.ok()) return st;
    if (auto st = backend_.fill_zero(row_amaxes_.as<void>(), bytes); !st.ok()) return st;
    row_amaxes_width_ = width;
  }
  std::vector<float*> outputs;
  for (int64_t i = 0; i < size(); ++i) outputs.push_back(row_amaxes_.as<float>() + i * row_amaxes_width_);
  return outputs;
}

int64_t Fp8WeightScales::first_block_row(const Shard& s) const { return s.first_row / kScaleBlock; }

absl::StatusOr<MatrixRef> Fp8WeightScales::block_aligned(const Shard& s, const float* values) {
  const int64_t cols = s.row_elements;
  if (s.first_row % kScaleBlock == 0 && s.rows % kScaleBlock == 0) {
    return MatrixRef{values, DType::kFloat32, s.rows, cols};
  }
  const int64_t first = first_block_row(s) * kScaleBlock;
  const int64_t rows = scale_blocks(s.first_row + s.rows) * kScaleBlock - first;
  const size_t bytes = float_bytes(rows * cols);
  if (auto st = block_values_.reserve(bytes); !st.ok()) return st;
  if (auto st = backend_.fill_zero(block_values_.as<void>(), bytes); !st.ok()) return st;
  if (auto st = backend_.copy(block_values_.as<float>() + (s.first_row - first) * cols, values,
                              float_bytes(s.rows * cols));
      !st.ok()) {
    return st;
  }
  return MatrixRef{block_values_.as<const void>(), DType::kFloat32, rows, cols};
}

absl::Status Fp8WeightScales::write_amaxes(const Weight& w, const Fp8WeightCast& cast, Span span, const float* values,
                                           const float* row_amaxes) {
  const Shard& s = w.shard;
  float* out = amaxes_.as<float>() + span.offset;
  const MatrixRef shard{values, DType::kFloat32, s.rows, s.row_elements};
  switch (cast.granularity) {
    case Granularity::kTensorwise:
      // The max of a shard's row amaxes is its amax, bit for bit.
      if (row_amaxes != nullptr) {
        return backend_.amax({row_amaxes, DType::kFloat32, 1, s.rows}, Granularity::kTensorwise, out);
      }
      return backend_.amax(shard, Granularity::kTensorwise, out);
    case Granularity::kRowwise:
      if (row_amaxes != nullptr) return backend_.copy(out + s.first_row, row_amaxes, float_bytes(s.rows));
      return backend_.amax(shard, Granularity::kRowwise, out + s.first_row);
    case Granularity::kColumnwise:
      return backend_.amax(shard, Granularity::kColumnwise, out + s.first_col);
    case Granularity::kBlock128x128: {
      absl::StatusOr<MatrixRef> aligned = block_aligned(s, values);
      if (!aligned.ok()) return aligned.status();
      return backend_.amax(*aligned, Granularity::kBlock128x128,
                           out + first_block_row(s) * block128x128_ld(s.row_elements));
    }
    case Granularity::kBlock1x128:
      break;
  }
  return absl::InternalError("Fp8WeightScales: a weight cast at 1x128 tiles");
}

absl::Status Fp8WeightScales::transpose_grid(const Weight& w, Span from, Span to) {
  // The weight's grid [blocks of out, ld(in)] (the first rows: those of the real weight)
  // becomes the transpose's [blocks of in, ld(out)].
  const Float8LinearInfo& info = w.shard.layer->info();
  const int64_t rows = scale_blocks(info.out_features), cols = block128x128_ld(info.in_features);
  if (auto st = grid_planes_.reserve(float_bytes(rows * cols)); !st.ok()) return st;
  if (auto st = grid_planes_t_.reserve(float_bytes(rows * cols)); !st.ok()) return st;
  auto* planes = grid_planes_.as<uint8_t>();
  if (auto st = transpose_elements(backend_, amaxes_.as<float>() + from.offset, rows, cols, sizeof(float), planes,
                                   grid_planes_t_.as<uint8_t>(), planes);
      !st.ok()) {
    return st;
  }
  // [cols, rows] floats, of which the first blocks-of-in rows go to the layer's grid, whose
  // padding entries stay zero (an all-zero block's amax, as the core writes them).
  float* dst = amaxes_.as<float>() + to.offset;
  if (auto st = backend_.fill_zero(dst, float_bytes(to.count)); !st.ok()) return st;
  const size_t row_bytes = float_bytes(rows);
  return backend_.copy_rows(dst, float_bytes(block128x128_ld(info.out_features)), planes, row_bytes, row_bytes,
                            static_cast<size_t>(scale_blocks(info.in_features)));
}

absl::Status Fp8WeightScales::refresh(absl::Span<const float* const> shard_values, bool row_amaxes_current,
                                      const AllReduceMax& all_reduce_max) {
  if (static_cast<int64_t>(shard_values.size()) != size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Fp8WeightScales::refresh: ", shard_values.size(), " shards for ", size(), " weights"));
  }
  float* amaxes = amaxes_.as<float>();
  const bool from_rows = row_amaxes_current && row_amaxes_width_ > 0;
  // Entries of other shards' rows and blocks stay zero for the MAX.
  if (partial_amaxes_) {
    if (auto st = backend_.fill_zero(amaxes, float_bytes(reduced_floats_)); !st.ok()) return st;
  }
  // Every weight's tensorwise output amax from its row amaxes: one launch for all, below.
  const bool batched = all_output_tensorwise_ && from_rows;
  for (int64_t i = 0; i < size(); ++i) {
    const Weight& w = weights_[static_cast<size_t>(i)];
    const float* rows = from_rows ? row_amaxes_.as<float>() + i * row_amaxes_width_ : nullptr;
    if (!batched) {
      if (auto st = write_amaxes(w, w.output, w.output_scales, shard_values[static_cast<size_t>(i)], rows); !st.ok()) {
        return st;
      }
    }
    if (w.own_grad_input_codes) {
      if (auto st = write_amaxes(w, w.grad_input, w.grad_input_cast, shard_values[static_cast<size_t>(i)], rows);
          !st.ok()) {
        return st;
      }
    }
  }
  if (batched) {
    // Row i of row_amaxes_ holds shard i's row amaxes, zeros after them.
    const MatrixRef rows{row_amaxes_.as<void>(), DType::kFloat32, size(), row_amaxes_width_};
    if (auto st = backend_.amax(rows, Granularity::kRowwise, amaxes); !st.ok()) return st;
  }
  if (auto st = all_reduce_max(amaxes, reduced_floats_); !st.ok()) return st;
  for (const Weight& w : weights_) {
    if (w.grad_input_scales.offset == w.grad_input_cast.offset) continue;
    if (auto st = transpose_grid(w, w.grad_input_cast, w.grad_input_scales); !st.ok()) return st;
  }
  // Exactly the scales (and inverses) the layers would have derived from the whole
  // weights, on the device: the host reads no amax.
  float* scales = scales_.as<float>();
  float* inv_scales = inv_scales_.as<float>();
  auto compute = [&](const Fp8WeightCast& rule, Span span) {
    return backend_.compute_scales(amaxes + span.offset, span.count, rule.format, rule.pow2_scale,
                                   scales + span.offset, inv_scales + span.offset);
  };
  if (one_rule_) {
    if (auto st = compute(weights_[0].output, Span{0, total_floats_}); !st.ok()) return st;
  } else {
    for (const Weight& w : weights_) {
      if (auto st = compute(w.output, w.output_scales); !st.ok()) return st;
      if (w.own_grad_input_codes) {
        if (auto st = compute(w.grad_input, w.grad_input_cast); !st.ok()) return st;
      }
      if (w.grad_input_scales.offset != w.grad_input_cast.offset) {
        if (auto st = compute(w.grad_input, w.grad_input_scales); !st.ok()) return st;
      }
    }
  }
  // Delayed scaling (tensorwise, one cast for both GEMMs): the history's scale, once it has
  // one, in place of the dynamic one.
  for (const Weight& w : weights_) {
    const std::optional<Float8Linear::DelayedCasts::ScaleRef> delayed = w.shard.layer->delayed().weight_scale();
    if (!delayed.has_value()) continue;
    const int64_t at = w.output_scales.offset;
    if (auto st = backend_.copy(scales + at, delayed->scale, sizeof(float)); !st.ok()) return st;
    if (auto st = backend_.copy(inv_scales + at, delayed->inv_scale, sizeof(float)); !st.ok()) return st;
  }
  return absl::OkStatus();
}

absl::Status Fp8WeightScales::cast_one(const Weight& w, const Fp8WeightCast& cast, Span span, const float* values,
                                       uint8_t* codes) {
  const Shard& s = w.shard;
  CastArgs c;
  c.input = MatrixRef{values, DType::kFloat32, s.rows, s.row_elements};
  c.format = cast.format;
  c.granularity = cast.granularity;
  c.scale = scales_.as<float>() + span.offset;
  c.saturate = true;
  c.out = codes;
  if (cast.granularity == Granularity::kRowwise) c.scale += s.first_row;
  if (cast.granularity == Granularity::kColumnwise) c.scale += s.first_col;
  if (cast.granularity != Granularity::kBlock128x128) return backend_.cast(c);
  // Blocks: the shard within whole blocks of the padded weight, cast with those blocks'
  // scales, its own rows' codes copied out.
  absl::StatusOr<MatrixRef> aligned = block_aligned(s, values);
  if (!aligned.ok()) return aligned.status();
  c.input = *aligned;
  c.scale += first_block_row(s) * block128x128_ld(s.row_elements);
  if (aligned->data == values) return backend_.cast(c);
  if (auto st = block_codes_.reserve(static_cast<size_t>(aligned->size())); !st.ok()) return st;
  c.out = block_codes_.as<uint8_t>();
  if (auto st = backend_.cast(c); !st.ok()) return st;
  const int64_t skipped = s.first_row - first_block_row(s) * kScaleBlock;
  return backend_.copy(codes, block_codes_.as<uint8_t>() + skipped * s.row_elements,
                       static_cast<size_t>(s.rows * s.row_elements));
}

absl::Status Fp8WeightScales::cast_shard(int64_t i, const float* shard_values, uint8_t* output_codes,
                                         uint8_t* grad_input_codes) {
  const Weight& w = weights_[static_cast<size_t>(i)];
  if (auto st = cast_one(w, w.output, w.output_scales, shard_values, output_codes); !st.ok()) return st;
  if (!w.own_grad_input_codes) return absl::OkStatus();
  if (grad_input_codes == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("Fp8WeightScales::cast_shard: weight ", i, " needs grad_input codes of its own"));
  }
  return cast_one(w, w.grad_input, w.grad_input_cast, shard_values, grad_input_codes);
}

}  // namespace fp8::engine
