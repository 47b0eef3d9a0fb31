// Loading a good record into the caller's buffer checks that it is the record the caller
// expects: the right dtype, the right shape, a buffer of the right size.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/engine/checkpoint/checkpoint_test_util.h"
#include "worker/engine/checkpoint/checkpoint.h"

namespace fp8::checkpoint {
namespace {

using ::fp8::checkpoint::test_util::CheckpointTest;
using ::testing::HasSubstr;

class ShardLoadChecksTest : public CheckpointTest {
 protected:
  void SetUp() override {
    CheckpointTest::SetUp();
    std::filesystem::create_directories(root_);
    path_ = root_ / "rank-00000-of-00001.ckpt";
    absl::StatusOr<ShardWriter> w = ShardWriter::create(path_, {.step = 200, .rank = 0, .world_size = 1});
    ASSERT_TRUE(w.ok()) << w.status();
    ASSERT_TRUE(w->write_tensor<float>("params/x", std::vector<float>(64 * 256, 1.f), {64, 256}).ok());
    ASSERT_TRUE(w->write_bytes("rng/state", "abc").ok());
    ASSERT_TRUE(w->finish().ok());
    absl::StatusOr<ShardReader> reader = ShardReader::open(path_);
    ASSERT_TRUE(reader.ok()) << reader.status();
    reader_.emplace(*std::move(reader));
  }

  std::filesystem::path path_;
  std::optional<ShardReader> reader_;
};

TEST_F(ShardLoadChecksTest, ShapeMismatchNamesBothShapes) {
  std::vector<float> out(64 * 128);
  const absl::Status s = reader_->read_tensor<float>("params/x", std::span(out), {64, 128});
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_EQ(s.message(), path_.string() + ": record 'params/x' has shape [64, 256], expected [64, 128]");
}

TEST_F(ShardLoadChecksTest, DtypeMismatchNamesBothTypes) {
  std::vector<int32_t> out(64 * 256);
  const absl::Status s = reader_->read_tensor<int32_t>("params/x", std::span(out), {64, 256});
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_EQ(s.message(), path_.string() + ": record 'params/x' is f32, expected i32");
  EXPECT_EQ(reader_->read_bytes("params/x").status().message(),
            path_.string() + ": record 'params/x' is f32, expected bytes");
}

TEST_F(ShardLoadChecksTest, WrongBufferSizeIsTheCallersError) {
  std::vector<float> out(10);
  const absl::Status s = reader_->read_tensor<float>("params/x", std::span(out), {64, 256});
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("record 'params/x' (f32 [64, 256]) is 65536 bytes; the buffer "
                                                  "given holds 40"));
}

TEST_F(ShardLoadChecksTest, MissingRecordIsNotFound) {
  std::vector<float> out(4);
  const absl::Status s = reader_->read_tensor<float>("params/y", std::span(out), {4});
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_EQ(s.message(), path_.string() + ": no record 'params/y'");
}

TEST_F(ShardLoadChecksTest, ScalarReadOfATensorIsAShapeMismatch) {
  EXPECT_THAT(std::string(reader_->read_scalar<float>("params/x").status().message()),
              HasSubstr("has shape [64, 256], expected []"));
}

}  // namespace
}  // namespace fp8::checkpoint
