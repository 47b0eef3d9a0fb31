#include "worker/engine/checkpoint/commit_marker.h"

#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/engine/checkpoint/checkpoint_test_util.h"
#include "worker/engine/checkpoint/byte_codec.h"
#include "worker/engine/checkpoint/crc32c.h"
#include "worker/engine/checkpoint/layout.h"

namespace fp8::checkpoint {
namespace {

using ::fp8::checkpoint::test_util::CheckpointTest;
using ::fp8::checkpoint::test_util::read_file;
using ::fp8::checkpoint::test_util::write_file;
using ::testing::HasSubstr;

CommitMarker two_rank_marker() {
  return CommitMarker{
      .step = 200,
      .world_size = 2,
      .shards = {{.file_name = "rank-00000-of-00002.ckpt", .size_bytes = 1048712, .checksum = 0x1c2d3e4f},
                 {.file_name = "rank-00001-of-00002.ckpt", .size_bytes = 1048700, .checksum = 0x5a6b7c8d}}};
}

TEST(CommitMarkerTextTest, IsReadableTextEndingInItsChecksum) {
  const std::string text = encode_commit_marker(two_rank_marker());
  const std::string body =
      "fp8-checkpoint-commit 1\n"
      "step 200\n"
      "world_size 2\n"
      "shard rank-00000-of-00002.ckpt 1048712 0x1c2d3e4f\n"
      "shard rank-00001-of-00002.ckpt 1048700 0x5a6b7c8d\n";
  ASSERT_EQ(text.substr(0, body.size()), body);
  EXPECT_THAT(text.substr(body.size()), ::testing::MatchesRegex("crc32c 0x[0-9a-f]{8}\n"));
  absl::StatusOr<CommitMarker> parsed = parse_commit_marker(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed, two_rank_marker());
}

TEST(CommitMarkerTextTest, AnyChangedOrMissingCharacterIsDamage) {
  const std::string good = encode_commit_marker(two_rank_marker());
  for (size_t i = 0; i < good.size(); ++i) {
    std::string changed = good;
    changed[i] = changed[i] == '7' ? '8' : '7';
    EXPECT_FALSE(parse_commit_marker(changed).ok()) << "changed character " << i;
    EXPECT_FALSE(parse_commit_marker(good.substr(0, i)).ok()) << "cut to " << i;
  }
  std::string flipped = good;
  flipped[good.find("1048712")] = '2';
  const absl::Status s = parse_commit_marker(flipped).status();
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("commit marker damaged: checksum mismatch"));
}

TEST(CommitMarkerTextTest, NewerVersionIsRefused) {
  std::string body = "fp8-checkpoint-commit 2\nstep 1\nworld_size 1\nshard rank-00000-of-00001.ckpt 1 0x00000000\n";
  body += absl::StrFormat("crc32c 0x%08x\n", crc32c(as_bytes(body)));
  const absl::Status s = parse_commit_marker(body).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("commit marker version 2; this build reads version 1"));
}

TEST(CommitMarkerCheckTest, NeedsOneCanonicallyNamedShardPerRank) {
  CommitMarker marker = two_rank_marker();
  marker.shards.pop_back();
  EXPECT_THAT(std::string(check_commit_marker(marker).message()), HasSubstr("1 shards for world size 2"));
  marker = two_rank_marker();
  marker.shards[1].file_name = "rank-00001-of-00003.ckpt";
  EXPECT_THAT(std::string(check_commit_marker(marker).message()),
              HasSubstr("shard 1 is 'rank-00001-of-00003.ckpt', expected 'rank-00001-of-00002.ckpt'"));
}

class CommitMarkerFileTest : public CheckpointTest {};

TEST_F(CommitMarkerFileTest, WritesShardsInRankOrderWhateverOrderTheyArriveIn) {
  const std::filesystem::path dir = prepare_step_directory(root_, 200).value();
  std::vector<ShardInfo> arrived = two_rank_marker().shards;
  std::swap(arrived[0], arrived[1]);
  ASSERT_TRUE(write_commit_marker(dir, 200, 2, arrived).ok());
  EXPECT_FALSE(std::filesystem::exists(dir / "COMMITTED.tmp"));
  absl::StatusOr<CommitMarker> read = read_commit_marker(dir);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, two_rank_marker());
}

TEST_F(CommitMarkerFileTest, RefusesToCommitTheWrongThing) {
  const std::filesystem::path dir = prepare_step_directory(root_, 200).value();
  const std::vector<ShardInfo> shards = two_rank_marker().shards;
  EXPECT_THAT(std::string(write_commit_marker(dir, 200, 3, shards).message()), HasSubstr("2 shards for world size 3"));
  EXPECT_THAT(std::string(write_commit_marker(dir, 300, 2, shards).message()),
              HasSubstr("not the directory of step 300"));
  EXPECT_FALSE(std::filesystem::exists(dir / kCommitMarkerFileName));
}

TEST_F(CommitMarkerFileTest, MissingMarkerIsNotFound) {
  const std::filesystem::path dir = prepare_step_directory(root_, 200).value();
  EXPECT_TRUE(absl::IsNotFound(read_commit_marker(dir).status()));
}

TEST_F(CommitMarkerFileTest, MarkerInTheWrongDirectoryIsDamage) {
  const std::filesystem::path dir200 = prepare_step_directory(root_, 200).value();
  const std::filesystem::path dir300 = prepare_step_directory(root_, 300).value();
  ASSERT_TRUE(write_commit_marker(dir200, 200, 2, two_rank_marker().shards).ok());
  write_file(dir300 / kCommitMarkerFileName, read_file(dir200 / kCommitMarkerFileName));
  const absl::Status s = read_commit_marker(dir300).status();
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("says step 200 but lies in the directory of step 300"));
}

TEST_F(CommitMarkerFileTest, PreparingAStepAgainWithdrawsItsOldMarker) {
  const std::filesystem::path dir = prepare_step_directory(root_, 200).value();
  ASSERT_TRUE(write_commit_marker(dir, 200, 2, two_rank_marker().shards).ok());
  ASSERT_TRUE(prepare_step_directory(root_, 200).ok());
  EXPECT_TRUE(absl::IsNotFound(read_commit_marker(dir).status()));
}

TEST(CheckpointLayoutTest, NamesAreCanonicalAndParseBack) {
  EXPECT_EQ(step_directory_name(200), "step-00000200");
  EXPECT_EQ(step_directory_name(1234567890), "step-1234567890");
  EXPECT_EQ(shard_file_name(1, 16), "rank-00001-of-00016.ckpt");
  EXPECT_EQ(parse_step_directory_name("step-00000200"), 200);
  EXPECT_EQ(parse_step_directory_name("step-1234567890"), 1234567890);
  for (const char* other : {"step-200", "step-000000200", "step-", "step-0000020x", "step--0000200", "steps-00000200",
                            "step-00000200.tmp", "notes.txt"}) {
    EXPECT_EQ(parse_step_directory_name(other), std::nullopt) << other;
  }
}

}  // namespace
}  // namespace fp8::checkpoint
