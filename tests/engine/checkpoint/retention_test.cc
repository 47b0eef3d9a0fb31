#include "worker/engine/checkpoint/retention.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/engine/checkpoint/checkpoint_test_util.h"
#include "worker/engine/checkpoint/checkpoint.h"

namespace fp8::checkpoint {
namespace {

using ::fp8::checkpoint::test_util::CheckpointTest;
using ::fp8::checkpoint::test_util::SaveSample;
using ::fp8::checkpoint::test_util::TruncateTo;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

class CheckpointRetentionTest : public CheckpointTest {
 protected:
  std::vector<int64_t> StepsOnDisk() {
    absl::StatusOr<std::vector<CheckpointEntry>> entries = ListCheckpoints(root_);
    EXPECT_TRUE(entries.ok()) << entries.status();
    std::vector<int64_t> steps;
    for (const CheckpointEntry& entry : entries.value()) steps.push_back(entry.step);
    return steps;
  }
};

TEST_F(CheckpointRetentionTest, KeepsTheNewestN) {
  for (int64_t step : {100, 200, 300, 400, 500}) ASSERT_TRUE(SaveSample(root_, step).ok());
  absl::StatusOr<PruneResult> pruned = PruneCheckpoints(root_, 2);
  ASSERT_TRUE(pruned.ok()) << pruned.status();
  EXPECT_THAT(pruned->kept, ElementsAre(500, 400));
  EXPECT_THAT(pruned->deleted, ElementsAre(300, 200, 100));
  EXPECT_THAT(StepsOnDisk(), ElementsAre(500, 400));
  EXPECT_EQ(FindLatestGood(root_).value().checkpoint->step(), 500);

  // Pruning again changes nothing.
  pruned = PruneCheckpoints(root_, 2);
  ASSERT_TRUE(pruned.ok()) << pruned.status();
  EXPECT_THAT(pruned->deleted, IsEmpty());
}

TEST_F(CheckpointRetentionTest, DeletesLeftoversOlderThanTheNewestCommitButNotNewerOnes) {
  ASSERT_TRUE(SaveSample(root_, 100).ok());
  ASSERT_TRUE(PrepareStepDirectory(root_, 150).ok());  // a crashed attempt: never committed
  const CommittedCheckpoint damaged = SaveSample(root_, 180).value();
  TruncateTo(damaged.ShardPath(0), 10);
  ASSERT_TRUE(SaveSample(root_, 200).ok());
  ASSERT_TRUE(PrepareStepDirectory(root_, 300).ok());  // perhaps being written right now

  absl::StatusOr<PruneResult> pruned = PruneCheckpoints(root_, 3);
  ASSERT_TRUE(pruned.ok()) << pruned.status();
  EXPECT_THAT(pruned->kept, ElementsAre(200, 100));
  EXPECT_THAT(pruned->deleted, ElementsAre(180, 150));
  EXPECT_THAT(StepsOnDisk(), ElementsAre(300, 200, 100));
}

TEST_F(CheckpointRetentionTest, WithNothingCommittedNothingIsDeleted) {
  ASSERT_TRUE(PrepareStepDirectory(root_, 100).ok());
  absl::StatusOr<PruneResult> pruned = PruneCheckpoints(root_, 1);
  ASSERT_TRUE(pruned.ok()) << pruned.status();
  EXPECT_THAT(pruned->deleted, IsEmpty());
  EXPECT_THAT(StepsOnDisk(), ElementsAre(100));
}

TEST_F(CheckpointRetentionTest, MissingRootIsNothingToDo) {
  absl::StatusOr<PruneResult> pruned = PruneCheckpoints(root_, 3);
  ASSERT_TRUE(pruned.ok()) << pruned.status();
  EXPECT_THAT(pruned->kept, IsEmpty());
  EXPECT_THAT(pruned->deleted, IsEmpty());
}

TEST_F(CheckpointRetentionTest, KeepMustBePositive) {
  EXPECT_TRUE(absl::IsInvalidArgument(PruneCheckpoints(root_, 0).status()));
}

}  // namespace
}  // namespace fp8::checkpoint
