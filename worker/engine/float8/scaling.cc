#include "worker/engine/float8/scaling.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "fp8/delayed_state.h"

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

}  // namespace fp8::engine
