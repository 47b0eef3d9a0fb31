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
using ::fp8::checkpoint::test_util::ExpectSampleWeights;
using ::fp8::checkpoint::test_util::FlipByte;
using ::fp8::checkpoint::test_util::ReadFile;
using ::fp8::checkpoint::test_util::SaveSample;
using ::fp8::checkpoint::test_util::TruncateTo;
using ::fp8::checkpoint::test_util::WriteFile;
using ::fp8::checkpoint::test_util::WriteSampleRecords;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

class CheckpointDiscoveryTest : public CheckpointTest {
 protected:
  // The step FindLatestGood picks (-1 for none) and its warnings.
  std::pair<int64_t, std::vector<std::string>> Latest(Verification verification = Verification::kPayloads) {
    absl::StatusOr<ResumePoint> resume = FindLatestGood(root_, verification);
    EXPECT_TRUE(resume.ok()) << resume.status();
    if (!resume.ok()) return {-2, {}};
    return {resume->checkpoint ? resume->checkpoint->step() : -1, resume->warnings};
  }
};

TEST_F(CheckpointDiscoveryTest, NoRootOrEmptyRootMeansStartFresh) {
  EXPECT_EQ(Latest(), (std::pair<int64_t, std::vector<std::string>>{-1, {}}));
  std::filesystem::create_directories(root_);
  EXPECT_EQ(Latest(), (std::pair<int64_t, std::vector<std::string>>{-1, {}}));
}

TEST_F(CheckpointDiscoveryTest, RootThatIsAFileIsAnError) {
  WriteFile(root_, "not a directory");
  EXPECT_THAT(std::string(FindLatestGood(root_).status().message()), HasSubstr("is not a directory"));
}

TEST_F(CheckpointDiscoveryTest, PicksTheNewestAndItLoads) {
  ASSERT_TRUE(SaveSample(root_, 100).ok());
  ASSERT_TRUE(SaveSample(root_, 200).ok());
  absl::StatusOr<ResumePoint> resume = FindLatestGood(root_);
  ASSERT_TRUE(resume.ok()) << resume.status();
  ASSERT_TRUE(resume->checkpoint.has_value());
  EXPECT_EQ(resume->checkpoint->step(), 200);
  EXPECT_THAT(resume->warnings, IsEmpty());
  absl::StatusOr<ShardReader> shard = OpenCommittedShard(*resume->checkpoint, 0);
  ASSERT_TRUE(shard.ok()) << shard.status();
  ExpectSampleWeights(*shard, 200, 0);
  EXPECT_EQ(shard->ReadScalar<int64_t>("data/position").value(), 2000);
  EXPECT_EQ(shard->ReadBytes("rng/state").value(), "rng-200-0");
  EXPECT_EQ(shard->metadata().at("job"), "sample");
}

TEST_F(CheckpointDiscoveryTest, SkipsACorruptNewestCheckpointAndSaysWhy) {
  ASSERT_TRUE(SaveSample(root_, 100).ok());
  const CommittedCheckpoint newest = SaveSample(root_, 200).value();
  FlipByte(newest.ShardPath(0), kShardHeaderBytes + 3);  // a payload byte: only a full check sees it

  const auto [step, warnings] = Latest();
  EXPECT_EQ(step, 100);
  ASSERT_THAT(warnings, SizeIs(1));
  EXPECT_THAT(warnings[0], HasSubstr("skipped checkpoint step 200: "));
  EXPECT_THAT(warnings[0], HasSubstr(newest.ShardPath(0).string() + ": record 'params/w' checksum mismatch"));

  // The index-only check trades that for speed: it picks 200, and the load then refuses
  // the damaged record.
  absl::StatusOr<ResumePoint> quick = FindLatestGood(root_, Verification::kIndex);
  ASSERT_TRUE(quick.ok() && quick->checkpoint) << quick.status();
  EXPECT_EQ(quick->checkpoint->step(), 200);
  std::vector<float> weights(test_util::kSampleRows * test_util::kSampleCols);
  const absl::Status load =
      OpenCommittedShard(*quick->checkpoint, 0)
          ->ReadTensor<float>("params/w", std::span(weights), {test_util::kSampleRows, test_util::kSampleCols});
  EXPECT_TRUE(absl::IsDataLoss(load)) << load;
}

