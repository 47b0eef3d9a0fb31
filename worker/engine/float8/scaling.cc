// Scaling: the rules that turn an amax into an fp8 scale, dynamic (this cast's own amax)
// and delayed (the max of an amax history). DelayedScaling is one history on the host;
// Float8Linear's histories live in backend memory (linear_state.h's State), recorded each
// step there; the weight's history scale is what FSDP's fp8 all-gather casts shards with.
#include "worker/engine/float8/scaling.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "fp8/delayed_state.h"
#include "worker/engine/float8/linear_state.h"

namespace fp8::engine {
namespace {

// serialize() layout: a header, then the ring in storage order.
enum HeaderField : int { kHistoryLen, kNext, kFilled, kHasScale, kScale, kHeaderSize };

bool is_index(float v, int limit) { return v >= 0.0f && v <= static_cast<float>(limit) && v == std::floor(v); }

}  // namespace

DelayedScaling::DelayedScaling(int history_len, Format format, bool pow2_scale)
    : state_(static_cast<size_t>(delayed::state_floats(history_len > 0 ? history_len : 1))),
      format_(format),
      pow2_(pow2_scale) {
  delayed::init_state(state_.data(), history_len > 0 ? history_len : 1, format, pow2_scale);
}

absl::StatusOr<DelayedScaling> DelayedScaling::from_state(absl::Span<const float> state, int history_len,
                                                          Format format, bool pow2_scale) {
  DelayedScaling d(history_len, format, pow2_scale);
  const int h = d.history_len();
  if (static_cast<int64_t>(state.size()) != delayed::state_floats(h)) {
    return absl::InvalidArgumentError(absl::StrCat("delayed scaling state: expected ", delayed::state_floats(h),
                                                   " floats for an amax history of ", h, ", got ", state.size()));
  }
  if (state[delayed::kHistoryLen] != static_cast<float>(h) || !is_index(state[delayed::kNext], h - 1) ||
      !is_index(state[delayed::kFilled], h) ||
      (state[delayed::kHasScale] != 0.0f && state[delayed::kHasScale] != 1.0f) ||
      state[delayed::kFp8Max] != fp8_max(format) || state[delayed::kPow2] != (pow2_scale ? 1.0f : 0.0f)) {
    return absl::DataLossError("delayed scaling state: corrupt (its header does not fit the cast's configuration)");
  }
  d.state_.assign(state.begin(), state.end());
  return d;
}

std::optional<float> DelayedScaling::next_scale() const {
  if (state_[delayed::kHasScale] == 0.0f) return std::nullopt;
  return state_[delayed::kScale];
}

void DelayedScaling::record(float amax) { delayed::record(state_.data(), amax); }

void DelayedScaling::replay(absl::Span<const float> amaxes) {
  delayed::init_state(state_.data(), history_len(), format_, pow2_);
  const size_t keep = std::min(amaxes.size(), static_cast<size_t>(history_len()));
  for (float a : amaxes.subspan(amaxes.size() - keep)) record(a);
}

float DelayedScaling::last_range_use() const { return state_[delayed::kRangeUse]; }

int DelayedScaling::history_len() const { return static_cast<int>(state_[delayed::kHistoryLen]); }

std::vector<float> DelayedScaling::history() const {
  const int h = history_len();
  const int filled = static_cast<int>(state_[delayed::kFilled]);
  const int next = static_cast<int>(state_[delayed::kNext]);
  std::vector<float> out;
  out.reserve(static_cast<size_t>(filled));
  // The oldest entry sits at next once the ring is full, at 0 before.
  const int oldest = filled == h ? next : 0;
  for (int i = 0; i < filled; ++i) out.push_back(state_[static_cast<size_t>(delayed::kRing + (oldest + i) % h)]);
  return out;
}

int64_t DelayedScaling::serialized_size(int history_len) { return kHeaderSize + history_len; }

std::vector<float> DelayedScaling::serialize() const {
  std::vector<float> out(kHeaderSize);
  out[kHistoryLen] = state_[delayed::kHistoryLen];
  out[kNext] = state_[delayed::kNext];
  out[kFilled] = state_[delayed::kFilled];
  out[kHasScale] = state_[delayed::kHasScale];
  out[kScale] = state_[delayed::kHasScale] != 0.0f ? state_[delayed::kScale] : 0.0f;
  out.insert(out.end(), state_.begin() + delayed::kRing, state_.end());
  return out;
}

absl::Status DelayedScaling::restore(absl::Span<const float> data) {
  const int h = history_len();
  if (static_cast<int64_t>(data.size()) != serialized_size(h)) {
    return absl::InvalidArgumentError(absl::StrCat("delayed scaling state: expected ", serialized_size(h),
                                                   " floats for an amax history of ", h, ", got ", data.size()));
  }
  if (data[kHistoryLen] != static_cast<float>(h)) {
    return absl::InvalidArgumentError(
        absl::StrCat("delayed scaling state: saved with amax_history_len ", data[kHistoryLen], ", this run uses ", h));
  }
  if (!is_index(data[kNext], h - 1) || !is_index(data[kFilled], h) ||
      (data[kHasScale] != 0.0f && data[kHasScale] != 1.0f)) {
    return absl::InvalidArgumentError("delayed scaling state: corrupt header");
  }
  state_[delayed::kNext] = data[kNext];
  state_[delayed::kFilled] = data[kFilled];
  state_[delayed::kHasScale] = data[kHasScale];
  state_[delayed::kScale] = data[kHasScale] == 1.0f ? data[kScale] : 0.0f;
  state_[delayed::kRangeUse] = 0.0f;
  std::copy(data.begin() + kHeaderSize, data.end(), state_.begin() + delayed::kRing);
  return absl::OkStatus();
}

// ---- Float8Linear: delayed scaling ----------------------------------------------------------

int Float8Linear::DelayedCasts::count() const { return static_cast<int>(s_->delayed_plans.size()); }

std::vector<std::string> Float8Linear::DelayedCasts::names() const {
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

absl::Status Float8Linear::DelayedCasts::write_step_amaxes(float* dst) {
  State& s = *s_;
  if (s.delayed_plans.empty()) return absl::OkStatus();
  if (dst == nullptr) return absl::InvalidArgumentError("Float8Linear: write_step_amaxes: dst is null");
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

absl::Status Float8Linear::finish_step(const float* reduced_amaxes) {
  State& s = *s_;
  if (!s.delayed_plans.empty()) {
    if (reduced_amaxes == nullptr) {
      return absl::InvalidArgumentError("Float8Linear::finish_step: reduced_amaxes is null");
    }
    if (auto st = s.record_delayed(reduced_amaxes); !st.ok()) return st;
  }
  s.forward_slots.rows_used = 0;
  s.backward_slots.rows_used = 0;
  return absl::OkStatus();
}

absl::Status Float8Linear::finish_step() {
  State& s = *s_;
  const int64_t n = delayed_.count();
  if (n == 0) return finish_step(nullptr);
  if (auto st = s.step_amaxes.reserve(float_bytes(n)); !st.ok()) return st;
  if (auto st = delayed_.write_step_amaxes(s.step_amaxes.as<float>()); !st.ok()) return st;
  return finish_step(s.step_amaxes.as<float>());
}

absl::StatusOr<std::vector<DelayedScaling>> Float8Linear::DelayedCasts::states() const { return s_->read_delayed(); }

absl::StatusOr<DelayedScaling> Float8Linear::DelayedCasts::state(int i) const {
  if (auto st = s_->check_delayed_index(i); !st.ok()) return st;
  absl::StatusOr<std::vector<DelayedScaling>> states = s_->read_delayed();
  if (!states.ok()) return states.status();
  return std::move((*states)[static_cast<size_t>(i)]);
}

absl::Status Float8Linear::DelayedCasts::replay(int i, absl::Span<const float> amaxes) {
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
  const int64_t each = DelayedScaling::serialized_size(s.info.config.amax_history_len);
  const int64_t expected = each * delayed_.count();
  if (static_cast<int64_t>(state.size()) != expected) {
    return absl::InvalidArgumentError(absl::StrCat("Float8Linear::restore_scaling_state: expected ", expected,
                                                   " floats (", delayed_.count(), " delayed casts), got ",
                                                   state.size()));
  }
  // Restore into host copies first so that a bad entry leaves the layer unchanged.
  absl::StatusOr<std::vector<DelayedScaling>> restored = s.read_delayed();
  if (!restored.ok()) return restored.status();
  for (int i = 0; i < delayed_.count(); ++i) {
    absl::Span<const float> one = state.subspan(static_cast<size_t>(i * each), static_cast<size_t>(each));
    if (auto st = (*restored)[static_cast<size_t>(i)].restore(one); !st.ok()) return st;
  }
  return s.upload_delayed(*restored);
}

// ---- Float8Linear: the weight's delayed scale, for a cast made elsewhere (an Fp8Tensor) -----------

std::optional<Float8Linear::DelayedCasts::ScaleRef> Float8Linear::DelayedCasts::weight_scale() const {
  const State& s = *s_;
  const int plan = s.weight_plan();
  if (plan < 0) return std::nullopt;
  const CastPlan& p = s.plans[static_cast<size_t>(plan)];
  if (!p.delayed || !p.delayed_scale_ready) return std::nullopt;
  const float* entry = s.delayed_scale_entry(p.delayed_index);
  return ScaleRef{entry, entry + kFloatsPer16Bytes};
}

// ---- the states in backend memory --------------------------------------------------------------

int Float8Linear::State::delayed_history_len() const { return std::max(info.config.amax_history_len, 1); }

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

}  // namespace fp8::engine
