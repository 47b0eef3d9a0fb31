// The learning rate of each optimizer step: linear warmup, then cosine or linear decay to
// min_lr, or constant (train.schedule in job.proto).
//
// Step indexing: steps count from 1; step s is the s-th optimizer update, and
// train.steps is the last. Warmup gives step s <= warmup_steps the rate
// lr * s / warmup_steps, so the first update already moves (lr / warmup_steps) and step
// warmup_steps reaches lr exactly; step 0 (before any update) is 0. The decay then runs
// from lr at step warmup_steps to min_lr at step train.steps; steps past the end keep
// the final rate. With warmup_steps == steps there is no decay.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"

namespace fp8::engine {

enum class LrDecay {
  kCosine,    // half a cosine period from lr down to min_lr
  kLinear,    // a straight line from lr down to min_lr
  kConstant,  // lr after warmup; min_lr is not used
};

struct LrScheduleOptions {
  double lr = 0;             // train.lr: peak rate, > 0
  double min_lr = 0;         // train.min_lr: final rate of the decay, in [0, lr]
  int64_t warmup_steps = 0;  // train.warmup_steps, in [0, steps]
  int64_t steps = 0;         // train.steps: the last step, > 0
  LrDecay decay = LrDecay::kCosine;
};

class LrSchedule {
 public:
  // InvalidArgument, naming the train.* field, for options out of the ranges above.
  static absl::StatusOr<LrSchedule> create(const LrScheduleOptions& options);

  // The rate for optimizer step `step` (from 1; see above). A pure function of the step.
  double lr_at(int64_t step) const;

  const LrScheduleOptions& options() const { return options_; }

 private:
  explicit LrSchedule(const LrScheduleOptions& options) : options_(options) {}

  LrScheduleOptions options_;
};

}  // namespace fp8::engine