TEST_F(CheckpointDiscoveryTest, MissingCommitMarkerMeansIncomplete) {
  ASSERT_TRUE(SaveSample(root_, 100).ok());
  const CommittedCheckpoint newest = SaveSample(root_, 200).value();
  std::filesystem::remove(newest.dir / kCommitMarkerFileName);

  const auto [step, warnings] = Latest();
  EXPECT_EQ(step, 100);
  ASSERT_THAT(warnings, SizeIs(1));
  EXPECT_THAT(warnings[0], HasSubstr("step 200: " + newest.dir.string() + ": incomplete: no COMMITTED marker"));

  absl::StatusOr<std::vector<CheckpointEntry>> listing = ListCheckpoints(root_);
  ASSERT_TRUE(listing.ok()) << listing.status();
  ASSERT_THAT(*listing, SizeIs(2));
  EXPECT_EQ((*listing)[0].step, 200);
  EXPECT_EQ((*listing)[0].state, CheckpointState::kIncomplete);
  EXPECT_EQ((*listing)[1].step, 100);
  EXPECT_EQ((*listing)[1].state, CheckpointState::kCommitted);
}

TEST_F(CheckpointDiscoveryTest, DamagedCommitMarkerIsSkipped) {
  ASSERT_TRUE(SaveSample(root_, 100).ok());
  const CommittedCheckpoint newest = SaveSample(root_, 200).value();
  FlipByte(newest.dir / kCommitMarkerFileName, 30);
  const auto [step, warnings] = Latest();
  EXPECT_EQ(step, 100);
  ASSERT_THAT(warnings, SizeIs(1));
  EXPECT_THAT(warnings[0], HasSubstr("COMMITTED: commit marker damaged"));
}

TEST_F(CheckpointDiscoveryTest, MissingShardIsSkipped) {
  ASSERT_TRUE(SaveSample(root_, 100, 2).ok());
  const CommittedCheckpoint newest = SaveSample(root_, 200, 2).value();
  std::filesystem::remove(newest.ShardPath(1));
  const auto [step, warnings] = Latest();
  EXPECT_EQ(step, 100);
  ASSERT_THAT(warnings, SizeIs(1));
  EXPECT_THAT(warnings[0], HasSubstr(newest.ShardPath(1).string() + ": shard listed in the commit marker is missing"));
}

TEST_F(CheckpointDiscoveryTest, ShardOfTheWrongSizeIsSkipped) {
  ASSERT_TRUE(SaveSample(root_, 100).ok());
  const CommittedCheckpoint newest = SaveSample(root_, 200).value();
  const uint64_t size = std::filesystem::file_size(newest.ShardPath(0));
  TruncateTo(newest.ShardPath(0), size - 1);
  const auto [step, warnings] = Latest();
  EXPECT_EQ(step, 100);
  ASSERT_THAT(warnings, SizeIs(1));
  EXPECT_THAT(warnings[0], HasSubstr(absl::StrCat(size - 1, " bytes, but the commit marker says ", size)));
}

TEST_F(CheckpointDiscoveryTest, ShardReplacedAfterTheCommitIsSkipped) {
  // Same size, valid on its own, but not the file the marker recorded.
  const CommittedCheckpoint older = SaveSample(root_, 100).value();
  const CommittedCheckpoint newest = SaveSample(root_, 200).value();
  WriteFile(newest.ShardPath(0), ReadFile(older.ShardPath(0)));
  const auto [step, warnings] = Latest();
  EXPECT_EQ(step, 100);
  ASSERT_THAT(warnings, SizeIs(1));
  EXPECT_THAT(warnings[0], HasSubstr("differs from the commit marker's"));
}

// A job may resume at another world size (train/checkpoint_rows.h cuts the parameters
// anew): the newest good checkpoint is chosen whoever wrote it.
TEST_F(CheckpointDiscoveryTest, TheNewestIsChosenWhateverWorldSizeWroteIt) {
  ASSERT_TRUE(SaveSample(root_, 100, 2).ok());
  ASSERT_TRUE(SaveSample(root_, 200, 4).ok());
  absl::StatusOr<ResumePoint> resume = FindLatestGood(root_);
  ASSERT_TRUE(resume.ok() && resume->checkpoint) << resume.status();
  EXPECT_EQ(resume->checkpoint->step(), 200);
  EXPECT_EQ(resume->checkpoint->world_size(), 4);
}

TEST_F(CheckpointDiscoveryTest, LeftoverTempFilesAreIgnored) {
  ASSERT_TRUE(SaveSample(root_, 100).ok());
  // A crash in the middle of step 300: a half-written shard and a half-written marker.
  const std::filesystem::path dir300 = PrepareStepDirectory(root_, 300).value();
  WriteFile(TempPathFor(dir300 / ShardFileName(0, 1)), "FP8-CKPT half a shard");
  WriteFile(TempPathFor(dir300 / kCommitMarkerFileName), "fp8-checkpoint-commit 1\nstep 30");
  // And a stray temp file next to a good checkpoint changes nothing.
  WriteFile(TempPathFor(StepDirectory(root_, 100) / ShardFileName(0, 1)), "junk");

  const auto [step, warnings] = Latest();
  EXPECT_EQ(step, 100);
  ASSERT_THAT(warnings, SizeIs(1));
  EXPECT_THAT(warnings[0], HasSubstr("step 300: " + dir300.string() + ": incomplete"));
}

