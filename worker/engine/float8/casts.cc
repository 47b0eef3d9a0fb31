// Float8Linear's casts: which tensors it casts for which GEMM (planned once, at
// construction), running them (dynamic or delayed scaling, shared input casts, fp8 weights
// cast elsewhere), and the operands the GEMMs then take. State is linear_state.h's.
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/engine/float8/linear_state.h"
#include "worker/engine/float8/transpose_elements.h"

namespace fp8::engine {

// ---- construction -------------------------------------------------------------------------

int Float8Linear::State::add_plan(TensorKind t, const CastConfig& c, Orientation o, const char* gemm) {
  CastPlan& p = plans.emplace_back(backend);
  p.tensor = t;
  p.config = c;
  if (c.granularity == ScaleGranularity::kTensorwise) {
    p.granularity = Granularity::kTensorwise;
  } else if (c.granularity == ScaleGranularity::kBlock) {
    // The weight's blocks are 128x128, the activations' tiles 1x128 along K. A transposed
    // use casts the transposed tensor itself (fp8.h: the kernels make no block-scaled
    // out_t), so its tiles run along the other dimension, as its GEMM contracts; for the
    // weight the same 128x128 blocks come out, transposed.
    p.granularity = t == TensorKind::kWeight ? Granularity::kBlock128x128 : Granularity::kBlock1x128;
    p.cast_transposed = o == kTransposed;
  } else {
    p.granularity = o == kAsStored ? Granularity::kRowwise : Granularity::kColumnwise;
  }
  p.gemms = gemm;
  return static_cast<int>(plans.size()) - 1;
}

void Float8Linear::State::plan_tensor(TensorKind t, const CastConfig& as_stored, bool as_stored_fp8_gemm,
                                      const char* as_stored_gemm, const CastConfig& transposed,
                                      bool transposed_fp8_gemm, const char* transposed_gemm) {
  auto& u = use[static_cast<int>(t)];
  if (as_stored.is_fp8()) u[kAsStored] = add_plan(t, as_stored, kAsStored, as_stored_gemm);
  if (transposed.is_fp8()) {
    // A tensorwise scale is the same for both orientations, so one fused cast+transpose
    // pass serves both GEMMs when they cast alike.
    const bool shared =
        u[kAsStored] >= 0 && transposed == as_stored && as_stored.granularity == ScaleGranularity::kTensorwise;
    if (shared) {
      u[kTransposed] = u[kAsStored];
      plans[static_cast<size_t>(u[kTransposed])].gemms += std::string("+") + transposed_gemm;
    } else {
      u[kTransposed] = add_plan(t, transposed, kTransposed, transposed_gemm);
    }
  }
  // An fp8 GEMM takes the fp8 copy in its orientation; a mixed GEMM takes the dequantized
  // copy as stored (the high-precision GEMM transposes by itself).
  if (u[kAsStored] >= 0) {
    CastPlan& p = plans[static_cast<size_t>(u[kAsStored])];
    p.make_out = true;
    p.make_dequantized = p.make_dequantized || !as_stored_fp8_gemm;
  }
  if (u[kTransposed] >= 0) {
    CastPlan& p = plans[static_cast<size_t>(u[kTransposed])];
    if (transposed_fp8_gemm) {
      p.make_out_t = true;
    } else {
      p.make_out = true;
      p.make_dequantized = true;
    }
  }
}

void Float8Linear::State::plan_delayed_scaling() {
  for (size_t i = 0; i < plans.size(); ++i) {
    CastPlan& p = plans[i];
    if (p.config.scaling != ScalingMode::kDelayed) continue;
    p.delayed = true;
    p.delayed_index = static_cast<int>(delayed_plans.size());
    p.delayed_column = slots_of(p.tensor).columns++;
    delayed_plans.push_back(static_cast<int>(i));
  }
}

// ---- casts ----------------------------------------------------------------------------------

namespace {

// Grows `buffer` to hold at least `count` copies of `one` (T's bit pattern of 1.0).
template <class T>
absl::Status fill_ones(Backend& backend, BackendBuffer& buffer, int64_t& filled, int64_t count, T one) {
  if (count <= filled) return absl::OkStatus();
  if (auto s = buffer.reserve(static_cast<size_t>(count) * sizeof(T)); !s.ok()) return s;
  const std::vector<T> host(static_cast<size_t>(count), one);
  if (auto s = backend.copy_from_host(buffer.as<void>(), host.data(), host.size() * sizeof(T)); !s.ok()) return s;
  filled = count;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<const void*> Float8Linear::State::hp_ones(DType dtype, int64_t count) {
  if (dtype == DType::kBFloat16) {
    if (auto s = fill_ones(backend, bf16_ones, bf16_ones_count, count, float_to_bf16(1.0f)); !s.ok()) return s;
    return bf16_ones.as<const void>();
  }
  if (auto s = fill_ones(backend, f32_ones, f32_ones_count, count, 1.0f); !s.ok()) return s;
  return f32_ones.as<const void>();
}

absl::StatusOr<CastRangeCounts*> Float8Linear::State::prepare_cast(CastPlan& p, const MatrixRef& input) {
  const int64_t n = input.size();
  const int64_t scales = scale_count(p.granularity, input.rows, input.cols);
  absl::Status reserved;  // keeps the first error
  if (p.make_out) reserved.Update(p.copies->out.reserve(static_cast<size_t>(n)));
  if (p.make_out_t) reserved.Update(p.copies->out_t.reserve(static_cast<size_t>(n)));
  if (p.make_dequantized) reserved.Update(p.copies->dequantized.reserve(dtype_bytes(compute_dtype(), n)));
  reserved.Update(p.scale.reserve(float_bytes(scales)));
  reserved.Update(p.inv_scale.reserve(float_bytes(scales)));
  reserved.Update(p.amax.reserve(float_bytes(scales)));
  if (!reserved.ok()) return reserved;
  absl::StatusOr<CastRangeCounts*> range_counts = range_counts_for(p);
  if (!range_counts.ok()) return range_counts.status();
  p.external = false;
  p.shared = nullptr;
  return range_counts;
}

void Float8Linear::State::finish_cast(CastPlan& p, const MatrixRef& input, const float* scale,
                                      const float* inv_scale) {
  Fp8Tensor& t = p.in_use;
  t.codes = p.make_out ? p.copies->out.as<uint8_t>() : nullptr;
  t.codes_t = p.make_out_t ? p.copies->out_t.as<uint8_t>() : nullptr;
  t.scale = scale;
  t.inv_scale = inv_scale;
  t.amax = p.delayed ? nullptr : p.amax.as<float>();
  t.format = p.config.format();
  t.granularity = p.granularity;
  t.rows = input.rows;
  t.cols = input.cols;
}

absl::Status Float8Linear::State::transpose_high_precision(const MatrixRef& input) {
  const int64_t n = input.size();
  if (auto s = transposed_input.reserve(dtype_bytes(input.dtype, n)); !s.ok()) return s;
  if (auto s = transpose_scratch.reserve(dtype_bytes(input.dtype, n)); !s.ok()) return s;
  return transpose_elements(backend, input.data, input.rows, input.cols, dtype_size(input.dtype),
                            transposed_input.as<uint8_t>(), transpose_scratch.as<uint8_t>(),
                            transposed_input.as<uint8_t>());
}

absl::Status Float8Linear::State::run_block_cast_transposed(CastPlan& p, const MatrixRef& input) {
  if (auto s = transpose_high_precision(input); !s.ok()) return s;
  const MatrixRef t{transposed_input.as<const void>(), input.dtype, input.cols, input.rows};
  absl::StatusOr<CastRangeCounts*> range_counts = prepare_cast(p, t);
  if (!range_counts.ok()) return range_counts.status();
  QuantizeArgs q;
  q.input = t;
  q.format = p.config.format();
  q.granularity = p.granularity;
  q.pow2_scale = p.config.pow2_scale;
  q.out = p.copies->out_t.as<uint8_t>();  // the transposed copy, as the GEMM reads it
  q.scale_out = p.scale.as<float>();
  q.inv_scale_out = p.inv_scale.as<float>();
  q.amax_out = p.amax.as<float>();
  q.range_counts = *range_counts;
  if (auto s = backend.quantize(q); !s.ok()) return s;
  // in_use describes the transposed matrix that was cast: its scales' layout follows it.
  finish_cast(p, t, p.scale.as<float>(), p.inv_scale.as<float>());
  p.last_amax_row = -1;
  return absl::OkStatus();
}

absl::Status Float8Linear::State::run_cast(CastPlan& p, const MatrixRef& input, int slot_row,
                                           const float* known_row_amax) {
  // Block casts are dynamic and feed fp8 GEMMs only (config.cc's validate).
  if (p.cast_transposed) return run_block_cast_transposed(p, input);
  absl::StatusOr<CastRangeCounts*> range_counts = prepare_cast(p, input);
  if (!range_counts.ok()) return range_counts.status();
  uint8_t* out = p.make_out ? p.copies->out.as<uint8_t>() : nullptr;
  uint8_t* out_t = p.make_out_t ? p.copies->out_t.as<uint8_t>() : nullptr;
  float* delayed_amax = p.delayed ? slots_of(p.tensor).at(slot_row, p.delayed_column) : nullptr;

  if (p.delayed && p.delayed_scale_ready) {
    // The scale was derived from the history before this cast; the cast measures this
    // step's amax in the same pass, for finish_step() to record.
    const float* scale = delayed_scale_entry(p.delayed_index);
    CastArgs c;
    c.input = input;
    c.format = p.config.format();
    c.granularity = Granularity::kTensorwise;
    c.scale = scale;
    c.out = out;
    c.out_t = out_t;
    c.amax_out = delayed_amax;
    c.range_counts = *range_counts;
    if (auto s = backend.cast(c); !s.ok()) return s;
    finish_cast(p, input, scale, scale + kFloatsPer16Bytes);
  } else {
    // Dynamic scaling. A delayed cast comes here while its history holds no usable amax
    // (its first step): TransformerEngine would cast with scale 1 then, which can clip or
    // flush a whole tensor; measuring costs one amax pass, once.
    QuantizeArgs q;
    q.input = input;
    q.format = p.config.format();
    q.granularity = p.granularity;
    q.pow2_scale = p.config.pow2_scale;
    q.out = out;
    q.out_t = out_t;
    q.scale_out = p.scale.as<float>();
    q.inv_scale_out = p.inv_scale.as<float>();  // the GEMM's factors, in the same kernel as the scales
    q.amax_out = delayed_amax != nullptr ? delayed_amax : p.amax.as<float>();
    // The rows' amaxes give the tensor's and each row's, not a column's or a block's.
    const bool rows_give_amax = p.granularity == Granularity::kTensorwise || p.granularity == Granularity::kRowwise;
    if (known_row_amax != nullptr && rows_give_amax) q.row_amax = known_row_amax;
    q.range_counts = *range_counts;
    if (auto s = backend.quantize(q); !s.ok()) return s;
    if (q.row_amax != nullptr && observer != nullptr) observer->on_row_amax_cast();
    finish_cast(p, input, p.scale.as<float>(), p.inv_scale.as<float>());
  }

  if (p.make_dequantized) {
    DequantizeArgs d;
    d.input = out;
    d.format = p.config.format();
    d.rows = input.rows;
    d.cols = input.cols;
    d.granularity = p.granularity;
    d.scale = p.in_use.scale;
    d.out_dtype = compute_dtype();
    d.out = p.copies->dequantized.as<void>();
    if (auto s = backend.dequantize(d); !s.ok()) return s;
  }
  p.last_amax_row = p.delayed ? slot_row : -1;
  return absl::OkStatus();
}

absl::StatusOr<CastRangeCounts*> Float8Linear::State::range_counts_for(CastPlan& p) {
  p.range_counted = measuring;
  if (!measuring) return nullptr;
  if (auto s = p.range_counts.reserve(sizeof(CastRangeCounts)); !s.ok()) return s;
  return p.range_counts.as<CastRangeCounts>();
}

bool Float8Linear::State::casts_both_ways(TensorKind t) const {
  const auto& u = use[static_cast<int>(t)];
  if (u[kAsStored] < 0 || u[kTransposed] < 0 || u[kAsStored] == u[kTransposed]) return false;
  const CastPlan& rows = plans[static_cast<size_t>(u[kAsStored])];
  const CastPlan& cols = plans[static_cast<size_t>(u[kTransposed])];
  return rows.granularity == Granularity::kRowwise && cols.granularity == Granularity::kColumnwise &&
         !rows.delayed && !cols.delayed && rows.config.format() == cols.config.format() &&
         rows.config.pow2_scale == cols.config.pow2_scale && rows.make_out && !rows.make_out_t &&
         !rows.make_dequantized && cols.make_out_t && !cols.make_out && !cols.make_dequantized;
}

absl::Status Float8Linear::State::run_casts_both_ways(CastPlan& rows, CastPlan& cols, const MatrixRef& input,
                                                      const float* known_row_amax) {
  absl::StatusOr<CastRangeCounts*> row_counts = prepare_cast(rows, input);
  if (!row_counts.ok()) return row_counts.status();
  absl::StatusOr<CastRangeCounts*> col_counts = prepare_cast(cols, input);
  if (!col_counts.ok()) return col_counts.status();
  QuantizeArgs q;
  q.input = input;
  q.format = rows.config.format();
  q.granularity = Granularity::kRowwise;
  q.pow2_scale = rows.config.pow2_scale;
  q.out = rows.copies->out.as<uint8_t>();
  q.scale_out = rows.scale.as<float>();
  q.inv_scale_out = rows.inv_scale.as<float>();
  q.amax_out = rows.amax.as<float>();
  q.row_amax = known_row_amax;  // the rows' half only: a column's amax needs the input
  q.range_counts = *row_counts;
  q.columnwise.out_t = cols.copies->out_t.as<uint8_t>();
  q.columnwise.scale_out = cols.scale.as<float>();
  q.columnwise.inv_scale_out = cols.inv_scale.as<float>();
  q.columnwise.amax_out = cols.amax.as<float>();
  q.columnwise.range_counts = *col_counts;
  if (auto s = backend.quantize(q); !s.ok()) return s;
  if (observer != nullptr) {
    if (known_row_amax != nullptr) observer->on_row_amax_cast();
    observer->on_cast_both_ways();
  }
  for (CastPlan* p : {&rows, &cols}) {
    finish_cast(*p, input, p->scale.as<float>(), p->inv_scale.as<float>());
    p->last_amax_row = -1;
  }
  return absl::OkStatus();
}

absl::Status Float8Linear::State::cast_tensor(TensorKind t, const MatrixRef& data, int slot_row,
                                              const float* known_row_amax) {
  const auto& u = use[static_cast<int>(t)];
  if (casts_both_ways(t)) {
    return run_casts_both_ways(plans[static_cast<size_t>(u[kAsStored])], plans[static_cast<size_t>(u[kTransposed])],
                               data, known_row_amax);
  }
  for (int o : {kAsStored, kTransposed}) {
    if (u[o] < 0 || (o == kTransposed && u[kTransposed] == u[kAsStored])) continue;
    if (auto s = run_cast(plans[static_cast<size_t>(u[o])], data, slot_row, known_row_amax); !s.ok()) return s;
  }
  return absl::OkStatus();
}

bool Float8Linear::State::can_share_input_with(const State& source) const {
  if (&source == this || &source.backend != &backend || source.input_source != nullptr ||
      source.info.in_features != info.in_features || source.info.activations.input != info.activations.input) {
    return false;
  }
  const auto& mine = use[static_cast<int>(TensorKind::kInput)];
  const auto& theirs = source.use[static_cast<int>(TensorKind::kInput)];
  if (mine[kAsStored] < 0 && mine[kTransposed] < 0) return false;  // nothing to share
  for (int o : {kAsStored, kTransposed}) {
    if ((mine[o] < 0) != (theirs[o] < 0)) return false;
    if (mine[o] < 0) continue;
    // One plan for both orientations on either side, or two on both.
    if ((mine[kTransposed] == mine[kAsStored]) != (theirs[kTransposed] == theirs[kAsStored])) return false;
    const CastPlan& a = plans[static_cast<size_t>(mine[o])];
    const CastPlan& b = source.plans[static_cast<size_t>(theirs[o])];
    // Dynamic scaling on both sides, the same cast, and the source makes every copy this
    // layer's GEMMs read.
    if (a.delayed || b.delayed || !(a.config == b.config) || a.granularity != b.granularity ||
        (a.make_out && !b.make_out) || (a.make_out_t && !b.make_out_t) ||
        (a.make_dequantized && !b.make_dequantized)) {
      return false;
    }
  }
  return true;
}

absl::Status Float8Linear::State::cast_input(const MatrixRef& data, int slot_row, const float* known_row_amax) {
  const State* src = input_source;
  if (src == nullptr || src->input_cast_of != data.data || src->input_cast_tokens != data.rows) {
    if (auto s = cast_tensor(TensorKind::kInput, data, slot_row, known_row_amax); !s.ok()) return s;
    input_adopted = false;
    input_cast_of = data.data;
    input_cast_tokens = data.rows;
    ++input_casts;
    return absl::OkStatus();
  }
  const auto& mine = use[static_cast<int>(TensorKind::kInput)];
  const auto& theirs = src->use[static_cast<int>(TensorKind::kInput)];
  for (int o : {kAsStored, kTransposed}) {
    if (mine[o] < 0) continue;
    CastPlan& p = plans[static_cast<size_t>(mine[o])];
    const CastPlan& from = src->plans[static_cast<size_t>(theirs[o])];
    p.external = false;
    p.shared = &from;
    p.in_use = from.in_use;
    p.range_counted = from.range_counted;
    p.last_amax_row = -1;
  }
  input_adopted = true;
  adopted_input_cast = src->input_casts;
  input_cast_of = data.data;
  input_cast_tokens = data.rows;
  if (observer != nullptr) observer->on_shared_input_cast();
  return absl::OkStatus();
}

bool Float8Linear::State::takes_fp8_weight() const {
  const auto& u = use[static_cast<int>(TensorKind::kWeight)];
  if (u[kAsStored] < 0 || u[kTransposed] < 0) return false;
  if (!info.config.output_runs_in_fp8() || !info.config.grad_input_runs_in_fp8()) return false;
  for (int o : {kAsStored, kTransposed}) {
    if (plans[static_cast<size_t>(u[o])].make_dequantized) return false;
  }
  return true;
}

Fp8WeightCast Float8Linear::State::weight_cast(int orientation) const {
  const CastPlan& p = plans[static_cast<size_t>(use[static_cast<int>(TensorKind::kWeight)][orientation])];
  // A block plan's granularity is on the matrix it casts (the transpose, for the
  // grad_input GEMM): the same 128x128 blocks of the weight.
  return {p.config.format(), p.granularity, p.config.pow2_scale};
}

absl::Status Float8Linear::State::check_fp8_weight(int orientation, const Fp8Tensor& w, bool needs_codes) const {
  const char* gemm = orientation == kAsStored ? "output" : "grad_input";
  const bool transposed_codes = orientation == kTransposed;
  if (w.scale == nullptr || w.inv_scale == nullptr || w.amax == nullptr ||
      (needs_codes && (transposed_codes ? w.codes_t : w.codes) == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat("Float8Linear: the ", gemm, " GEMM's Fp8Tensor weight needs ",
                                                   transposed_codes ? "codes_t" : "codes",
                                                   ", scale, inv_scale and amax"));
  }
  const CastPlan& p = plans[static_cast<size_t>(use[static_cast<int>(TensorKind::kWeight)][orientation])];
  const Format format = p.config.format();
  // What the plan's own cast would describe: a block cast of the transpose is [in, out].
  const int64_t rows = p.cast_transposed ? info.in_features : info.out_features;
  const int64_t cols = p.cast_transposed ? info.out_features : info.in_features;
  if (w.format != format || w.granularity != p.granularity || w.rows != rows || w.cols != cols) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Float8Linear: the ", gemm, " GEMM's weight must be [", rows, ", ", cols, "] cast ",
        granularity_name(p.granularity), " to ", format_name(format), ", got [", w.rows, ", ", w.cols, "] ",
        granularity_name(w.granularity), " ", format_name(w.format)));
  }
  return absl::OkStatus();
}

