#include "worker/engine/checkpoint/retention.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/engine/checkpoint/checkpoint_test_util.h"
#include "worker/engine/checkpoint/checkpoint.h"

namespace fp8::checkpoint {
namespace {

using ::fp8::checkpoint::test_util::CheckpointTest;
using ::fp8::checkpoint::test_util::save_sample;
using ::fp8::checkpoint::test_util::truncate_to;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

class CheckpointRetentionTest : public CheckpointTest {
 protected:
  std::vector<int64_t> steps_on_disk() {
    absl::StatusOr<std::vector<CheckpointEntry>> entries = list_checkpoints(root_);
    EXPECT_TRUE(entries.ok()) << entries.status();
    std::vector<int64_t> steps;
    for (const CheckpointEntry& entry : entries.value()) steps.push_back(entry.step);
    return steps;
  }
};

TEST_F(CheckpointRetentionTest, KeepsTheNewestN) {
  for (int64_t step : {100, 200, 300, 400, 500}) ASSERT_TRUE(save_sample(root_, step).ok());
  absl::StatusOr<PruneResult> pruned = prune_checkpoints(root_, 2);
  ASSERT_TRUE(pruned.ok()) << pruned.status();
  EXPECT_THAT(pruned->kept, ElementsAre(500, 400));
  EXPECT_THAT(pruned->deleted, ElementsAre(300, 200, 100));
  EXPECT_THAT(steps_on_disk(), ElementsAre(500, 400));
  EXPECT_EQ(find_latest_good(root_).value().checkpoint->step(), 500);

  // Pruning again changes nothing.
  pruned = prune_checkpoints(root_, 2);
  ASSERT_TRUE(pruned.ok()) << pruned.status();
  EXPECT_THAT(pruned->deleted, IsEmpty());
}

TEST_F(CheckpointRetentionTest, DeletesLeftoversOlderThanTheNewestCommitButNotNewerOnes) {
  ASSERT_TRUE(save_sample(root_, 100).ok());
  ASSERT_TRUE(prepare_step_directory(root_, 150).ok());  // a crashed attempt: never committed
  const CommittedCheckpoint damaged = save_sample(root_, 180).value();
  truncate_to(damaged.shard_path(0), 10);
  ASSERT_TRUE(save_sample(root_, 200).ok());
  ASSERT_TRUE(prepare_step_directory(root_, 300).ok());  // perhaps being written right now

  absl::StatusOr<PruneResult> pruned = prune_checkpoints(root_, 3);
  ASSERT_TRUE(pruned.ok()) << pruned.status();
  EXPECT_THAT(pruned->kept, ElementsAre(200, 100));
  EXPECT_THAT(pruned->deleted, ElementsAre(180, 150));
  EXPECT_THAT(steps_on_disk(), ElementsAre(300, 200, 100));
}

TEST_F(CheckpointRetentionTest, WithNothingCommittedNothingIsDeleted) {
  ASSERT_TRUE(prepare_step_directory(root_, 100).ok());
  absl::StatusOr<PruneResult> pruned = prune_checkpoints(root_, 1);
  ASSERT_TRUE(pruned.ok()) << pruned.status();
  EXPECT_THAT(pruned->deleted, IsEmpty());
  EXPECT_THAT(steps_on_disk(), ElementsAre(100));
}

TEST_F(CheckpointRetentionTest, MissingRootIsNothingToDo) {
  absl::StatusOr<PruneResult> pruned = prune_checkpoints(root_, 3);
  ASSERT_TRUE(pruned.ok()) << pruned.status();
  EXPECT_THAT(pruned->kept, IsEmpty());
  EXPECT_THAT(pruned->deleted, IsEmpty());
}

TEST_F(CheckpointRetentionTest, KeepMustBePositive) {
  EXPECT_TRUE(absl::IsInvalidArgument(prune_checkpoints(root_, 0).status()));
}

}  // namespace
}  // namespace fp8::checkpoint