TEST_F(CheckpointDiscoveryTest, CheckpointBeingWrittenIsIgnored) {
  ASSERT_TRUE(SaveSample(root_, 100).ok());
  const std::filesystem::path dir = PrepareStepDirectory(root_, 200).value();
  absl::StatusOr<ShardWriter> writer = ShardWriter::Create(dir / ShardFileName(0, 1), {.step = 200});
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE(WriteSampleRecords(*writer, 200, 0).ok());
  EXPECT_EQ(Latest().first, 100);
  ASSERT_TRUE(writer->Finish().ok());
  EXPECT_EQ(Latest().first, 100);  // finished but not committed
}

TEST_F(CheckpointDiscoveryTest, OtherEntriesInTheRootAreIgnored) {
  ASSERT_TRUE(SaveSample(root_, 100).ok());
  std::filesystem::create_directories(root_ / "step-200");  // not the canonical name
  std::filesystem::create_directories(root_ / "tensorboard");
  WriteFile(root_ / "step-00000300", "a file, not a directory");
  WriteFile(root_ / "notes.txt", "hello");
  EXPECT_EQ(Latest(), (std::pair<int64_t, std::vector<std::string>>{100, {}}));
}

// The distributed protocol, with the ranks played one after another: each rank writes its
// shard; rank 0 commits once all have reported; each rank resumes from its own shard.
TEST_F(CheckpointDiscoveryTest, DistributedSaveAndResume) {
  constexpr int32_t kWorld = 3;
  std::vector<ShardInfo> reported;
  for (int32_t rank = kWorld - 1; rank >= 0; --rank) {  // reports arrive in any order
    absl::StatusOr<ShardInfo> info =
        WriteRankShard(root_, 500, rank, kWorld, [&](ShardWriter& w) { return WriteSampleRecords(w, 500, rank); });
    ASSERT_TRUE(info.ok()) << info.status();
    absl::StatusOr<ShardInfo> read_back = ReadShardInfo(StepDirectory(root_, 500) / info->file_name);
    ASSERT_TRUE(read_back.ok()) << read_back.status();
    EXPECT_EQ(*read_back, *info);
    reported.push_back(*info);
    EXPECT_EQ(Latest().first, -1) << "nothing counts before the commit";
  }
  ASSERT_TRUE(WriteCommitMarker(StepDirectory(root_, 500), 500, kWorld, reported).ok());

  absl::StatusOr<ResumePoint> resume = FindLatestGood(root_);
  ASSERT_TRUE(resume.ok() && resume->checkpoint) << resume.status();
  for (int32_t rank = 0; rank < kWorld; ++rank) {
    absl::StatusOr<ShardReader> shard = OpenCommittedShard(*resume->checkpoint, rank);
    ASSERT_TRUE(shard.ok()) << shard.status();
    EXPECT_EQ(shard->identity(), (ShardIdentity{.step = 500, .rank = rank, .world_size = kWorld}));
    ExpectSampleWeights(*shard, 500, rank);
  }
}

TEST_F(CheckpointDiscoveryTest, ARankThatFailedLeavesTheStepIncomplete) {
  ASSERT_TRUE(SaveSample(root_, 100, 2).ok());
  ASSERT_TRUE(WriteRankShard(root_, 200, 0, 2, [](ShardWriter& w) { return WriteSampleRecords(w, 200, 0); }).ok());
  const absl::Status failed = WriteRankShard(root_, 200, 1, 2, [](ShardWriter&) {
                                return absl::UnavailableError("rank 1 ran out of disk");
                              }).status();
  EXPECT_EQ(failed.message(), "rank 1 ran out of disk");
  EXPECT_FALSE(std::filesystem::exists(TempPathFor(StepDirectory(root_, 200) / ShardFileName(1, 2))));
  // No marker is written, so resume takes step 100.
  EXPECT_EQ(Latest().first, 100);
}

TEST_F(CheckpointDiscoveryTest, OpenCommittedShardChecksTheRank) {
  const CommittedCheckpoint checkpoint = SaveSample(root_, 100, 2).value();
  EXPECT_THAT(std::string(OpenCommittedShard(checkpoint, 2).status().message()),
              HasSubstr("rank 2 is outside checkpoint step 100, which has 2 ranks"));
}

}  // namespace
}  // namespace fp8::checkpoint
