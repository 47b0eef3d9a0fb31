// The learning-rate schedule: warmup, the three decays, and the step indexing that
// lr_schedule.h documents.
#include "worker/engine/lr_schedule.h"

#include <cstdint>

#include "gtest/gtest.h"

namespace fp8::engine {
namespace {

LrSchedule make(LrDecay decay, int64_t warmup_steps = 10, int64_t steps = 110, double lr = 1e-3, double min_lr = 1e-4) {
  absl::StatusOr<LrSchedule> schedule = LrSchedule::create({lr, min_lr, warmup_steps, steps, decay});
  EXPECT_TRUE(schedule.ok()) << schedule.status();
  return *schedule;
}

TEST(LrScheduleTest, WarmupRisesLinearlyFromZeroToLr) {
  const LrSchedule s = make(LrDecay::kCosine);
  EXPECT_EQ(s.lr_at(0), 0.0);  // before the first update
  EXPECT_DOUBLE_EQ(s.lr_at(1), 1e-4);
  EXPECT_DOUBLE_EQ(s.lr_at(5), 5e-4);
  EXPECT_EQ(s.lr_at(10), 1e-3);  // exactly lr at the end of warmup
}

TEST(LrScheduleTest, CosineIsHalfwayAtTheMidpointAndMinLrAtTheEnd) {
  const LrSchedule s = make(LrDecay::kCosine);
  EXPECT_DOUBLE_EQ(s.lr_at(60), (1e-3 + 1e-4) / 2);  // 50 of 100 decay steps
  // A quarter of the way through the decay, (1 + cos(pi/4)) / 2 of the range remains.
  EXPECT_NEAR(s.lr_at(35), 1e-4 + 0.9e-3 * (1 + 0.70710678118654752) / 2, 1e-15);
  EXPECT_EQ(s.lr_at(110), 1e-4);
  EXPECT_EQ(s.lr_at(111), 1e-4);  // past the last step the rate stays at min_lr
  EXPECT_EQ(s.lr_at(1000000), 1e-4);
}

TEST(LrScheduleTest, LinearFallsInAStraightLine) {
  const LrSchedule s = make(LrDecay::kLinear);
  EXPECT_EQ(s.lr_at(10), 1e-3);
  EXPECT_DOUBLE_EQ(s.lr_at(35), 1e-3 - 0.25 * 0.9e-3);
  EXPECT_DOUBLE_EQ(s.lr_at(60), (1e-3 + 1e-4) / 2);
  EXPECT_EQ(s.lr_at(110), 1e-4);
}

TEST(LrScheduleTest, ConstantHoldsLrAfterWarmup) {
  const LrSchedule s = make(LrDecay::kConstant);
  EXPECT_DOUBLE_EQ(s.lr_at(5), 5e-4);
  for (int64_t step : {10, 11, 60, 110, 500}) EXPECT_EQ(s.lr_at(step), 1e-3) << step;
}

TEST(LrScheduleTest, DecayIsStrictlyDecreasingAfterWarmup) {
  for (LrDecay decay : {LrDecay::kCosine, LrDecay::kLinear}) {
    const LrSchedule s = make(decay, /*warmup_steps=*/7, /*steps=*/500);
    for (int64_t step = 1; step < 7; ++step) EXPECT_LT(s.lr_at(step), s.lr_at(step + 1)) << step;
    for (int64_t step = 7; step < 500; ++step) EXPECT_GT(s.lr_at(step), s.lr_at(step + 1)) << step;
  }
}

TEST(LrScheduleTest, WithoutWarmupTheFirstStepIsNearlyLr) {
  const LrSchedule s = make(LrDecay::kCosine, /*warmup_steps=*/0, /*steps=*/100);
  EXPECT_EQ(s.lr_at(0), 1e-3);
  EXPECT_LT(s.lr_at(1), 1e-3);
  EXPECT_GT(s.lr_at(1), 0.999e-3);
  EXPECT_EQ(s.lr_at(100), 1e-4);
}

TEST(LrScheduleTest, WarmupOverEveryStepLeavesNoDecay) {
  const LrSchedule s = make(LrDecay::kCosine, /*warmup_steps=*/50, /*steps=*/50);
  EXPECT_DOUBLE_EQ(s.lr_at(25), 5e-4);
  EXPECT_EQ(s.lr_at(50), 1e-3);
  EXPECT_EQ(s.lr_at(51), 1e-3);
}

TEST(LrScheduleTest, SingleStepJob) {
  EXPECT_EQ(make(LrDecay::kCosine, 0, 1).lr_at(1), 1e-4);
  EXPECT_EQ(make(LrDecay::kCosine, 1, 1).lr_at(1), 1e-3);
}

TEST(LrScheduleTest, RejectsOptionsOutOfRangeNamingTheField) {
  struct Case {
    LrScheduleOptions options;
    const char* field;
  };
  const Case cases[] = {
      {{0, 0, 0, 10, LrDecay::kCosine}, "train.lr"},
      {{1, 2, 0, 10, LrDecay::kCosine}, "train.min_lr"},
      {{1, -1, 0, 10, LrDecay::kCosine}, "train.min_lr"},
      {{1, 0, 0, 0, LrDecay::kCosine}, "train.steps"},
      {{1, 0, 11, 10, LrDecay::kCosine}, "train.warmup_steps"},
      {{1, 0, -1, 10, LrDecay::kCosine}, "train.warmup_steps"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<LrSchedule> s = LrSchedule::create(c.options);
    ASSERT_FALSE(s.ok()) << c.field;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(s.status().message().rfind(c.field, 0), 0u) << s.status();
  }
}

}  // namespace
}  // namespace fp8::engine
