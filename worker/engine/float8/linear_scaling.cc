// Float8Linear's delayed scaling (amax histories, the step's amaxes, checkpointed state)
// and its numerics (what each cast did, for the metrics). State is linear_state.h's.
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "fp8/delayed_state.h"
#include "worker/engine/float8/linear_state.h"

namespace fp8::engine {

// ---- delayed scaling -------------------------------------------------------------------------

int Float8Linear::delayed_count() const { return static_cast<int>(s_->delayed_plans.size()); }

std::vector<std::string> Float8Linear::delayed_names() const {
  std::vector<std::string> names;
  for (int i : s_->delayed_plans) {
    const CastPlan& p = s_->plans[static_cast<size_t>(i)];
    const bool tensor_has_two = std::count_if(s_->delayed_plans.begin(), s_->delayed_plans.end(), [&](int j) {
                                  return s_->plans[static_cast<size_t>(j)].tensor == p.tensor;
                                }) > 1;
    names.push_back(tensor_has_two ? absl::StrCat(tensor_kind_name(p.tensor), ".", cast_dtype_name(p.config.dtype))
                                   : tensor_kind_name(p.tensor));
  }
  return names;
}

absl::Status Float8Linear::write_step_amaxes(float* dst) {
  State& s = *s_;
  if (s.delayed_plans.empty()) return absl::OkStatus();
  if (dst == nullptr) return absl::InvalidArgumentError("Float8Linear::write_step_amaxes: dst is null");
  // Forward casts come first in delayed order, then backward ones (plans are built input,
  // weight, grad_output), so each direction's reduction lands in one contiguous run.
  float* next = dst;
  for (AmaxSlots* slots : {&s.forward_slots, &s.backward_slots}) {
    if (slots->columns == 0) continue;
    if (slots->rows_used == 0) {
      return absl::FailedPreconditionError(absl::StrCat("Float8Linear: the step has no ",
                                                        slots == &s.forward_slots ? "forward()" : "backward()",
                                                        " whose amaxes delayed scaling could record"));
    }
    // Amaxes are non-negative, so the per-column amax of the slot rows is their max.
    const MatrixRef rows{slots->buffer.as<float>(), DType::kFloat32, slots->rows_used, slots->columns};
    if (auto st = s.backend.amax(rows, Granularity::kColumnwise, next); !st.ok()) return st;
    next += slots->columns;
  }
  return absl::OkStatus();
}

absl::Status Float8Linear::finish_step(absl::Span<const float> amaxes) {
  State& s = *s_;
  if (amaxes.size() != s.delayed_plans.size()) {
    return absl::InvalidArgumentError(absl::StrCat("Float8Linear::finish_step: expected ", s.delayed_plans.size(),
                                                   " amaxes (one per delayed cast), got ", amaxes.size()));
  }
  if (amaxes.empty()) return finish_step_from(nullptr);
  if (auto st = s.step_amaxes.reserve(float_bytes(delayed_count())); !st.ok()) return st;
  if (auto st = s.backend.queue_copy_from_host(s.step_amaxes.as<void>(), amaxes.data(), float_bytes(delayed_count()));
      !st.ok()) {
    return st;
  }
  return finish_step_from(s.step_amaxes.as<float>());
}

absl::Status Float8Linear::finish_step_from(const float* amaxes) {
  State& s = *s_;
  if (!s.delayed_plans.empty()) {
    if (amaxes == nullptr) return absl::InvalidArgumentError("Float8Linear::finish_step_from: amaxes is null");
    if (auto st = s.record_delayed(amaxes); !st.ok()) return st;
  }
  s.forward_slots.rows_used = 0;
  s.backward_slots.rows_used = 0;
  return absl::OkStatus();
}

absl::Status Float8Linear::finish_step() {
  State& s = *s_;
  const int64_t n = delayed_count();
  if (n == 0) return finish_step_from(nullptr);
  if (auto st = s.step_amaxes.reserve(float_bytes(n)); !st.ok()) return st;
  if (auto st = write_step_amaxes(s.step_amaxes.as<float>()); !st.ok()) return st;
  return finish_step_from(s.step_amaxes.as<float>());
}

absl::StatusOr<std::vector<DelayedScaling>> Float8Linear::delayed_scalings() const { return s_->read_delayed(); }

absl::StatusOr<DelayedScaling> Float8Linear::delayed_scaling(int i) const {
  if (auto st = s_->check_delayed_index(i); !st.ok()) return st;
  absl::StatusOr<std::vector<DelayedScaling>> states = s_->read_delayed();
  if (!states.ok()) return states.status();
  return std::move((*states)[static_cast<size_t>(i)]);
}

absl::Status Float8Linear::replay_delayed_history(int i, absl::Span<const float> amaxes) {
  if (auto st = s_->check_delayed_index(i); !st.ok()) return st;
  absl::StatusOr<std::vector<DelayedScaling>> states = s_->read_delayed();
  if (!states.ok()) return states.status();
  (*states)[static_cast<size_t>(i)].replay(amaxes);
  return s_->upload_delayed(*states);
}

absl::StatusOr<std::vector<float>> Float8Linear::save_scaling_state() const {
  absl::StatusOr<std::vector<DelayedScaling>> states = s_->read_delayed();
  if (!states.ok()) return states.status();
  std::vector<float> out;
  for (const DelayedScaling& d : *states) {
    const std::vector<float> one = d.serialize();
    out.insert(out.end(), one.begin(), one.end());
  }
  return out;
}

absl::Status Float8Linear::restore_scaling_state(absl::Span<const float> state) {
  State& s = *s_;
  const int64_t each = DelayedScaling::serialized_size(s.config.amax_history_len);
  const int64_t expected = each * delayed_count();
  if (static_cast<int64_t>(state.size()) != expected) {
    return absl::InvalidArgumentError(absl::StrCat("Float8Linear::restore_scaling_state: expected ", expected,
                                                   " floats (", delayed_count(), " delayed casts), got ",
                                                   state.size()));
  }
  // Restore into host copies first so that a bad entry leaves the layer unchanged.
  absl::StatusOr<std::vector<DelayedScaling>> restored = s.read_delayed();
  if (!restored.ok()) return restored.status();
  for (int i = 0; i < delayed_count(); ++i) {
    absl::Span<const float> one = state.subspan(static_cast<size_t>(i * each), static_cast<size_t>(each));
    if (auto st = (*restored)[static_cast<size_t>(i)].restore(one); !st.ok()) return st;
  }
  return s.upload_delayed(*restored);
}

std::optional<Float8Linear::WeightScaleRule> Float8Linear::dynamic_weight_scale_rule() const {
  const State& s = *s_;
  const int plan = s.weight_plan();
  if (plan < 0) return std::nullopt;
  const CastPlan& p = s.plans[static_cast<size_t>(plan)];
  if (p.delayed) return std::nullopt;
  return WeightScaleRule{p.config.format(), p.config.pow2_scale};
}

absl::Status Float8Linear::write_fp8_weight_scale(const float* amax, float* scale, float* inv_scale) const {
  const State& s = *s_;
  if (amax == nullptr || scale == nullptr || inv_scale == nullptr) {
    return absl::InvalidArgumentError("Float8Linear::write_fp8_weight_scale: amax, scale and inv_scale must be given");
  }
  const int plan = s.weight_plan();
  const CastPlan* p = plan < 0 ? nullptr : &s.plans[static_cast<size_t>(plan)];
  if (p != nullptr && p->delayed && p->delayed_scale_ready) {
    const float* entry = s.delayed_scale_entry(p->delayed_index);
    if (auto st = s.backend.copy(scale, entry, sizeof(float)); !st.ok()) return st;
    return s.backend.copy(inv_scale, entry + kFloatsPer16Bytes, sizeof(float));
  }
  if (p == nullptr) {  // no weight cast: scale 1
    constexpr float kOne[2] = {1.0f, 1.0f};
    if (auto st = s.backend.queue_copy_from_host(scale, &kOne[0], sizeof(float)); !st.ok()) return st;
    return s.backend.queue_copy_from_host(inv_scale, &kOne[1], sizeof(float));
  }
  return s.backend.compute_scales(amax, 1, p->config.format(), p->config.pow2_scale, scale, inv_scale);
}

// ---- the states in backend memory --------------------------------------------------------------

int Float8Linear::State::delayed_history_len() const { return std::max(config.amax_history_len, 1); }

int64_t Float8Linear::State::delayed_state_floats() const { return delayed::state_floats(delayed_history_len()); }

absl::Status Float8Linear::State::check_delayed_index(int i) const {
  const auto n = static_cast<int>(delayed_plans.size());
  if (i >= 0 && i < n) return absl::OkStatus();
  return absl::OutOfRangeError(absl::StrCat("Float8Linear: no delayed cast ", i, " (", n, " of them)"));
}

absl::StatusOr<std::vector<DelayedScaling>> Float8Linear::State::read_delayed() const {
  const int64_t n = static_cast<int64_t>(delayed_plans.size());
  const int64_t each = delayed_state_floats();
  std::vector<float> host(static_cast<size_t>(n * each));
  if (n > 0) {
    if (auto s = backend.copy_to_host(host.data(), delayed_states.as<void>(), float_bytes(n * each)); !s.ok()) {
      return s;
    }
  }
  std::vector<DelayedScaling> out;
  out.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const CastPlan& p = plans[static_cast<size_t>(delayed_plans[static_cast<size_t>(i)])];
    absl::StatusOr<DelayedScaling> d =
        DelayedScaling::from_state(absl::MakeConstSpan(host).subspan(static_cast<size_t>(i * each),
                                                                     static_cast<size_t>(each)),
                                   delayed_history_len(), p.config.format(), p.config.pow2_scale);
    if (!d.ok()) return d.status();
    out.push_back(std::move(*d));
  }
  return out;
}

