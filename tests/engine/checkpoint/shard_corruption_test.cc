// Damaged shard files are reported, naming the file and the problem, and never read as
// good: flipped bytes anywhere, truncation at any length, a missing footer, extra bytes.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/engine/checkpoint/checkpoint_test_util.h"
#include "worker/engine/checkpoint/byte_codec.h"
#include "worker/engine/checkpoint/checkpoint.h"
#include "worker/engine/checkpoint/crc32c.h"

namespace fp8::checkpoint {
namespace {

using ::fp8::checkpoint::test_util::CheckpointTest;
using ::fp8::checkpoint::test_util::FlipByte;
using ::fp8::checkpoint::test_util::ReadFile;
using ::fp8::checkpoint::test_util::TruncateTo;
using ::fp8::checkpoint::test_util::WriteFile;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::StartsWith;

class ShardCorruptionTest : public CheckpointTest {
 protected:
  void SetUp() override {
    CheckpointTest::SetUp();
    std::filesystem::create_directories(root_);
    path_ = root_ / "rank-00000-of-00001.ckpt";
    absl::StatusOr<ShardWriter> w = ShardWriter::Create(path_, {.step = 200, .rank = 0, .world_size = 1});
    ASSERT_TRUE(w.ok()) << w.status();
    ASSERT_TRUE(w->WriteTensor<float>("params/tok_embeddings", std::vector<float>(16, 0.5f), {4, 4}).ok());
    ASSERT_TRUE(w->WriteScalar<int64_t>("data/position", 7).ok());
    ASSERT_TRUE(w->SetMetadata("job", "corruption").ok());
    ASSERT_TRUE(w->Finish().ok());
    size_ = std::filesystem::file_size(path_);
  }

  // The error from opening the shard and then checking every payload; OK if both pass.
  absl::Status OpenAndVerify() {
    absl::StatusOr<ShardReader> reader = ShardReader::Open(path_);
    if (!reader.ok()) return reader.status();
    return reader->VerifyPayloads();
  }

  std::filesystem::path path_;
  uint64_t size_ = 0;
};

TEST_F(ShardCorruptionTest, FlippedPayloadByteIsAChecksumMismatchOnLoad) {
  FlipByte(path_, kShardHeaderBytes + 5);  // inside params/tok_embeddings
  absl::StatusOr<ShardReader> reader = ShardReader::Open(path_);
  ASSERT_TRUE(reader.ok()) << reader.status();  // the structure is intact...
  std::vector<float> out(16);
  const absl::Status s = reader->ReadTensor<float>("params/tok_embeddings", std::span(out), {4, 4});
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;  // ...but the payload is not handed out as good
  EXPECT_THAT(std::string(s.message()),
              MatchesRegex(path_.string() + ": record 'params/tok_embeddings' checksum mismatch "
                                            "\\(stored 0x[0-9a-f]{8}, computed 0x[0-9a-f]{8}\\)"));
  EXPECT_EQ(reader->VerifyPayloads(), s);
  EXPECT_EQ(reader->ReadScalar<int64_t>("data/position").value(), 7);  // other records still load
}

TEST_F(ShardCorruptionTest, DamagedHeaderIsReported) {
  FlipByte(path_, 2);  // the magic
  EXPECT_THAT(std::string(OpenAndVerify().message()), HasSubstr("not a checkpoint shard (bad magic in header)"));
  FlipByte(path_, 2);
  FlipByte(path_, 9);  // the version
  EXPECT_THAT(std::string(OpenAndVerify().message()), HasSubstr("header checksum mismatch"));
}

TEST_F(ShardCorruptionTest, DamagedIndexIsReported) {
  FlipByte(path_, size_ - kShardFooterBytes - 3);  // last bytes of the index
  const absl::Status s = OpenAndVerify();
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_THAT(std::string(s.message()), StartsWith(path_.string() + ": index checksum mismatch (stored 0x"));
}

TEST_F(ShardCorruptionTest, DamagedFooterIsReported) {
  FlipByte(path_, size_ - kShardFooterBytes + 1);  // the index offset
  EXPECT_THAT(std::string(OpenAndVerify().message()), HasSubstr("footer checksum mismatch"));
}

TEST_F(ShardCorruptionTest, TruncationIsReported) {
  TruncateTo(path_, size_ / 2);
  const absl::Status s = OpenAndVerify();
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_THAT(std::string(s.message()), StartsWith(path_.string() + ": truncated: footer missing"));
}

TEST_F(ShardCorruptionTest, MissingFooterIsReported) {
  TruncateTo(path_, size_ - kShardFooterBytes);
  EXPECT_THAT(std::string(OpenAndVerify().message()), HasSubstr("truncated: footer missing"));
}

TEST_F(ShardCorruptionTest, EmptyOrTinyFileIsReported) {
  TruncateTo(path_, 0);
  EXPECT_THAT(std::string(OpenAndVerify().message()), HasSubstr("truncated: 0 bytes is smaller than an empty shard"));
}

TEST_F(ShardCorruptionTest, ExtraBytesAreReported) {
  // A second copy of the footer appended: the end marker is in place, the sizes are not.
  std::string bytes = ReadFile(path_);
  bytes += bytes.substr(bytes.size() - kShardFooterBytes);
  WriteFile(path_, bytes);
  EXPECT_THAT(std::string(OpenAndVerify().message()), HasSubstr("truncated or padded"));
}

TEST_F(ShardCorruptionTest, NewerFormatVersionIsRefusedNotMisread) {
  std::string bytes = ReadFile(path_);
  std::string header(kShardHeaderMagic);
  AppendU32(header, kShardFormatVersion + 1);
  AppendU32(header, Crc32c(AsBytes(header)));
  bytes.replace(0, kShardHeaderBytes, header);
  WriteFile(path_, bytes);
  const absl::Status s = OpenAndVerify();
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("format version 2; this build reads version 1"));
}

TEST_F(ShardCorruptionTest, MissingFileIsNotFound) {
  std::filesystem::remove(path_);
  const absl::Status s = OpenAndVerify();
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_THAT(std::string(s.message()), StartsWith(path_.string()));
}

// The strongest form of the above: no single damaged byte, and no truncation, goes unseen.
TEST_F(ShardCorruptionTest, EveryFlippedByteIsDetected) {
  const std::string good = ReadFile(path_);
  for (size_t offset = 0; offset < good.size(); ++offset) {
    std::string bad = good;
    bad[offset] = static_cast<char>(bad[offset] ^ 0x01);
    WriteFile(path_, bad);
    EXPECT_FALSE(OpenAndVerify().ok()) << "flipped bit at offset " << offset << " of " << good.size();
  }
}

TEST_F(ShardCorruptionTest, EveryTruncationIsDetected) {
  const std::string good = ReadFile(path_);
  for (size_t length = 0; length < good.size(); ++length) {
    WriteFile(path_, good.substr(0, length));
    EXPECT_FALSE(OpenAndVerify().ok()) << "truncated to " << length << " of " << good.size();
  }
}

}  // namespace
}  // namespace fp8::checkpoint
