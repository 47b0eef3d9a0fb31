// Float8Linear's delayed scaling (amax histories, the step's amaxes, checkpointed state)
// and its numerics (what each cast did, for the metrics). State is float8_linear_state.h's.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "worker/engine/float8_linear_state.h"

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
  for (size_t i = 0; i < amaxes.size(); ++i) {
    s.plans[static_cast<size_t>(s.delayed_plans[i])].delayed->record(amaxes[i]);
  }
  s.forward_slots.rows_used = 0;
  s.backward_slots.rows_used = 0;
  return s.upload_delayed_scales();
}

absl::Status Float8Linear::finish_step() {
  State& s = *s_;
  const int64_t n = delayed_count();
  if (n == 0) return finish_step(absl::Span<const float>());
  if (auto st = s.step_amaxes.reserve(float_bytes(n)); !st.ok()) return st;
  if (auto st = write_step_amaxes(s.step_amaxes.as<float>()); !st.ok()) return st;
  std::vector<float> host(static_cast<size_t>(n));
  if (auto st = s.backend.copy_to_host(host.data(), s.step_amaxes.as<void>(), float_bytes(n)); !st.ok()) return st;
  return finish_step(host);
}

const DelayedScaling& Float8Linear::delayed_scaling(int i) const {
  return *s_->plans[static_cast<size_t>(s_->delayed_plans.at(static_cast<size_t>(i)))].delayed;
}

absl::Status Float8Linear::replay_delayed_history(int i, absl::Span<const float> amaxes) {
  if (i < 0 || i >= delayed_count()) {
    return absl::OutOfRangeError(absl::StrCat("Float8Linear: no delayed cast ", i, " (", delayed_count(), " of them)"));
  }
  s_->plans[static_cast<size_t>(s_->delayed_plans[static_cast<size_t>(i)])].delayed->replay(amaxes);
  return absl::OkStatus();
}

std::vector<float> Float8Linear::save_scaling_state() const {
  std::vector<float> out;
  for (int i = 0; i < delayed_count(); ++i) {
    const std::vector<float> one = delayed_scaling(i).serialize();
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
  // Restore into copies first so that a bad entry leaves the layer unchanged.
  std::vector<DelayedScaling> restored;
  for (int i = 0; i < delayed_count(); ++i) {
    DelayedScaling copy = delayed_scaling(i);
    if (auto st = copy.restore(state.subspan(static_cast<size_t>(i * each), static_cast<size_t>(each))); !st.ok()) {
      return st;
    }
    restored.push_back(std::move(copy));
  }
  for (int i = 0; i < delayed_count(); ++i) {
    s.plans[static_cast<size_t>(s.delayed_plans[static_cast<size_t>(i)])].delayed = restored[static_cast<size_t>(i)];
  }
  return s.upload_delayed_scales();
}

// ---- numerics ---------------------------------------------------------------------------------

absl::StatusOr<std::vector<CastNumerics>> Float8Linear::numerics() {
  State& s = *s_;
  std::vector<CastNumerics> out;
  for (const CastPlan& p : s.plans) {
    if (p.rows == 0) continue;
    const bool delayed_amax = p.last_amax_row >= 0;
    const int64_t n = scale_count(p.granularity, p.rows, p.cols);
    std::vector<float> amax(static_cast<size_t>(n)), scale(static_cast<size_t>(n));
    const float* amax_src =
        delayed_amax ? s.slots_of(p.tensor).at(p.last_amax_row, p.delayed_column) : p.holder().amax.as<float>();
    if (auto st = s.backend.copy_to_host(amax.data(), amax_src, float_bytes(n)); !st.ok()) return st;
    if (p.host_scale_in_use.has_value()) {
      // The device copy may already hold the next step's scale.
      scale.assign(1, *p.host_scale_in_use);
    } else if (auto st = s.backend.copy_to_host(scale.data(), p.scale_in_use, float_bytes(n)); !st.ok()) {
      return st;
    }
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
      if (auto st = s.backend.copy_to_host(&counts, p.holder().range_counts.as<void>(), sizeof counts); !st.ok()) {
        return st;
      }
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
