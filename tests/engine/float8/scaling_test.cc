// DelayedScaling: the window max picks the scale, the history rolls, amaxes of 0 or
// non-finite ones keep the previous scale, and the state survives a checkpoint.
#include "worker/engine/float8/scaling.h"

#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace fp8::engine {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(DelayedScaling, HasNoScaleBeforeTheFirstAmax) {
  DelayedScaling d(3, Format::kE4M3, false);
  EXPECT_FALSE(d.next_scale().has_value());
  EXPECT_TRUE(d.history().empty());
}

TEST(DelayedScaling, ScaleComesFromTheMaxOfTheLastHAmaxes) {
  DelayedScaling d(3, Format::kE4M3, false);
  d.record(1.0f);
  EXPECT_EQ(d.next_scale(), 448.0f);
  d.record(4.0f);
  d.record(2.0f);
  EXPECT_EQ(d.history(), (std::vector<float>{1.0f, 4.0f, 2.0f}));
  EXPECT_EQ(d.next_scale(), 448.0f / 4.0f);
  d.record(1.0f);  // evicts 1: the window is 4, 2, 1
  EXPECT_EQ(d.history(), (std::vector<float>{4.0f, 2.0f, 1.0f}));
  EXPECT_EQ(d.next_scale(), 448.0f / 4.0f);
  d.record(1.0f);  // evicts 4: the window is 2, 1, 1
  EXPECT_EQ(d.history(), (std::vector<float>{2.0f, 1.0f, 1.0f}));
  EXPECT_EQ(d.next_scale(), 448.0f / 2.0f);
}

TEST(DelayedScaling, RangeUseSaysWhenTheCastSaturated) {
  DelayedScaling d(2, Format::kE4M3, false);
  d.record(2.0f);  // cast dynamically: no delayed scale yet
  EXPECT_EQ(d.last_range_use(), 0.0f);
  d.record(1.0f);  // cast with 448 / 2
  EXPECT_FLOAT_EQ(d.last_range_use(), 0.5f);
  d.record(3.0f);  // cast with 448 / 2 again: 3 / 2 of the range, saturated
  EXPECT_FLOAT_EQ(d.last_range_use(), 1.5f);
}

TEST(DelayedScaling, ReplayStartsOverFromAHistory) {
  DelayedScaling d(3, Format::kE4M3, false);
  d.record(100.0f);
  d.replay(std::vector<float>{1.0f, 8.0f, 2.0f, 4.0f});  // only the newest 3 count
  EXPECT_EQ(d.history(), (std::vector<float>{8.0f, 2.0f, 4.0f}));
  EXPECT_EQ(d.next_scale(), 448.0f / 8.0f);
  d.replay({});
  EXPECT_TRUE(d.history().empty());
  EXPECT_FALSE(d.next_scale().has_value());
}

TEST(DelayedScaling, UsesTheFormatAndPowerOfTwoRounding) {
  DelayedScaling d(2, Format::kE5M2, true);
  d.record(3.0f);
  // 57344 / 3 = 19114.67, rounded down to a power of two.
  EXPECT_EQ(d.next_scale(), 16384.0f);
}

TEST(DelayedScaling, AZeroWindowKeepsThePreviousScale) {
  DelayedScaling d(1, Format::kE4M3, false);
  d.record(2.0f);
  d.record(0.0f);
  EXPECT_EQ(d.next_scale(), 224.0f);
  EXPECT_EQ(d.history(), (std::vector<float>{0.0f}));
}

TEST(DelayedScaling, OnlyZerosLeaveNoScale) {
  DelayedScaling d(2, Format::kE4M3, false);
  d.record(0.0f);
  EXPECT_FALSE(d.next_scale().has_value());
}

TEST(DelayedScaling, ANonFiniteAmaxFreezesTheScaleWhileInTheWindow) {
  for (float bad : {kNaN, kInf}) {
    DelayedScaling d(2, Format::kE4M3, false);
    d.record(1.0f);
    d.record(bad);
    EXPECT_EQ(d.next_scale(), 448.0f) << bad;
    d.record(2.0f);  // the window still holds the bad amax
    EXPECT_EQ(d.next_scale(), 448.0f) << bad;
    d.record(4.0f);  // now 2, 4
    EXPECT_EQ(d.next_scale(), 112.0f) << bad;
  }
}

