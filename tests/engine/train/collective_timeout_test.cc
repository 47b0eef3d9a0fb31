// How long a training step's collectives wait (train/collective_timeout.h), on a real
// one-rank Gloo group: the group's own timeout until the steps' pace is known, then what
// the job configured or what its slowest step implies; the group's again while relaxed.
#include "worker/engine/train/collective_timeout.h"

#include <memory>

#include "gtest/gtest.h"
#include "tests/engine/train/train_test_util.h"
#include "worker/engine/collectives/file_store.h"
#include "worker/engine/collectives/gloo_process_group.h"

namespace fp8::engine {
namespace {

class CollectiveTimeoutTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = collectives::FileStore::open(dir_.path() / "rendezvous");
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    collectives::ProcessGroupOptions options;
    options.timeout = absl::Seconds(300);
    auto group = collectives::make_gloo_process_group(*store_, 0, 1, options);
    ASSERT_TRUE(group.ok()) << group.status();
    group_ = std::move(*group);
  }

  testing::TempDir dir_{"collective-timeout"};
  std::unique_ptr<collectives::FileStore> store_;
  std::unique_ptr<collectives::ProcessGroup> group_;
};

TEST(DerivedCollectiveTimeoutTest, IsAMultipleOfTheSlowestStepWithinItsBounds) {
  const absl::Duration group = absl::Seconds(300);
  EXPECT_EQ(derived_collective_timeout(absl::Milliseconds(10), group), absl::Seconds(60));  // the floor
  EXPECT_EQ(derived_collective_timeout(absl::Seconds(6), group), absl::Seconds(120));       // 20x
  EXPECT_EQ(derived_collective_timeout(absl::Seconds(40), group), group);                   // never longer
  EXPECT_EQ(derived_collective_timeout(absl::Seconds(1), absl::Seconds(30)), absl::Seconds(30));
}

TEST_F(CollectiveTimeoutTest, DerivedFromTheStepsOnceTheyHaveSettled) {
  CollectiveTimeout timeout(group_.get(), /*configured_seconds=*/0);
  for (int step = 1; step <= kSettleSteps; ++step) {
    timeout.begin_step();
    EXPECT_EQ(group_->timeout(), absl::Seconds(300)) << "step " << step << " is still settling";
    timeout.end_step(step == 2 ? absl::Seconds(4) : absl::Milliseconds(50));
  }
  timeout.begin_step();
  EXPECT_EQ(group_->timeout(), absl::Seconds(80));  // 20 x the slowest step (4 s)
  timeout.end_step(absl::Seconds(5));
  timeout.begin_step();
  EXPECT_EQ(group_->timeout(), absl::Seconds(100));
}

TEST_F(CollectiveTimeoutTest, AConfiguredTimeoutHoldsFromTheFirstStep) {
  CollectiveTimeout timeout(group_.get(), /*configured_seconds=*/7);
  timeout.begin_step();
  EXPECT_EQ(group_->timeout(), absl::Seconds(7));
  timeout.end_step(absl::Seconds(100));  // a slow step changes nothing
  timeout.begin_step();
  EXPECT_EQ(group_->timeout(), absl::Seconds(7));
}

TEST_F(CollectiveTimeoutTest, RelaxedRestoresTheLongerOfTheGroupsAndTheJobsTimeout) {
  CollectiveTimeout configured(group_.get(), /*configured_seconds=*/7);
  configured.begin_step();
  {
    const CollectiveTimeout::Relaxed relaxed = configured.relaxed();
    EXPECT_EQ(group_->timeout(), absl::Seconds(300));
  }
  EXPECT_EQ(group_->timeout(), absl::Seconds(7));

  CollectiveTimeout longer(group_.get(), /*configured_seconds=*/900);
  longer.begin_step();
  const CollectiveTimeout::Relaxed relaxed = longer.relaxed();
  EXPECT_EQ(group_->timeout(), absl::Seconds(900));
}

TEST(CollectiveTimeoutWithoutAGroupTest, DoesNothing) {
  CollectiveTimeout timeout(nullptr, 0);
  timeout.begin_step();
  timeout.end_step(absl::Seconds(1));
  const CollectiveTimeout::Relaxed relaxed = timeout.relaxed();
  SUCCEED();
}

}  // namespace
}  // namespace fp8::engine
