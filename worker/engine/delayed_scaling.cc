#include "worker/engine/delayed_scaling.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace fp8::engine {
namespace {

// serialize() layout: a header, then the ring in storage order.
enum HeaderField : int { kHistoryLen, kNext, kFilled, kHasScale, kScale, kHeaderSize };

}  // namespace

DelayedScaling::DelayedScaling(int history_len, Format format, bool pow2_scale)
    : ring_(static_cast<size_t>(history_len > 0 ? history_len : 1), 0.0f), format_(format), pow2_(pow2_scale) {}

void DelayedScaling::record(float amax) {
  // The cast being recorded used the scale from before this amax.
  last_range_use_ = scale_.has_value() && std::isfinite(amax) ? amax * *scale_ / fp8_max(format_) : 0.0f;
  ring_[static_cast<size_t>(next_)] = amax;
  next_ = (next_ + 1) % history_len();
  if (filled_ < history_len()) ++filled_;

  // The window max, with any non-finite entry making the whole window unusable (as
  // torch.max over TE's history propagates a NaN).
  float window_max = 0.0f;
  bool finite = true;
  for (int i = 0; i < filled_; ++i) {
    const float a = ring_[static_cast<size_t>(i)];
    if (!std::isfinite(a)) finite = false;
    if (a > window_max) window_max = a;
  }
  if (finite && window_max > 0.0f) scale_ = scale_from_amax(window_max, format_, pow2_);
}

void DelayedScaling::replay(absl::Span<const float> amaxes) {
  std::fill(ring_.begin(), ring_.end(), 0.0f);
  next_ = 0;
  filled_ = 0;
  scale_.reset();
  last_range_use_ = 0.0f;
  const size_t keep = std::min(amaxes.size(), ring_.size());
  for (float a : amaxes.subspan(amaxes.size() - keep)) record(a);
}

std::vector<float> DelayedScaling::history() const {
  std::vector<float> out;
  out.reserve(static_cast<size_t>(filled_));
  // The oldest entry sits at next_ once the ring is full, at 0 before.
  const int oldest = filled_ == history_len() ? next_ : 0;
  for (int i = 0; i < filled_; ++i) out.push_back(ring_[static_cast<size_t>((oldest + i) % history_len())]);
  return out;
}

int64_t DelayedScaling::serialized_size(int history_len) { return kHeaderSize + history_len; }

std::vector<float> DelayedScaling::serialize() const {
  std::vector<float> out(kHeaderSize);
  out[kHistoryLen] = static_cast<float>(history_len());
  out[kNext] = static_cast<float>(next_);
  out[kFilled] = static_cast<float>(filled_);
  out[kHasScale] = scale_.has_value() ? 1.0f : 0.0f;
  out[kScale] = scale_.value_or(0.0f);
  out.insert(out.end(), ring_.begin(), ring_.end());
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
  auto is_index = [](float v, int limit) { return v >= 0.0f && v <= static_cast<float>(limit) && v == std::floor(v); };
  if (!is_index(data[kNext], h - 1) || !is_index(data[kFilled], h) ||
      (data[kHasScale] != 0.0f && data[kHasScale] != 1.0f)) {
    return absl::InvalidArgumentError("delayed scaling state: corrupt header");
  }
  next_ = static_cast<int>(data[kNext]);
  filled_ = static_cast<int>(data[kFilled]);
  scale_.reset();
  if (data[kHasScale] == 1.0f) scale_ = data[kScale];
  ring_.assign(data.begin() + kHeaderSize, data.end());
  return absl::OkStatus();
}

}  // namespace fp8::engine