absl::Status Float8Linear::State::adopt_fp8_weight(const Fp8Weight& w, int slot_row, bool for_backward) {
  const auto& u = use[static_cast<int>(TensorKind::kWeight)];
  const bool shared = u[kAsStored] == u[kTransposed];
  // A forward reads the output GEMM's codes; a backward the grad_input GEMM's, which the
  // forward may be given without.
  if (auto st = check_fp8_weight(kAsStored, w.output, /*needs_codes=*/!for_backward); !st.ok()) return st;
  if (auto st = check_fp8_weight(kTransposed, w.grad_input, /*needs_codes=*/for_backward); !st.ok()) return st;
  CastPlan& p = plans[static_cast<size_t>(u[kAsStored])];
  // Delayed scaling (tensorwise, one plan) records the amax with the step's other amaxes,
  // from the slot the layer's own cast would have written; a backward's rebind recorded
  // nothing new.
  if (p.delayed && !for_backward) {
    if (auto st = backend.copy(slots_of(p.tensor).at(slot_row, p.delayed_column), w.output.amax, sizeof(float));
        !st.ok()) {
      return st;
    }
  }
  p.in_use = w.output;
  if (shared) p.in_use.codes_t = w.grad_input.codes_t;
  if (p.delayed) p.in_use.amax = nullptr;
  for (int o : {kAsStored, kTransposed}) {
    CastPlan& q = plans[static_cast<size_t>(u[o])];
    if (o == kTransposed && !shared) q.in_use = w.grad_input;
    q.external = true;
    q.shared = nullptr;
    q.range_counted = false;  // the layer never sees these values in high precision
    if (!for_backward) q.last_amax_row = q.delayed ? slot_row : -1;
  }
  return absl::OkStatus();
}

