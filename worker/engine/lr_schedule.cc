#include "worker/engine/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace fp8::engine {

absl::StatusOr<LrSchedule> LrSchedule::create(const LrScheduleOptions& o) {
  auto invalid = [](auto&&... parts) { return absl::InvalidArgumentError(absl::StrCat(parts...)); };
  // Negated comparisons so that NaN is rejected too.
  if (!(o.lr > 0) || !std::isfinite(o.lr)) return invalid("train.lr: must be positive and finite, got ", o.lr);
  if (!(o.min_lr >= 0 && o.min_lr <= o.lr)) {
    return invalid("train.min_lr: must be in [0, train.lr = ", o.lr, "], got ", o.min_lr);
  }
  if (o.steps < 1) return invalid("train.steps: must be at least 1, got ", o.steps);
  if (o.warmup_steps < 0 || o.warmup_steps > o.steps) {
    return invalid("train.warmup_steps: must be in [0, train.steps = ", o.steps, "], got ", o.warmup_steps);
  }
  return LrSchedule(o);
}

double LrSchedule::lr_at(int64_t step) const {
  const LrScheduleOptions& o = options_;
  if (o.warmup_steps > 0 && step <= o.warmup_steps) {
    return o.lr * static_cast<double>(std::max<int64_t>(step, 0)) / static_cast<double>(o.warmup_steps);
  }
  const int64_t decay_steps = o.steps - o.warmup_steps;
  if (o.decay == LrDecay::kConstant || decay_steps == 0) return o.lr;

  // Fraction of the decay done, 0 at the end of warmup and 1 at the last step.
  const double done =
      std::clamp(static_cast<double>(step - o.warmup_steps) / static_cast<double>(decay_steps), 0.0, 1.0);
  const double remaining_share =
      o.decay == LrDecay::kCosine ? 0.5 * (1.0 + std::cos(std::numbers::pi * done)) : 1.0 - done;
  return o.min_lr + (o.lr - o.min_lr) * remaining_share;
}

}  // namespace fp8::engine