absl::Status Float8Linear::State::upload_delayed(const std::vector<DelayedScaling>& states) {
  const int64_t n = static_cast<int64_t>(delayed_plans.size());
  if (n == 0) return absl::OkStatus();
  const int64_t each = delayed_state_floats();
  std::vector<float> host_states, host_scales(static_cast<size_t>(n * kDelayedScaleStride), 1.0f);
  host_states.reserve(static_cast<size_t>(n * each));
  for (int64_t i = 0; i < n; ++i) {
    const DelayedScaling& d = states[static_cast<size_t>(i)];
    host_states.insert(host_states.end(), d.state().begin(), d.state().end());
    float* entry = host_scales.data() + i * kDelayedScaleStride;
    entry[0] = d.next_scale().value_or(1.0f);
    entry[kFloatsPer16Bytes] = inverse_scale(entry[0]);
  }
  absl::Status reserved = delayed_states.reserve(float_bytes(n * each));
  reserved.Update(delayed_scales.reserve(float_bytes(2 * n * kDelayedScaleStride)));
  if (!reserved.ok()) return reserved;
  // Queued: casts queued before read what they were queued with; the next ones read these.
  if (auto s = backend.queue_copy_from_host(delayed_states.as<void>(), host_states.data(), float_bytes(n * each));
      !s.ok()) {
    return s;
  }
  if (auto s = backend.queue_copy_from_host(delayed_scale_entry(0), host_scales.data(),
                                            float_bytes(n * kDelayedScaleStride));
      !s.ok()) {
    return s;
  }
  for (int64_t i = 0; i < n; ++i) {
    plans[static_cast<size_t>(delayed_plans[static_cast<size_t>(i)])].delayed_scale_ready =
        states[static_cast<size_t>(i)].next_scale().has_value();
  }
  return absl::OkStatus();
}