ScaledOperand Float8Linear::State::scaled(TensorKind t, Orientation o) const {
  const CastPlan& p = plans[static_cast<size_t>(use[static_cast<int>(t)][o])];
  ScaledOperand op;
  op.data = o == kAsStored ? p.in_use.codes : p.in_use.codes_t;
  op.format = p.config.format();
  // Either orientation's scales run along the rows of the K-contiguous copy the GEMM reads;
  // block scales were laid out for that copy (a transposed use cast the transpose).
  if (is_block_granularity(p.granularity)) {
    op.granularity = p.granularity;
  } else {
    op.granularity = p.granularity == Granularity::kTensorwise ? Granularity::kTensorwise : Granularity::kRowwise;
  }
  op.inv_scale = p.in_use.inv_scale;
  return op;
}

bool Float8Linear::State::gemm_runs_in_fp8(Gemm g) const {
  switch (g) {
    case Gemm::kOutput:
      return info.config.output_runs_in_fp8();
    case Gemm::kGradInput:
      return info.config.grad_input_runs_in_fp8();
    case Gemm::kGradWeight:
      return info.config.grad_weight_runs_in_fp8();
  }
  return false;
}

absl::StatusOr<const void*> Float8Linear::State::in_compute_dtype(const void* data, DType from, int64_t n,
                                                                  BackendBuffer& scratch) {
  const DType to = compute_dtype();
  if (from == to) return data;
  if (auto s = scratch.reserve(dtype_bytes(to, n)); !s.ok()) return s;
  if (auto s = backend.convert(data, from, scratch.as<void>(), to, n); !s.ok()) return s;
  return scratch.as<const void>();
}

const void* Float8Linear::State::high_precision(TensorKind t, Orientation o, const void* raw) const {
  const int plan = use[static_cast<int>(t)][o];
  return plan < 0 ? raw : plans[static_cast<size_t>(plan)].holder().copies->dequantized.as<const void>();
}

}  // namespace fp8::engine
