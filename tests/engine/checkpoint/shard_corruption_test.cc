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
using ::fp8::checkpoint::test_util::flip_byte;
using ::fp8::checkpoint::test_util::read_file;
using ::fp8::checkpoint::test_util::truncate_to;
using ::fp8::checkpoint::test_util::write_file;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::StartsWith;

class ShardCorruptionTest : public CheckpointTest {
 protected:
  void SetUp() override {
    CheckpointTest::SetUp();
    std::filesystem::create_directories(root_);
    path_ = root_ / "rank-00000-of-00001.ckpt";
    absl::StatusOr<ShardWriter> w = ShardWriter::create(path_, {.step = 200, .rank = 0, .world_size = 1});
    ASSERT_TRUE(w.ok()) << w.status();
    ASSERT_TRUE(w->write_tensor<float>("params/tok_embeddings", std::vector<float>(16, 0.5f), {4, 4}).ok());
    ASSERT_TRUE(w->write_scalar<int64_t>("data/position", 7).ok());
    ASSERT_TRUE(w->set_metadata("job", "corruption").ok());
    ASSERT_TRUE(w->finish().ok());
    size_ = std::filesystem::file_size(path_);
  }

  // The error from opening the shard and then checking every payload; OK if both pass.
  absl::Status open_and_verify() {
    absl::StatusOr<ShardReader> reader = ShardReader::open(path_);
    if (!reader.ok()) return reader.status();
    return reader->verify_payloads();
  }

  std::filesystem::path path_;
  uint64_t size_ = 0;
};

TEST_F(ShardCorruptionTest, FlippedPayloadByteIsAChecksumMismatchOnLoad) {
  flip_byte(path_, kShardHeaderBytes + 5);  // inside params/tok_embeddings
  absl::StatusOr<ShardReader> reader = ShardReader::open(path_);
  ASSERT_TRUE(reader.ok()) << reader.status();  // the structure is intact...
  std::vector<float> out(16);
  const absl::Status s = reader->read_tensor<float>("params/tok_embeddings", std::span(out), {4, 4});
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;  // ...but the payload is not handed out as good
  EXPECT_THAT(std::string(s.message()),
              MatchesRegex(path_.string() + ": record 'params/tok_embeddings' checksum mismatch "
                                            "\\(stored 0x[0-9a-f]{8}, computed 0x[0-9a-f]{8}\\)"));
  EXPECT_EQ(reader->verify_payloads(), s);
  EXPECT_EQ(reader->read_scalar<int64_t>("data/position").value(), 7);  // other records still load
}

TEST_F(ShardCorruptionTest, DamagedHeaderIsReported) {
  flip_byte(path_, 2);  // the magic
  EXPECT_THAT(std::string(open_and_verify().message()), HasSubstr("not a checkpoint shard (bad magic in header)"));
  flip_byte(path_, 2);
  flip_byte(path_, 9);  // the version
  EXPECT_THAT(std::string(open_and_verify().message()), HasSubstr("header checksum mismatch"));
}

TEST_F(ShardCorruptionTest, DamagedIndexIsReported) {
  flip_byte(path_, size_ - kShardFooterBytes - 3);  // last bytes of the index
  const absl::Status s = open_and_verify();
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_THAT(std::string(s.message()), StartsWith(path_.string() + ": index checksum mismatch (stored 0x"));
}

TEST_F(ShardCorruptionTest, DamagedFooterIsReported) {
  flip_byte(path_, size_ - kShardFooterBytes + 1);  // the index offset
  EXPECT_THAT(std::string(open_and_verify().message()), HasSubstr("footer checksum mismatch"));
}

TEST_F(ShardCorruptionTest, TruncationIsReported) {
  truncate_to(path_, size_ / 2);
  const absl::Status s = open_and_verify();
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_THAT(std::string(s.message()), StartsWith(path_.string() + ": truncated: footer missing"));
}

TEST_F(ShardCorruptionTest, MissingFooterIsReported) {
  truncate_to(path_, size_ - kShardFooterBytes);
  EXPECT_THAT(std::string(open_and_verify().message()), HasSubstr("truncated: footer missing"));
}

TEST_F(ShardCorruptionTest, EmptyOrTinyFileIsReported) {
  truncate_to(path_, 0);
  EXPECT_THAT(std::string(open_and_verify().message()), HasSubstr("truncated: 0 bytes is smaller than an empty shard"));
}

TEST_F(ShardCorruptionTest, ExtraBytesAreReported) {
  // A second copy of the footer appended: the end marker is in place, the sizes are not.
  std::string bytes = read_file(path_);
  bytes += bytes.substr(bytes.size() - kShardFooterBytes);
  write_file(path_, bytes);
  EXPECT_THAT(std::string(open_and_verify().message()), HasSubstr("truncated or padded"));
}

TEST_F(ShardCorruptionTest, NewerFormatVersionIsRefusedNotMisread) {
  std::string bytes = read_file(path_);
  std::string header(kShardHeaderMagic);
  append_u32(header, kShardFormatVersion + 1);
  append_u32(header, crc32c(as_bytes(header)));
  bytes.replace(0, kShardHeaderBytes, header);
  write_file(path_, bytes);
  const absl::Status s = open_and_verify();
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("format version 2; this build reads version 1"));
}

TEST_F(ShardCorruptionTest, MissingFileIsNotFound) {
  std::filesystem::remove(path_);
  const absl::Status s = open_and_verify();
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_THAT(std::string(s.message()), StartsWith(path_.string()));
}

// The strongest form of the above: no single damaged byte, and no truncation, goes unseen.
TEST_F(ShardCorruptionTest, EveryFlippedByteIsDetected) {
  const std::string good = read_file(path_);
  for (size_t offset = 0; offset < good.size(); ++offset) {
    std::string bad = good;
    bad[offset] = static_cast<char>(bad[offset] ^ 0x01);
    write_file(path_, bad);
    EXPECT_FALSE(open_and_verify().ok()) << "flipped bit at offset " << offset << " of " << good.size();
  }
}

TEST_F(ShardCorruptionTest, EveryTruncationIsDetected) {
  const std::string good = read_file(path_);
  for (size_t length = 0; length < good.size(); ++length) {
    write_file(path_, good.substr(0, length));
    EXPECT_FALSE(open_and_verify().ok()) << "truncated to " << length << " of " << good.size();
  }
}

}  // namespace
}  // namespace fp8::checkpoint
