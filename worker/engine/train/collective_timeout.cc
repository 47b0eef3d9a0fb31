#include "worker/engine/train/collective_timeout.h"

#include <algorithm>

namespace fp8::engine {

absl::Duration derived_collective_timeout(absl::Duration slowest_step, absl::Duration group_timeout) {
  const absl::Duration derived = std::max(kSlowestStepMultiple * slowest_step, kShortestDerived);
  return std::min(derived, group_timeout);
}

CollectiveTimeout::CollectiveTimeout(collectives::ProcessGroup* group, int64_t configured_seconds)
    : group_(group),
      group_timeout_(group != nullptr ? group->timeout() : absl::ZeroDuration()),
      configured_(absl::Seconds(std::max<int64_t>(configured_seconds, 0))) {}

absl::Duration CollectiveTimeout::for_steps() const {
  if (configured_ > absl::ZeroDuration()) return configured_;
  if (steps_ < kSettleSteps) return group_timeout_;
  return derived_collective_timeout(slowest_, group_timeout_);
}

void CollectiveTimeout::begin_step() {
  if (group_ != nullptr) group_->set_timeout(for_steps());
}

void CollectiveTimeout::end_step(absl::Duration step_time) {
  ++steps_;
  slowest_ = std::max(slowest_, step_time);
}

CollectiveTimeout::Relaxed::Relaxed(const CollectiveTimeout& owner) : group_(owner.group_) {
  if (group_ == nullptr) return;
  restore_ = group_->timeout();
  group_->set_timeout(std::max(owner.group_timeout_, owner.configured_));
}

CollectiveTimeout::Relaxed::~Relaxed() {
  if (group_ != nullptr) group_->set_timeout(restore_);
}

}  // namespace fp8::engine