TEST(DelayedScaling, SerializationRoundTrips) {
  DelayedScaling d(3, Format::kE4M3, false);
  for (float a : {1.0f, 5.0f, 2.0f, 3.0f}) d.record(a);  // wrapped once
  const std::vector<float> saved = d.serialize();
  EXPECT_EQ(static_cast<int64_t>(saved.size()), DelayedScaling::serialized_size(3));

  DelayedScaling restored(3, Format::kE4M3, false);
  ASSERT_TRUE(restored.restore(saved).ok());
  EXPECT_EQ(restored.history(), d.history());
  EXPECT_EQ(restored.next_scale(), d.next_scale());
  // And both evolve alike afterwards.
  d.record(0.5f);
  restored.record(0.5f);
  EXPECT_EQ(restored.history(), d.history());
  EXPECT_EQ(restored.next_scale(), d.next_scale());
}

TEST(DelayedScaling, SerializationKeepsAMissingScaleMissing) {
  DelayedScaling d(2, Format::kE4M3, false);
  DelayedScaling restored(2, Format::kE4M3, false);
  restored.record(7.0f);
  ASSERT_TRUE(restored.restore(d.serialize()).ok());
  EXPECT_FALSE(restored.next_scale().has_value());
  EXPECT_TRUE(restored.history().empty());
}

TEST(DelayedScaling, RestoreRejectsAForeignStateAndChangesNothing) {
  DelayedScaling d(3, Format::kE4M3, false);
  d.record(2.0f);
  const std::vector<float> before = d.serialize();

  DelayedScaling other(4, Format::kE4M3, false);
  std::vector<float> four = other.serialize();
  four.pop_back();  // right length for 3, header says 4
  absl::Status s = d.restore(four);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("amax_history_len 4"), std::string::npos) << s;

  EXPECT_FALSE(d.restore(std::vector<float>(2, 0.0f)).ok());
  std::vector<float> corrupt = before;
  corrupt[1] = 9.0f;  // the ring index past the end
  EXPECT_FALSE(d.restore(corrupt).ok());
  EXPECT_EQ(d.serialize(), before);
}

// The flat state is what backend memory holds (Float8Linear keeps it there and records
// into it with Backend::record_delayed_amaxes): read back, it is the same state.
TEST(DelayedScaling, TheFlatStateRoundTrips) {
  DelayedScaling d(3, Format::kE5M2, true);
  for (float a : {2.0f, 0.5f, 7.0f, 1.0f}) d.record(a);
  absl::StatusOr<DelayedScaling> back = DelayedScaling::from_state(d.state(), 3, Format::kE5M2, true);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->history(), d.history());
  EXPECT_EQ(back->next_scale(), d.next_scale());
  EXPECT_EQ(back->last_range_use(), d.last_range_use());
  back->record(3.0f);
  d.record(3.0f);
  EXPECT_EQ(back->state(), d.state());
}

TEST(DelayedScaling, AFlatStateOfAnotherCastIsRejected) {
  DelayedScaling d(3, Format::kE4M3, false);
  d.record(2.0f);
  // Another history length, format or rounding, or a damaged index.
  EXPECT_FALSE(DelayedScaling::from_state(d.state(), 4, Format::kE4M3, false).ok());
  EXPECT_FALSE(DelayedScaling::from_state(d.state(), 3, Format::kE5M2, false).ok());
  EXPECT_FALSE(DelayedScaling::from_state(d.state(), 3, Format::kE4M3, true).ok());
  std::vector<float> damaged = d.state();
  damaged[1] = 3.0f;  // the next slot, one past the ring
  absl::Status s = DelayedScaling::from_state(damaged, 3, Format::kE4M3, false).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
}

}  // namespace
}  // namespace fp8::engine
