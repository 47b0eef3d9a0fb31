// CheckpointRows (worker/engine/train/checkpoint_rows.h): any range of a tensor's rows from
// the shards of any world size, written as FSDP and a single process write them (flat,
// zero-padded row blocks; whole tensors), and clear errors for what does not fit.
#include "worker/engine/train/checkpoint_rows.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/engine/train/train_test_util.h"
#include "worker/engine/checkpoint/commit_marker.h"
#include "worker/engine/checkpoint/layout.h"
#include "worker/engine/checkpoint/save.h"
#include "worker/engine/fsdp/shard_layout.h"

namespace fp8::engine::testing {
namespace {

// Row r of the tensor holds 100 * r + column.
std::vector<float> whole_tensor(int64_t rows, int64_t cols) {
  std::vector<float> v;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) v.push_back(static_cast<float>(100 * r + c));
  }
  return v;
}

const TensorShape kShape = {5, 3};  // 5 rows: uneven over 2, 3 and 4 ranks

// A committed checkpoint of `kShape` as `world` FSDP ranks write it (each its rows, flat,
// padded with zero rows), or as one process writes it (the whole tensor) when `world` is 0.
checkpoint::CommittedCheckpoint write_checkpoint(const std::filesystem::path& root, int world) {
  const std::vector<float> whole = whole_tensor(kShape[0], kShape[1]);
  if (world == 0) {
    absl::StatusOr<checkpoint::CommittedCheckpoint> c =
        checkpoint::save_single_process_checkpoint(root, 7, [&](checkpoint::ShardWriter& w) {
          return w.write_tensor<float>("params/w", whole, kShape);
        });
    EXPECT_TRUE(c.ok()) << c.status();
    return *c;
  }
  const fsdp::ShardLayout layout = fsdp::shard_layout(kShape, world);
  std::vector<checkpoint::ShardInfo> shards;
  for (int r = 0; r < world; ++r) {
    std::vector<float> shard(static_cast<size_t>(layout.shard_elements()), 0.0f);
    const int64_t first = r * layout.rows_per_rank * layout.row_elements;
    for (int64_t i = 0; i < layout.real_rows_of(r) * layout.row_elements; ++i) {
      shard[static_cast<size_t>(i)] = whole[static_cast<size_t>(first + i)];
    }
    absl::StatusOr<checkpoint::ShardInfo> info = checkpoint::write_rank_shard(
        root, 7, r, world, [&](checkpoint::ShardWriter& w) {
          return w.write_tensor<float>("params/w", shard, {layout.shard_elements()});
        });
    EXPECT_TRUE(info.ok()) << info.status();
    shards.push_back(*info);
  }
  EXPECT_TRUE(checkpoint::write_commit_marker(checkpoint::step_directory(root, 7), 7, world, shards).ok());
  absl::StatusOr<checkpoint::CommitMarker> marker =
      checkpoint::read_commit_marker(checkpoint::step_directory(root, 7));
  EXPECT_TRUE(marker.ok()) << marker.status();
  return checkpoint::CommittedCheckpoint{checkpoint::step_directory(root, 7), *marker};
}

class CheckpointRowsTest : public ::testing::TestWithParam<int> {};

TEST_P(CheckpointRowsTest, EveryRangeOfRowsIsTheWholeTensorsRows) {
  TempDir dir("rows");
  const checkpoint::CommittedCheckpoint c = write_checkpoint(dir.path(), GetParam());
  absl::StatusOr<CheckpointRows> rows = CheckpointRows::open(c);
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(rows->world_size(), std::max(GetParam(), 1));
  const std::vector<float> whole = whole_tensor(kShape[0], kShape[1]);
  for (int64_t begin = 0; begin <= kShape[0]; ++begin) {
    for (int64_t end = begin; end <= kShape[0]; ++end) {
      SCOPED_TRACE(absl::StrCat("rows [", begin, ", ", end, ")"));
      absl::StatusOr<std::vector<float>> got = rows->rows("params/w", kShape, begin, end);
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(*got, std::vector<float>(whole.begin() + begin * kShape[1], whole.begin() + end * kShape[1]));
    }
  }
}

TEST_P(CheckpointRowsTest, WhatDoesNotFitIsAnError) {
  TempDir dir("rows");
  const checkpoint::CommittedCheckpoint c = write_checkpoint(dir.path(), GetParam());
  absl::StatusOr<CheckpointRows> rows = CheckpointRows::open(c);
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(rows->rows("params/w", kShape, 3, 6).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(rows->rows("params/w", kShape, 2, 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(rows->rows("params/missing", kShape, 0, 1).status().code(), absl::StatusCode::kNotFound);
  // Rows of another width do not fit the shards' records.
  EXPECT_EQ(rows->rows("params/w", {5, 4}, 0, 1).status().code(), absl::StatusCode::kFailedPrecondition);
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, CheckpointRowsTest, ::testing::Values(0, 1, 2, 3, 4),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return info.param == 0 ? std::string("one_process") : absl::StrCat(info.param, "_ranks");
                         });

}  // namespace
}  // namespace fp8::engine::testing
