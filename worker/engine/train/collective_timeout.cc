#include "worker/engine/train/collective_timeout.h"

#include <algorithm>

namespace fp8::engine {

absl::Duration derived_collective_timeout(absl::Duration slowest_step, absl::Duration group_timeout) {
  const absl::Duration derived = std::max(kSlowestStepMultiple * slowest_step, kShortestDerived);
  return std::min(derived, group_timeout);
}

CollectiveTimeout::CollectiveTimeout(std::vector<collectives::ProcessGroup*> groups, int64_t configured_seconds)
    : configured_(absl::Seconds(std::max<int64_t>(configured_seconds, 0))) {
  for (collectives::ProcessGroup* g : groups) {
    if (g == nullptr) continue;
    group_timeout_ = groups_.empty() ? g->timeout() : std::min(group_timeout_, g->timeout());
    groups_.push_back(g);
  }
}

absl::Duration CollectiveTimeout::for_steps() const {
  if (configured_ > absl::ZeroDuration()) return configured_;
  if (steps_ < kSettleSteps) return group_timeout_;
  return derived_collective_timeout(slowest_, group_timeout_);
}

void CollectiveTimeout::begin_step() {
  for (collectives::ProcessGroup* g : groups_) g->set_timeout(for_steps());
}

void CollectiveTimeout::end_step(absl::Duration step_time) {
  ++steps_;
  slowest_ = std::max(slowest_, step_time);
}

CollectiveTimeout::Relaxed::Relaxed(const CollectiveTimeout& owner) : groups_(owner.groups_) {
  for (collectives::ProcessGroup* g : groups_) {
    restore_.push_back(g->timeout());
    g->set_timeout(std::max(owner.group_timeout_, owner.configured_));
  }
}

CollectiveTimeout::Relaxed::~Relaxed() {
  for (size_t i = 0; i < groups_.size(); ++i) groups_[i]->set_timeout(restore_[i]);
}

}  // namespace fp8::engine
