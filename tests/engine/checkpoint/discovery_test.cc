// Choosing the checkpoint to resume from: the newest good one, with every newer one that
// was passed over reported, whatever world size wrote it.
#include "worker/engine/checkpoint/discovery.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/engine/checkpoint/checkpoint_test_util.h"
#include "worker/engine/checkpoint/checkpoint.h"

namespace fp8::checkpoint {
namespace {

using ::fp8::checkpoint::test_util::CheckpointTest;
using ::fp8::checkpoint::test_util::expect_sample_weights;
using ::fp8::checkpoint::test_util::flip_byte;
using ::fp8::checkpoint::test_util::read_file;
using ::fp8::checkpoint::test_util::save_sample;
using ::fp8::checkpoint::test_util::truncate_to;
using ::fp8::checkpoint::test_util::write_file;
using ::fp8::checkpoint::test_util::write_sample_records;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

class CheckpointDiscoveryTest : public CheckpointTest {
 protected:
  // The step FindLatestGood picks (-1 for none) and its warnings.
  std::pair<int64_t, std::vector<std::string>> latest(Verification verification = Verification::kPayloads) {
    absl::StatusOr<ResumePoint> resume = find_latest_good(root_, verification);
    EXPECT_TRUE(resume.ok()) << resume.status();
    if (!resume.ok()) return {-2, {}};
    return {resume->checkpoint ? resume->checkpoint->step() : -1, resume->warnings};
  }
};

TEST_F(CheckpointDiscoveryTest, NoRootOrEmptyRootMeansStartFresh) {
  EXPECT_EQ(latest(), (std::pair<int64_t, std::vector<std::string>>{-1, {}}));
  std::filesystem::create_directories(root_);
  EXPECT_EQ(latest(), (std::pair<int64_t, std::vector<std::string>>{-1, {}}));
}

TEST_F(CheckpointDiscoveryTest, RootThatIsAFileIsAnError) {
  write_file(root_, "not a directory");
  EXPECT_THAT(std::string(find_latest_good(root_).status().message()), HasSubstr("is not a directory"));
}

TEST_F(CheckpointDiscoveryTest, PicksTheNewestAndItLoads) {
  ASSERT_TRUE(save_sample(root_, 100).ok());
  ASSERT_TRUE(save_sample(root_, 200).ok());
  absl::StatusOr<ResumePoint> resume = find_latest_good(root_);
  ASSERT_TRUE(resume.ok()) << resume.status();
  ASSERT_TRUE(resume->checkpoint.has_value());
  EXPECT_EQ(resume->checkpoint->step(), 200);
  EXPECT_THAT(resume->warnings, IsEmpty());
  absl::StatusOr<ShardReader> shard = open_committed_shard(*resume->checkpoint, 0);
  ASSERT_TRUE(shard.ok()) << shard.status();
  expect_sample_weights(*shard, 200, 0);
  EXPECT_EQ(shard->read_scalar<int64_t>("data/position").value(), 2000);
  EXPECT_EQ(shard->read_bytes("rng/state").value(), "rng-200-0");
  EXPECT_EQ(shard->metadata().at("job"), "sample");
}

TEST_F(CheckpointDiscoveryTest, SkipsACorruptNewestCheckpointAndSaysWhy) {
  ASSERT_TRUE(save_sample(root_, 100).ok());
  const CommittedCheckpoint newest = save_sample(root_, 200).value();
  flip_byte(newest.shard_path(0), kShardHeaderBytes + 3);  // a payload byte: only a full check sees it

  const auto [step, warnings] = latest();
  EXPECT_EQ(step, 100);
  ASSERT_THAT(warnings, SizeIs(1));
  EXPECT_THAT(warnings[0], HasSubstr("skipped checkpoint step 200: "));
  EXPECT_THAT(warnings[0], HasSubstr(newest.shard_path(0).string() + ": record 'params/w' checksum mismatch"));

  // The index-only check trades that for speed: it picks 200, and the load then refuses
  // the damaged record.
  absl::StatusOr<ResumePoint> quick = find_latest_good(root_, Verification::kIndex);
  ASSERT_TRUE(quick.ok() && quick->checkpoint) << quick.status();
  EXPECT_EQ(quick->checkpoint->step(), 200);
  std::vector<float> weights(test_util::kSampleRows * test_util::kSampleCols);
  const absl::Status load =
      open_committed_shard(*quick->checkpoint, 0)
          ->read_tensor<float>("params/w", std::span(weights), {test_util::kSampleRows, test_util::kSampleCols});
  EXPECT_TRUE(absl::IsDataLoss(load)) << load;
}

TEST_F(CheckpointDiscoveryTest, MissingCommitMarkerMeansIncomplete) {
  ASSERT_TRUE(save_sample(root_, 100).ok());
  const CommittedCheckpoint newest = save_sample(root_, 200).value();
  std::filesystem::remove(newest.dir / kCommitMarkerFileName);

  const auto [step, warnings] = latest();
  EXPECT_EQ(step, 100);
  ASSERT_THAT(warnings, SizeIs(1));
  EXPECT_THAT(warnings[0], HasSubstr("step 200: " + newest.dir.string() + ": incomplete: no COMMITTED marker"));

  absl::StatusOr<std::vector<CheckpointEntry>> listing = list_checkpoints(root_);
  ASSERT_TRUE(listing.ok()) << listing.status();
  ASSERT_THAT(*listing, SizeIs(2));
  EXPECT_EQ((*listing)[0].step, 200);
  EXPECT_EQ((*listing)[0].state, CheckpointState::kIncomplete);
  EXPECT_EQ((*listing)[1].step, 100);
  EXPECT_EQ((*listing)[1].state, CheckpointState::kCommitted);
}

TEST_F(CheckpointDiscoveryTest, DamagedCommitMarkerIsSkipped) {
  ASSERT_TRUE(save_sample(root_, 100).ok());
  const CommittedCheckpoint newest = save_sample(root_, 200).value();
  flip_byte(newest.dir / kCommitMarkerFileName, 30);
  const auto [step, warnings] = latest();
  EXPECT_EQ(step, 100);
  ASSERT_THAT(warnings, SizeIs(1));
  EXPECT_THAT(warnings[0], HasSubstr("COMMITTED: commit marker damaged"));
}

TEST_F(CheckpointDiscoveryTest, MissingShardIsSkipped) {
  ASSERT_TRUE(save_sample(root_, 100, 2).ok());
  const CommittedCheckpoint newest = save_sample(root_, 200, 2).value();
  std::filesystem::remove(newest.shard_path(1));
  const auto [step, warnings] = latest();
  EXPECT_EQ(step, 100);
  ASSERT_THAT(warnings, SizeIs(1));
  EXPECT_THAT(warnings[0], HasSubstr(newest.shard_path(1).string() + ": shard listed in the commit marker is missing"));
}

TEST_F(CheckpointDiscoveryTest, ShardOfTheWrongSizeIsSkipped) {
  ASSERT_TRUE(save_sample(root_, 100).ok());
  const CommittedCheckpoint newest = save_sample(root_, 200).value();
  const uint64_t size = std::filesystem::file_size(newest.shard_path(0));
  truncate_to(newest.shard_path(0), size - 1);
  const auto [step, warnings] = latest();
  EXPECT_EQ(step, 100);
  ASSERT_THAT(warnings, SizeIs(1));
  EXPECT_THAT(warnings[0], HasSubstr(absl::StrCat(size - 1, " bytes, but the commit marker says ", size)));
}

TEST_F(CheckpointDiscoveryTest, ShardReplacedAfterTheCommitIsSkipped) {
  // Same size, valid on its own, but not the file the marker recorded.
  const CommittedCheckpoint older = save_sample(root_, 100).value();
  const CommittedCheckpoint newest = save_sample(root_, 200).value();
  write_file(newest.shard_path(0), read_file(older.shard_path(0)));
  const auto [step, warnings] = latest();
  EXPECT_EQ(step, 100);
  ASSERT_THAT(warnings, SizeIs(1));
  EXPECT_THAT(warnings[0], HasSubstr("differs from the commit marker's"));
}

// A job may resume at another world size (train/checkpoint_rows.h cuts the parameters
// anew): the newest good checkpoint is chosen whoever wrote it.
TEST_F(CheckpointDiscoveryTest, TheNewestIsChosenWhateverWorldSizeWroteIt) {
  ASSERT_TRUE(save_sample(root_, 100, 2).ok());
  ASSERT_TRUE(save_sample(root_, 200, 4).ok());
  absl::StatusOr<ResumePoint> resume = find_latest_good(root_);
  ASSERT_TRUE(resume.ok() && resume->checkpoint) << resume.status();
  EXPECT_EQ(resume->checkpoint->step(), 200);
  EXPECT_EQ(resume->checkpoint->world_size(), 4);
}

TEST_F(CheckpointDiscoveryTest, LeftoverTempFilesAreIgnored) {
  ASSERT_TRUE(save_sample(root_, 100).ok());
  // A crash in the middle of step 300: a half-written shard and a half-written marker.
  const std::filesystem::path dir300 = prepare_step_directory(root_, 300).value();
  write_file(temp_path_for(dir300 / shard_file_name(0, 1)), "FP8-CKPT half a shard");
  write_file(temp_path_for(dir300 / kCommitMarkerFileName), "fp8-checkpoint-commit 1\nstep 30");
  // And a stray temp file next to a good checkpoint changes nothing.
  write_file(temp_path_for(step_directory(root_, 100) / shard_file_name(0, 1)), "junk");

  const auto [step, warnings] = latest();
  EXPECT_EQ(step, 100);
  ASSERT_THAT(warnings, SizeIs(1));
  EXPECT_THAT(warnings[0], HasSubstr("step 300: " + dir300.string() + ": incomplete"));
}

TEST_F(CheckpointDiscoveryTest, CheckpointBeingWrittenIsIgnored) {
  ASSERT_TRUE(save_sample(root_, 100).ok());
  const std::filesystem::path dir = prepare_step_directory(root_, 200).value();
  absl::StatusOr<ShardWriter> writer = ShardWriter::create(dir / shard_file_name(0, 1), {.step = 200});
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE(write_sample_records(*writer, 200, 0).ok());
  EXPECT_EQ(latest().first, 100);
  ASSERT_TRUE(writer->finish().ok());
  EXPECT_EQ(latest().first, 100);  // finished but not committed
}

TEST_F(CheckpointDiscoveryTest, OtherEntriesInTheRootAreIgnored) {
  ASSERT_TRUE(save_sample(root_, 100).ok());
  std::filesystem::create_directories(root_ / "step-200");  // not the canonical name
  std::filesystem::create_directories(root_ / "tensorboard");
  write_file(root_ / "step-00000300", "a file, not a directory");
  write_file(root_ / "notes.txt", "hello");
  EXPECT_EQ(latest(), (std::pair<int64_t, std::vector<std::string>>{100, {}}));
}

// The distributed protocol, with the ranks played one after another: each rank writes its
// shard; rank 0 commits once all have reported; each rank resumes from its own shard.
TEST_F(CheckpointDiscoveryTest, DistributedSaveAndResume) {
  constexpr int32_t kWorld = 3;
  std::vector<ShardInfo> reported;
  for (int32_t rank = kWorld - 1; rank >= 0; --rank) {  // reports arrive in any order
    absl::StatusOr<ShardInfo> info =
        write_rank_shard(root_, 500, rank, kWorld, [&](ShardWriter& w) { return write_sample_records(w, 500, rank); });
    ASSERT_TRUE(info.ok()) << info.status();
    absl::StatusOr<ShardInfo> read_back = read_shard_info(step_directory(root_, 500) / info->file_name);
    ASSERT_TRUE(read_back.ok()) << read_back.status();
    EXPECT_EQ(*read_back, *info);
    reported.push_back(*info);
    EXPECT_EQ(latest().first, -1) << "nothing counts before the commit";
  }
  ASSERT_TRUE(write_commit_marker(step_directory(root_, 500), 500, kWorld, reported).ok());

  absl::StatusOr<ResumePoint> resume = find_latest_good(root_);
  ASSERT_TRUE(resume.ok() && resume->checkpoint) << resume.status();
  for (int32_t rank = 0; rank < kWorld; ++rank) {
    absl::StatusOr<ShardReader> shard = open_committed_shard(*resume->checkpoint, rank);
    ASSERT_TRUE(shard.ok()) << shard.status();
    EXPECT_EQ(shard->identity(), (ShardIdentity{.step = 500, .rank = rank, .world_size = kWorld}));
    expect_sample_weights(*shard, 500, rank);
  }
}

TEST_F(CheckpointDiscoveryTest, ARankThatFailedLeavesTheStepIncomplete) {
  ASSERT_TRUE(save_sample(root_, 100, 2).ok());
  ASSERT_TRUE(write_rank_shard(root_, 200, 0, 2, [](ShardWriter& w) { return write_sample_records(w, 200, 0); }).ok());
  const absl::Status failed = write_rank_shard(root_, 200, 1, 2, [](ShardWriter&) {
                                return absl::UnavailableError("rank 1 ran out of disk");
                              }).status();
  EXPECT_EQ(failed.message(), "rank 1 ran out of disk");
  EXPECT_FALSE(std::filesystem::exists(temp_path_for(step_directory(root_, 200) / shard_file_name(1, 2))));
  // No marker is written, so resume takes step 100.
  EXPECT_EQ(latest().first, 100);
}

TEST_F(CheckpointDiscoveryTest, OpenCommittedShardChecksTheRank) {
  const CommittedCheckpoint checkpoint = save_sample(root_, 100, 2).value();
  EXPECT_THAT(std::string(open_committed_shard(checkpoint, 2).status().message()),
              HasSubstr("rank 2 is outside checkpoint step 100, which has 2 ranks"));
}

}  // namespace
}  // namespace fp8::checkpoint