absl::Status Float8Linear::State::record_delayed(const float* amaxes) {
  const int64_t n = static_cast<int64_t>(delayed_plans.size());
  DelayedRecordArgs r;
  r.states = delayed_states.as<float>();
  r.count = n;
  r.history_len = delayed_history_len();
  r.amaxes = amaxes;
  // The other half: this step's casts may still be reading theirs.
  r.scales = delayed_scales.as<float>() + static_cast<int64_t>(1 - scale_half) * n * kDelayedScaleStride;
  r.scale_stride = kDelayedScaleStride;
  r.inverse_offset = kFloatsPer16Bytes;
  if (auto s = backend.record_delayed_amaxes(r); !s.ok()) return s;
  scale_half = 1 - scale_half;
  return confirm_delayed_scales();
}

absl::Status Float8Linear::State::confirm_delayed_scales() {
  const bool all_ready = std::all_of(delayed_plans.begin(), delayed_plans.end(),
                                     [&](int i) { return plans[static_cast<size_t>(i)].delayed_scale_ready; });
  if (all_ready) return absl::OkStatus();
  absl::StatusOr<std::vector<DelayedScaling>> states = read_delayed();
  if (!states.ok()) return states.status();
  for (size_t i = 0; i < delayed_plans.size(); ++i) {
    plans[static_cast<size_t>(delayed_plans[i])].delayed_scale_ready = (*states)[i].next_scale().has_value();
  }
  return absl::OkStatus();
}

