// How FSDP splits a parameter along dimension 0 (worker/engine/fsdp/shard_layout.h):
// ceil(rows / world) rows per rank, the last ranks padded (some of them entirely), and the
// padded shape a gather produces.
#include "worker/engine/fsdp/shard_layout.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace fp8::engine::fsdp {
namespace {

std::vector<int64_t> real_rows_per_rank(const ShardLayout& l) {
  std::vector<int64_t> out;
  for (int r = 0; r < l.world_size; ++r) out.push_back(l.real_rows_of(r));
  return out;
}

TEST(ShardLayout, RowsThatDivideEvenlyNeedNoPadding) {
  const ShardLayout l = shard_layout({8, 4}, 4);
  EXPECT_EQ(l.rows, 8);
  EXPECT_EQ(l.row_elements, 4);
  EXPECT_EQ(l.rows_per_rank, 2);
  EXPECT_EQ(l.world_size, 4);
  EXPECT_EQ(l.shard_elements(), 8);
  EXPECT_EQ(l.padded_rows(), 8);
  EXPECT_EQ(l.padded_elements(), 32);
  EXPECT_EQ(real_rows_per_rank(l), (std::vector<int64_t>{2, 2, 2, 2}));
  EXPECT_EQ(padded_shape({8, 4}, l), (TensorShape{8, 4}));
}

TEST(ShardLayout, RowsThatDoNotDivideArePaddedAtTheEnd) {
  const ShardLayout l = shard_layout({10, 3}, 4);
  EXPECT_EQ(l.rows, 10);
  EXPECT_EQ(l.row_elements, 3);
  EXPECT_EQ(l.rows_per_rank, 3);
  EXPECT_EQ(l.shard_elements(), 9);
  EXPECT_EQ(l.padded_rows(), 12);
  EXPECT_EQ(l.padded_elements(), 36);
  EXPECT_EQ(real_rows_per_rank(l), (std::vector<int64_t>{3, 3, 3, 1}));
  EXPECT_EQ(padded_shape({10, 3}, l), (TensorShape{12, 3}));
}

TEST(ShardLayout, RanksPastTheLastRowHoldOnlyPadding) {
  // 3 rows over 4 ranks: one row each for ranks 0-2, rank 3 all padding.
  const ShardLayout three = shard_layout({3, 5}, 4);
  EXPECT_EQ(three.rows_per_rank, 1);
  EXPECT_EQ(three.shard_elements(), 5);
  EXPECT_EQ(three.padded_rows(), 4);
  EXPECT_EQ(real_rows_per_rank(three), (std::vector<int64_t>{1, 1, 1, 0}));
  EXPECT_EQ(padded_shape({3, 5}, three), (TensorShape{4, 5}));

  // 2 rows over 4 ranks: two fully padded ranks.
  const ShardLayout two = shard_layout({2, 5}, 4);
  EXPECT_EQ(real_rows_per_rank(two), (std::vector<int64_t>{1, 1, 0, 0}));

  // 9 rows over 4 ranks: 3 per rank, so rank 3 starts at row 9, past the end.
  const ShardLayout nine = shard_layout({9, 2}, 4);
  EXPECT_EQ(nine.rows_per_rank, 3);
  EXPECT_EQ(nine.padded_rows(), 12);
  EXPECT_EQ(real_rows_per_rank(nine), (std::vector<int64_t>{3, 3, 3, 0}));

  // More ranks than rows by far.
  const ShardLayout one = shard_layout({1, 7}, 8);
  EXPECT_EQ(one.rows_per_rank, 1);
  EXPECT_EQ(one.padded_rows(), 8);
  EXPECT_EQ(real_rows_per_rank(one), (std::vector<int64_t>{1, 0, 0, 0, 0, 0, 0, 0}));
}

TEST(ShardLayout, AVectorIsShardedByElements) {
  const ShardLayout l = shard_layout({7}, 2);
  EXPECT_EQ(l.rows, 7);
  EXPECT_EQ(l.row_elements, 1);
  EXPECT_EQ(l.rows_per_rank, 4);
  EXPECT_EQ(l.shard_elements(), 4);
  EXPECT_EQ(l.padded_elements(), 8);
  EXPECT_EQ(real_rows_per_rank(l), (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(padded_shape({7}, l), (TensorShape{8}));

  const ShardLayout even = shard_layout({6}, 3);
  EXPECT_EQ(even.shard_elements(), 2);
  EXPECT_EQ(padded_shape({6}, even), (TensorShape{6}));
}

TEST(ShardLayout, TrailingDimensionsMakeOneRow) {
  const ShardLayout l = shard_layout({5, 2, 3}, 2);
  EXPECT_EQ(l.row_elements, 6);
  EXPECT_EQ(l.rows_per_rank, 3);
  EXPECT_EQ(l.shard_elements(), 18);
  EXPECT_EQ(l.padded_elements(), 36);
  EXPECT_EQ(real_rows_per_rank(l), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(padded_shape({5, 2, 3}, l), (TensorShape{6, 2, 3}));
}

TEST(ShardLayout, OneRankHoldsEverythingUnpadded) {
  for (const TensorShape& shape : {TensorShape{5, 6}, TensorShape{7}, TensorShape{1, 1}, TensorShape{3, 4, 5}}) {
    const ShardLayout l = shard_layout(shape, 1);
    EXPECT_EQ(l.world_size, 1);
    EXPECT_EQ(l.rows_per_rank, shape[0]);
    EXPECT_EQ(l.real_rows_of(0), shape[0]);
    EXPECT_EQ(l.padded_rows(), shape[0]);
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    EXPECT_EQ(l.shard_elements(), numel);
    EXPECT_EQ(l.padded_elements(), numel);
    EXPECT_EQ(padded_shape(shape, l), shape);
  }
}

TEST(ShardLayout, EmptyParameterHasEmptyShards) {
  const ShardLayout l = shard_layout({0, 4}, 3);
  EXPECT_EQ(l.rows_per_rank, 0);
  EXPECT_EQ(l.shard_elements(), 0);
  EXPECT_EQ(l.padded_elements(), 0);
  EXPECT_EQ(real_rows_per_rank(l), (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(padded_shape({0, 4}, l), (TensorShape{0, 4}));
}

TEST(ShardLayout, AScalarIsOneRow) {
  const ShardLayout l = shard_layout({}, 2);
  EXPECT_EQ(l.rows, 1);
  EXPECT_EQ(l.row_elements, 1);
  EXPECT_EQ(l.rows_per_rank, 1);
  EXPECT_EQ(real_rows_per_rank(l), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(padded_shape({}, l), (TensorShape{2}));
}

// Every shape up to 40 rows on every world size up to 9: the shards are equal, cover the
// padded tensor exactly, and rank r's real rows are the real rows in its range.
TEST(ShardLayout, ShardsPartitionThePaddedRowsForAnyWorldSize) {
  for (int64_t rows = 0; rows <= 40; ++rows) {
    for (int world = 1; world <= 9; ++world) {
      SCOPED_TRACE(::testing::Message() << rows << " rows over " << world << " ranks");
      const ShardLayout l = shard_layout({rows, 3}, world);
      EXPECT_EQ(l.rows_per_rank, (rows + world - 1) / world);
      EXPECT_GE(l.padded_rows(), rows);
      EXPECT_LT(l.padded_rows() - rows, world) << "more than one row of padding per rank";
      EXPECT_EQ(l.padded_rows() % world, 0);
      EXPECT_EQ(l.padded_elements(), l.shard_elements() * world);
      int64_t total = 0;
      bool seen_padding_only = false;
      for (int r = 0; r < world; ++r) {
        const int64_t begin = r * l.rows_per_rank;
        const int64_t want = std::clamp<int64_t>(rows - begin, 0, l.rows_per_rank);
        EXPECT_EQ(l.real_rows_of(r), want) << "rank " << r;
        total += l.real_rows_of(r);
        // Real rows come first: once a rank is short, every later rank is empty.
        if (seen_padding_only) {
          EXPECT_EQ(l.real_rows_of(r), 0) << "rank " << r;
        }
        if (l.real_rows_of(r) < l.rows_per_rank) seen_padding_only = true;
      }
      EXPECT_EQ(total, rows);
      EXPECT_EQ(padded_shape({rows, 3}, l), (TensorShape{l.padded_rows(), 3}));
    }
  }
}

}  // namespace
}  // namespace fp8::engine::fsdp
