// Writing a shard and reading it back: every dtype, shapes from scalar to rank 8, empty
// tensors, metadata, payloads written in pieces, and a large record.
#include <cstring>
#include <limits>
#include <numeric>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/engine/checkpoint/checkpoint_test_util.h"
#include "worker/engine/checkpoint/checkpoint.h"

namespace fp8::checkpoint {
namespace {

using ::fp8::checkpoint::test_util::CheckpointTest;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class ShardRoundTripTest : public CheckpointTest {
 protected:
  void SetUp() override {
    CheckpointTest::SetUp();
    std::filesystem::create_directories(root_);
    path_ = root_ / "shard.ckpt";
  }

  ShardWriter new_writer(ShardIdentity identity = {.step = 7, .rank = 1, .world_size = 2}) {
    absl::StatusOr<ShardWriter> writer = ShardWriter::create(path_, identity);
    EXPECT_TRUE(writer.ok()) << writer.status();
    return *std::move(writer);
  }

  ShardReader open() {
    absl::StatusOr<ShardReader> reader = ShardReader::open(path_);
    EXPECT_TRUE(reader.ok()) << reader.status();
    return *std::move(reader);
  }

  std::filesystem::path path_;
};

template <typename T>
std::vector<T> iota(size_t n, T start) {
  std::vector<T> values(n);
  std::iota(values.begin(), values.end(), start);
  return values;
}

TEST_F(ShardRoundTripTest, EveryDtypeAndShapeComesBackBitExact) {
  const std::vector<float> f32 = {
      1.5f, -0.0f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(), 3e-39f, 65504.f};
  const std::vector<double> f64 = iota<double>(8, -3.25);
  const std::vector<int32_t> i32 = {std::numeric_limits<int32_t>::min(), -1, 0, 1, std::numeric_limits<int32_t>::max()};
  const std::vector<uint8_t> u8 = {0x00, 0x7E, 0x80, 0xFF, 0x38, 0xC8};  // e.g. raw e4m3 bits
  const std::vector<float> rank8 = iota<float>(16, 0.5f);
  const std::string blob("\0rng\xffstate", 10);
  {
    ShardWriter w = new_writer();
    ASSERT_TRUE(w.write_tensor<float>("f32/matrix", f32, {2, 3}).ok());
    ASSERT_TRUE(w.write_tensor<double>("f64/cube", f64, {2, 2, 2}).ok());
    ASSERT_TRUE(w.write_tensor<int32_t>("i32/vector", i32, {5}).ok());
    ASSERT_TRUE(w.write_scalar<int64_t>("i64/scalar", int64_t{1} << 40).ok());
    ASSERT_TRUE(w.write_tensor<uint8_t>("u8/fp8_bits", u8, {3, 2}).ok());
    ASSERT_TRUE(w.write_bytes("bytes/rng", blob).ok());
    ASSERT_TRUE(w.write_tensor<float>("f32/rank8", rank8, {1, 2, 1, 2, 1, 2, 1, 2}).ok());
    ASSERT_TRUE(w.write_tensor<float>("f32/empty", std::span<const float>(), {0, 4}).ok());
    ASSERT_TRUE(w.write_bytes("bytes/empty", std::string_view()).ok());
    ASSERT_TRUE(w.finish().ok());
  }
  ShardReader r = open();

  std::vector<float> f32_back(6);
  ASSERT_TRUE(r.read_tensor<float>("f32/matrix", std::span(f32_back), {2, 3}).ok());
  EXPECT_EQ(std::memcmp(f32_back.data(), f32.data(), f32.size() * sizeof(float)), 0);  // NaN-safe, bit-exact
  std::vector<double> f64_back(8);
  ASSERT_TRUE(r.read_tensor<double>("f64/cube", std::span(f64_back), {2, 2, 2}).ok());
  EXPECT_EQ(f64_back, f64);
  std::vector<int32_t> i32_back(5);
  ASSERT_TRUE(r.read_tensor<int32_t>("i32/vector", std::span(i32_back), {5}).ok());
  EXPECT_EQ(i32_back, i32);
  EXPECT_EQ(r.read_scalar<int64_t>("i64/scalar").value(), int64_t{1} << 40);
  std::vector<uint8_t> u8_back(6);
  ASSERT_TRUE(r.read_tensor<uint8_t>("u8/fp8_bits", std::span(u8_back), {3, 2}).ok());
  EXPECT_EQ(u8_back, u8);
  EXPECT_EQ(r.read_bytes("bytes/rng").value(), blob);
  std::vector<float> rank8_back(16);
  ASSERT_TRUE(r.read_tensor<float>("f32/rank8", std::span(rank8_back), {1, 2, 1, 2, 1, 2, 1, 2}).ok());
  EXPECT_EQ(rank8_back, rank8);
  EXPECT_TRUE(r.read_tensor<float>("f32/empty", std::span<float>(), {0, 4}).ok());
  EXPECT_EQ(r.read_bytes("bytes/empty").value(), "");
  EXPECT_TRUE(r.verify_payloads().ok());

  // The index lists the records in the order written, with their types and shapes.
  std::vector<std::string> names;
  for (const RecordInfo& record : r.records()) names.push_back(record.name);
  EXPECT_THAT(names, ElementsAre("f32/matrix", "f64/cube", "i32/vector", "i64/scalar", "u8/fp8_bits", "bytes/rng",
                                 "f32/rank8", "f32/empty", "bytes/empty"));
  ASSERT_NE(r.find_record("u8/fp8_bits"), nullptr);
  EXPECT_EQ(r.find_record("u8/fp8_bits")->dtype, DType::kU8);
  EXPECT_EQ(r.find_record("u8/fp8_bits")->shape, (Shape{3, 2}));
  EXPECT_EQ(r.find_record("bytes/rng")->shape, (Shape{10}));
  EXPECT_EQ(r.find_record("i64/scalar")->shape, Shape{});
  EXPECT_EQ(r.find_record("nope"), nullptr);
}

TEST_F(ShardRoundTripTest, IdentityAndMetadataComeBack) {
  {
    ShardWriter w = new_writer({.step = 1234, .rank = 3, .world_size = 4});
    ASSERT_TRUE(w.set_metadata("job", "llama-tiny").ok());
    ASSERT_TRUE(w.set_metadata("recipe", "placeholder").ok());
    ASSERT_TRUE(w.set_metadata("recipe", "tensorwise").ok());  // the later value wins
    ASSERT_TRUE(w.finish().ok());
  }
  ShardReader r = open();
  EXPECT_EQ(r.identity(), (ShardIdentity{.step = 1234, .rank = 3, .world_size = 4}));
  EXPECT_EQ(r.metadata(), (std::map<std::string, std::string>{{"job", "llama-tiny"}, {"recipe", "tensorwise"}}));
  EXPECT_TRUE(r.records().empty());
}

TEST_F(ShardRoundTripTest, FinishReportsWhatReadShardInfoReads) {
  ShardWriter w = new_writer();
  ASSERT_TRUE(w.write_tensor<float>("params/w", iota<float>(10, 0.f), {10}).ok());
  absl::StatusOr<ShardInfo> written = w.finish();
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(written->file_name, "shard.ckpt");
  EXPECT_EQ(written->size_bytes, std::filesystem::file_size(path_));
  absl::StatusOr<ShardInfo> read = read_shard_info(path_);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, *written);
}

TEST_F(ShardRoundTripTest, PayloadInPiecesEqualsPayloadInOneGo) {
  const std::vector<float> values = iota<float>(1000, 1.f);
  const auto bytes = std::as_bytes(std::span(values));
  {
    ShardWriter w = new_writer();
    ASSERT_TRUE(w.begin_record("params/w", DType::kF32, {10, 100}).ok());
    for (size_t done = 0; done < bytes.size(); done += 333) {
      ASSERT_TRUE(w.append_payload(bytes.subspan(done, std::min<size_t>(333, bytes.size() - done))).ok());
    }
    ASSERT_TRUE(w.end_record().ok());
    ASSERT_TRUE(w.finish().ok());
  }
  const std::string pieces = test_util::read_file(path_);
  {
    ShardWriter w = new_writer();
    ASSERT_TRUE(w.write_tensor<float>("params/w", values, {10, 100}).ok());
    ASSERT_TRUE(w.finish().ok());
  }
  EXPECT_EQ(test_util::read_file(path_), pieces);
}

// A record of several MB goes to disk in pieces straight from the caller's buffer; the
// reader checks it in pieces too. (Real shards hold hundreds of MB; 8 MB keeps this fast
// while still spanning more than one 8 MiB read piece.)
TEST_F(ShardRoundTripTest, LargeRecordStreams) {
  const size_t n = (size_t{8} << 20) / sizeof(float) + 12345;
  std::vector<float> values(n);
  for (size_t i = 0; i < n; ++i) values[i] = static_cast<float>(i % 65536) * 0.5f;
  {
    ShardWriter w = new_writer();
    ASSERT_TRUE(w.write_tensor<float>("params/tok_embeddings", values, {static_cast<int64_t>(n)}).ok());
    ASSERT_TRUE(w.write_scalar<int64_t>("data/position", 42).ok());
    ASSERT_TRUE(w.finish().ok());
  }
  ShardReader r = open();
  EXPECT_TRUE(r.verify_payloads().ok());
  std::vector<float> back(n);
  ASSERT_TRUE(r.read_tensor<float>("params/tok_embeddings", std::span(back), {static_cast<int64_t>(n)}).ok());
  EXPECT_TRUE(back == values);
  EXPECT_EQ(r.read_scalar<int64_t>("data/position").value(), 42);
}

TEST_F(ShardRoundTripTest, NothingAppearsUnderTheFinalNameBeforeFinish) {
  {
    ShardWriter w = new_writer();
    ASSERT_TRUE(w.write_scalar<int32_t>("x", 1).ok());
    EXPECT_FALSE(std::filesystem::exists(path_));
    EXPECT_TRUE(std::filesystem::exists(temp_path_for(path_)));
    ASSERT_TRUE(w.finish().ok());
    EXPECT_TRUE(std::filesystem::exists(path_));
    EXPECT_FALSE(std::filesystem::exists(temp_path_for(path_)));
  }
  EXPECT_TRUE(std::filesystem::exists(path_));  // destroying a finished writer keeps the file
}

TEST_F(ShardRoundTripTest, AnAbandonedWriterLeavesNothing) {
  {
    ShardWriter w = new_writer();
    ASSERT_TRUE(w.write_scalar<int32_t>("x", 1).ok());
  }
  EXPECT_FALSE(std::filesystem::exists(path_));
  EXPECT_FALSE(std::filesystem::exists(temp_path_for(path_)));
}

TEST_F(ShardRoundTripTest, MisuseIsRejectedAndSticks) {
  ShardWriter w = new_writer();
  ASSERT_TRUE(w.write_scalar<int32_t>("x", 1).ok());
  absl::Status twice = w.write_scalar<int32_t>("x", 2);
  EXPECT_TRUE(absl::IsInvalidArgument(twice)) << twice;
  EXPECT_THAT(twice.message(), HasSubstr("record 'x' written twice"));
  // The first error sticks: the shard can no longer be finished, so it can never be
  // committed without the record the caller meant to write.
  EXPECT_EQ(w.write_scalar<int32_t>("y", 3), twice);
  EXPECT_EQ(w.finish().status(), twice);
  EXPECT_FALSE(std::filesystem::exists(path_));
}

TEST_F(ShardRoundTripTest, BadRecordsAreRejectedWithReasons) {
  const std::vector<float> six(6, 1.f);
  auto error_of = [&](auto write) {
    ShardWriter w = new_writer();
    return std::string(write(w).message());
  };
  EXPECT_THAT(error_of([&](ShardWriter& w) {
                return w.write_tensor<float>("p", six, {2, 2});
              }),
              HasSubstr("record 'p' (f32 [2, 2]) takes 16 bytes; got 24"));
  EXPECT_THAT(error_of([&](ShardWriter& w) {
                return w.write_tensor<float>("p", six, {1, 1, 1, 1, 1, 1, 1, 1, 6});
              }),
              HasSubstr("has 9 dimensions; at most 8"));
  EXPECT_THAT(error_of([&](ShardWriter& w) { return w.write_tensor<float>("p", six, {-6}); }),
              HasSubstr("negative dimension"));
  EXPECT_THAT(error_of([&](ShardWriter& w) { return w.write_tensor<float>("", six, {6}); }),
              HasSubstr("must not be empty"));
  EXPECT_THAT(error_of([&](ShardWriter& w) {
                return w.write_record("b", DType::kBytes, {2, 3}, std::as_bytes(std::span(six)).first(6));
              }),
              HasSubstr("bytes record 'b' needs shape [size]"));
  EXPECT_THAT(error_of([&](ShardWriter& w) {
                (void)w.begin_record("p", DType::kF32, {6});
                (void)w.append_payload(std::as_bytes(std::span(six)).first(8));
                return w.end_record();
              }),
              HasSubstr("takes 24 bytes; got 8"));
  EXPECT_THAT(error_of([&](ShardWriter& w) {
                (void)w.begin_record("p", DType::kF32, {6});
                return w.finish().status();
              }),
              HasSubstr("Finish while record 'p' is still open"));
  EXPECT_FALSE(ShardWriter::create(path_, {.step = 1, .rank = 2, .world_size = 2}).ok());
  EXPECT_FALSE(ShardWriter::create(path_, {.step = -1, .rank = 0, .world_size = 1}).ok());
}

}  // namespace
}  // namespace fp8::checkpoint