// ---- numerics ---------------------------------------------------------------------------------

absl::StatusOr<std::vector<CastNumerics>> Float8Linear::numerics() {
  State& s = *s_;
  // What each cast's report needs (its amaxes, the scales it used, its range counts) is
  // gathered in backend memory first and read in one copy: on a GPU one wait for the
  // layer rather than two or three for each of its casts.
  struct Piece {
    const CastPlan* plan;
    int64_t n;  // amaxes and scales
    size_t amax_at, scale_at, counts_at;
  };
  std::vector<Piece> pieces;
  size_t bytes = 0;
  for (const CastPlan& p : s.plans) {
    if (p.rows == 0) continue;
    Piece piece{&p, scale_count(p.granularity, p.rows, p.cols), 0, 0, 0};
    piece.amax_at = bytes;
    bytes += float_bytes(piece.n);
    piece.scale_at = bytes;
    bytes += float_bytes(piece.n);
    piece.counts_at = bytes;
    if (p.range_counted) bytes += sizeof(CastRangeCounts);
    pieces.push_back(piece);
  }
  if (pieces.empty()) return std::vector<CastNumerics>();
  if (auto st = s.numerics_staging.reserve(bytes); !st.ok()) return st;
  auto* staging = s.numerics_staging.as<std::byte>();
  for (const Piece& piece : pieces) {
    const CastPlan& p = *piece.plan;
    const float* amax_src = p.last_amax_row >= 0      ? s.slots_of(p.tensor).at(p.last_amax_row, p.delayed_column)
                            : p.amax_in_use != nullptr ? p.amax_in_use
                                                       : p.holder().amax.as<float>();
    absl::Status queued = s.backend.copy(staging + piece.amax_at, amax_src, float_bytes(piece.n));
    if (queued.ok()) queued = s.backend.copy(staging + piece.scale_at, p.scale_in_use, float_bytes(piece.n));
    if (queued.ok() && p.range_counted) {
      queued = s.backend.copy(staging + piece.counts_at, p.holder().range_counts.as<void>(), sizeof(CastRangeCounts));
    }
    if (!queued.ok()) return queued;
  }
  std::vector<std::byte> host(bytes);
  if (auto st = s.backend.copy_to_host(host.data(), staging, bytes); !st.ok()) return st;

  std::vector<CastNumerics> out;
  for (const Piece& piece : pieces) {
    const CastPlan& p = *piece.plan;
    std::vector<float> amax(static_cast<size_t>(piece.n)), scale(static_cast<size_t>(piece.n));
    std::memcpy(amax.data(), host.data() + piece.amax_at, float_bytes(piece.n));
    std::memcpy(scale.data(), host.data() + piece.scale_at, float_bytes(piece.n));
    CastNumerics c;
    c.tensor = p.tensor;
    c.gemms = p.gemms;
    c.config = p.config;
    c.amax = *std::max_element(amax.begin(), amax.end());
    c.scale = *std::min_element(scale.begin(), scale.end());
    float use = 0.0f;
    for (size_t i = 0; i < amax.size(); ++i) use = std::max(use, amax[i] * scale[i]);
    c.range_use = use / fp8_max(p.config.format());
    if (p.range_counted) {
      CastRangeCounts counts;
      std::memcpy(&counts, host.data() + piece.counts_at, sizeof counts);
      c.measured = true;
      c.elements = p.rows * p.cols;
      c.saturated = static_cast<int64_t>(counts.saturated);
      c.underflow = static_cast<int64_t>(counts.underflow);
      c.saturated_ratio = static_cast<float>(static_cast<double>(c.saturated) / static_cast<double>(c.elements));
      c.underflow_ratio = static_cast<float>(static_cast<double>(c.underflow) / static_cast<double>(c.elements));
    }
    out.push_back(std::move(c));
  }
  return out;
}

void Float8Linear::set_measuring(bool on) { s_->measuring = on; }
bool Float8Linear::measuring() const { return s_->measuring; }

}  // namespace fp8::engine
