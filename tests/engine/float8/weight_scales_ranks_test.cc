// Fp8WeightScales across real ranks (forked processes, Gloo over loopback), for every
// recipe whose weight a layer takes as an Fp8Weight: each rank holds a shard of every
// weight, and the scales it binds are, on every rank, those of the whole weight at the
// recipe's granularity (tensor, row, column, 128x128 block); the codes all-gathered from the
// ranks' cast shards are, bit for bit, the whole weight cast by one process with them, for
// the output GEMM and (transposed) for the grad_input GEMM. The blockwise weights' shards
// are 128 rows and 192 rows a rank, so one block straddles two ranks. Below: the parts of a
// weight split by tensor parallelism, placed in the whole.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fp8/fp8.h"
#include "gtest/gtest.h"
#include "tests/engine/collectives/multi_process.h"
#include "tests/engine/collectives/rank_checks.h"
#include "tests/engine/collectives/scratch_dir.h"
#include "tests/kernels/backend_test_util.h"
#include "worker/engine/float8/config.h"
#include "worker/engine/float8/linear.h"
#include "worker/engine/float8/weight_scales.h"

namespace fp8::engine {
namespace {

using collectives::test::RankChecks;
using collectives::test::RankReport;

constexpr int kWorld = 2;

struct Shape {
  int64_t rows, cols;
};
// An odd row count leaves the last rank a padding row of zeros; block casts need multiples
// of 128.
std::vector<Shape> shapes_for(v1::Fp8Spec::Recipe recipe) {
  if (recipe == v1::Fp8Spec::BLOCKWISE) return {{256, 128}, {384, 256}};
  return {{7, 16}, {10, 32}};
}

Backend& backend() { return cpu_backend(); }

// Host values in fresh backend memory; the caller deallocates.
template <class T>
T* upload(const std::vector<T>& host) {
  absl::StatusOr<void*> p = backend().allocate(host.size() * sizeof(T));
  if (!p.ok()) return nullptr;
  if (!backend().copy_from_host(*p, host.data(), host.size() * sizeof(T)).ok()) return nullptr;
  return static_cast<T*>(*p);
}

template <class T>
std::vector<T> download(const T* at, size_t n) {
  std::vector<T> host(n);
  if (!backend().copy_to_host(host.data(), at, n * sizeof(T)).ok()) host.clear();
  return host;
}

// Weight w's values, the same on every rank.
std::vector<float> whole_weight(int w, const Shape& shape) {
  std::mt19937 rng(static_cast<uint32_t>(11 + w));
  std::normal_distribution<float> dist(0.0f, w == 0 ? 0.3f : 25.0f);
  std::vector<float> v(static_cast<size_t>(shape.rows * shape.cols));
  for (float& x : v) x = dist(rng);
  return v;
}

uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

using fp8::testing::transposed;

// One process's cast of a whole [rows, cols] matrix (values on the host) at `cast`'s
// granularity: codes [rows, cols] and the scales.
struct Cast {
  std::vector<uint8_t> codes;
  std::vector<float> scales;
};
absl::StatusOr<Cast> quantize_whole(const std::vector<float>& values, int64_t rows, int64_t cols,
                                    const Fp8WeightCast& cast) {
  float* in = upload(values);
  const int64_t scales = scale_count(cast.granularity, rows, cols);
  float* scale = upload(std::vector<float>(static_cast<size_t>(scales)));
  uint8_t* codes = upload(std::vector<uint8_t>(values.size()));
  QuantizeArgs q;
  q.input = {in, DType::kFloat32, rows, cols};
  q.format = cast.format;
  q.granularity = cast.granularity;
  q.pow2_scale = cast.pow2_scale;
  q.scale_out = scale;
  // A column-scaled cast is made transposed, as the layer makes it.
  (cast.granularity == Granularity::kColumnwise ? q.out_t : q.out) = codes;
  absl::Status st = backend().quantize(q);
  Cast out{download(codes, values.size()), download(scale, static_cast<size_t>(scales))};
  if (cast.granularity == Granularity::kColumnwise) out.codes = transposed(out.codes, cols, rows);
  for (void* p : {static_cast<void*>(in), static_cast<void*>(scale), static_cast<void*>(codes)}) {
    backend().deallocate(p);
  }
  if (!st.ok()) return st;
  return out;
}

std::string scale_bits(const std::vector<float>& scales) {
  std::string s;
  for (float f : scales) absl::StrAppend(&s, bits(f), ",");
  return s;
}

// One rank: its shards' scales and the gathered codes against one process's casts of the
// whole weights. Returns the scales' bits, for the parent to compare across ranks.
RankReport check_rank(int rank, v1::Fp8Spec::Recipe recipe, const std::string& store_dir) {
  RankChecks c;
  absl::StatusOr<std::unique_ptr<collectives::ProcessGroup>> group =
      collectives::test::join_group(store_dir, rank, kWorld, absl::Seconds(20));
  if (!c.expect_ok(group.status(), "join")) return {c.text(), ""};
  absl::StatusOr<Float8LinearConfig> config = recipe_config(recipe, 4);
  if (!c.expect_ok(config.status(), "config")) return {c.text(), ""};

  const std::vector<Shape> shapes = shapes_for(recipe);
  std::vector<std::unique_ptr<Float8Linear>> layers;
  std::vector<Fp8WeightScales::Shard> shards;
  std::vector<float*> shard_values;
  for (size_t w = 0; w < shapes.size(); ++w) {
    const int64_t rows = shapes[w].rows, cols = shapes[w].cols, shard_rows = (rows + kWorld - 1) / kWorld;
    absl::StatusOr<std::unique_ptr<Float8Linear>> layer = Float8Linear::create(backend(), cols, rows, *config);
    if (!c.expect_ok(layer.status(), "layer")) return {c.text(), ""};
    layers.push_back(std::move(*layer));
    const std::vector<float> whole = whole_weight(static_cast<int>(w), shapes[w]);
    std::vector<float> shard(static_cast<size_t>(shard_rows * cols), 0.0f);
    for (int64_t r = 0; r < shard_rows && rank * shard_rows + r < rows; ++r) {
      std::memcpy(&shard[static_cast<size_t>(r * cols)], &whole[static_cast<size_t>((rank * shard_rows + r) * cols)],
                  static_cast<size_t>(cols) * sizeof(float));
    }
    shard_values.push_back(upload(shard));
    shards.push_back({layers.back().get(), shard_rows, cols, rank * shard_rows, shard_rows * kWorld});
  }
  absl::StatusOr<std::unique_ptr<Fp8WeightScales>> scales = Fp8WeightScales::create(backend(), shards);
  if (!c.expect_ok(scales.status(), "create")) return {c.text(), ""};
  collectives::ProcessGroup& pg = **group;
  const std::vector<const float*> values(shard_values.begin(), shard_values.end());
  c.expect_ok((*scales)->refresh(values, /*row_amaxes_current=*/false,
                                 [&pg](float* v, int64_t n) { return pg.all_reduce(v, n, collectives::ReduceOp::kMax); }),
              "refresh");

  std::string output;
  for (size_t w = 0; w < shapes.size(); ++w) {
    const int64_t rows = shapes[w].rows, cols = shapes[w].cols, shard_rows = shards[w].rows;
    const Float8LinearNeeds& needs = layers[w]->info().needs;
    const Fp8Weight bound = (*scales)->bind(static_cast<int64_t>(w));
    const std::vector<float> whole = whole_weight(static_cast<int>(w), shapes[w]);
    // The ranks' cast shards, gathered, the last rank's padding rows off.
    const auto shard_bytes = static_cast<size_t>(shard_rows * cols);
    const bool own = (*scales)->has_grad_input_codes(static_cast<int64_t>(w));
    c.expect(own == !needs.weight_codes_shared, "grad_input codes of their own where the layer's casts differ");
    uint8_t* codes = upload(std::vector<uint8_t>(shard_bytes));
    uint8_t* codes_gi = upload(std::vector<uint8_t>(shard_bytes));
    uint8_t* gathered = upload(std::vector<uint8_t>(shard_bytes * kWorld));
    c.expect_ok((*scales)->cast_shard(static_cast<int64_t>(w), shard_values[w], codes, codes_gi), "cast shard");
    auto gather = [&](uint8_t* from) {
      c.expect_ok(pg.all_gather(from, gathered, shard_bytes), "all_gather");
      std::vector<uint8_t> got = download(gathered, shard_bytes * kWorld);
      got.resize(static_cast<size_t>(rows * cols));
      return got;
    };
    const std::vector<uint8_t> output_codes = gather(codes);
    const std::vector<uint8_t> gi_codes = own ? gather(codes_gi) : output_codes;

    // The output GEMM's cast of the whole weight, as the layer would make it.
    absl::StatusOr<Cast> want = quantize_whole(whole, rows, cols, needs.weight_output);
    if (!c.expect_ok(want.status(), "whole cast")) break;
    const std::vector<float> got_scales = download(bound.output.scale, want->scales.size());
    c.expect(scale_bits(got_scales) == scale_bits(want->scales),
             absl::StrCat("weight ", w, ": the output scales are not the whole weight's"));
    c.expect(output_codes == want->codes, absl::StrCat("weight ", w, ": the gathered codes are not the whole cast"));
    // The grad_input GEMM's: of the transpose, for blocks (the block grid transposed).
    const bool block = needs.weight_grad_input.granularity == Granularity::kBlock128x128;
    absl::StatusOr<Cast> want_gi = block ? quantize_whole(transposed(whole, rows, cols), cols, rows,
                                                          needs.weight_grad_input)
                                         : quantize_whole(whole, rows, cols, needs.weight_grad_input);
    if (!c.expect_ok(want_gi.status(), "whole grad_input cast")) break;
    const std::vector<float> got_gi_scales = download(bound.grad_input.scale, want_gi->scales.size());
    c.expect(scale_bits(got_gi_scales) == scale_bits(want_gi->scales),
             absl::StrCat("weight ", w, ": the grad_input scales are not the whole weight's"));
    c.expect((block ? transposed(gi_codes, rows, cols) : gi_codes) == want_gi->codes,
             absl::StrCat("weight ", w, ": the gathered grad_input codes are not the whole cast"));
    absl::StrAppend(&output, w, ":", scale_bits(got_scales), "|", scale_bits(got_gi_scales), " ");
    for (void* p : {static_cast<void*>(codes), static_cast<void*>(codes_gi), static_cast<void*>(gathered)}) {
      backend().deallocate(p);
    }
  }
  for (float* p : shard_values) backend().deallocate(p);
  return {c.text(), output};
}

class WeightScalesRanksTest : public ::testing::TestWithParam<v1::Fp8Spec::Recipe> {};

TEST_P(WeightScalesRanksTest, EveryRankCastsItsShardWithTheWholeWeightsScale) {
  collectives::test::ScratchDir scratch;
  ASSERT_TRUE(scratch.ok());
  const std::string store_dir = (scratch.path() / "rdzv").string();
  const std::vector<collectives::test::RankOutcome> outcomes = collectives::test::run_ranks(
      kWorld, [&](int rank) { return check_rank(rank, GetParam(), store_dir); }, scratch.path().string());
  ASSERT_EQ(outcomes.size(), static_cast<size_t>(kWorld));
  for (const auto& o : outcomes) EXPECT_EQ(o.problems(), "") << "rank " << o.rank;
  EXPECT_FALSE(outcomes[0].report.output.empty());
  EXPECT_EQ(outcomes[1].report.output, outcomes[0].report.output) << "the ranks' scales differ";
}

INSTANTIATE_TEST_SUITE_P(Recipes, WeightScalesRanksTest,
                         ::testing::Values(v1::Fp8Spec::TENSORWISE, v1::Fp8Spec::DELAYED, v1::Fp8Spec::ROWWISE,
                                           v1::Fp8Spec::ROWWISE_WITH_GW_HP, v1::Fp8Spec::BLOCKWISE),
                         [](const ::testing::TestParamInfo<v1::Fp8Spec::Recipe>& info) {
                           return v1::Fp8Spec::Recipe_Name(info.param);
                         });

// Tensor parallelism beside FSDP: a layer computes with a part of a weight split across
// ranks, by rows (column-parallel) or by columns (row-parallel), and its scales must be the
// whole weight's. Each part is placed in the whole (Fp8WeightScales::Shard's first_row,
// part_first_row, first_col), and MAX over the parts' amaxes gives every part the whole
// weight's: bind() then hands each part its rows' or columns' scales, and cast_shard() the
// codes one process casts for those rows or columns. The two parts live in one process
// here; the MAX is taken by hand across their buffers.
class PlacedPartsTest : public ::testing::TestWithParam<v1::Fp8Spec::Recipe> {};

TEST_P(PlacedPartsTest, EachPartTakesTheWholeWeightsScales) {
  absl::StatusOr<Float8LinearConfig> config = recipe_config(GetParam(), 4);
  ASSERT_TRUE(config.ok()) << config.status();
  constexpr int64_t kRows = 32, kCols = 48;
  constexpr int kParts = 2;
  const std::vector<float> whole = whole_weight(1, {kRows, kCols});
  for (int axis : {0, 1}) {
    SCOPED_TRACE(axis == 0 ? "split by rows" : "split by columns");
    const int64_t rows = axis == 0 ? kRows / kParts : kRows, cols = axis == 1 ? kCols / kParts : kCols;
    std::vector<std::unique_ptr<Float8Linear>> layers;
    std::vector<std::unique_ptr<Fp8WeightScales>> scales;
    std::vector<float*> values;
    for (int t = 0; t < kParts; ++t) {
      absl::StatusOr<std::unique_ptr<Float8Linear>> layer = Float8Linear::create(backend(), cols, rows, *config);
      ASSERT_TRUE(layer.ok()) << layer.status();
      layers.push_back(std::move(*layer));
      std::vector<float> part(static_cast<size_t>(rows * cols));
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t k = 0; k < cols; ++k) {
          const int64_t wr = axis == 0 ? t * rows + r : r, wc = axis == 1 ? t * cols + k : k;
          part[static_cast<size_t>(r * cols + k)] = whole[static_cast<size_t>(wr * kCols + wc)];
        }
      }
      values.push_back(upload(part));
      Fp8WeightScales::Shard shard{layers.back().get(), rows, cols};
      if (axis == 0) {
        shard.first_row = shard.part_first_row = t * rows;
        shard.padded_rows = kRows;
      } else {
        shard.first_col = t * cols;
        shard.padded_cols = kCols;
      }
      absl::StatusOr<std::unique_ptr<Fp8WeightScales>> made = Fp8WeightScales::create(backend(), {shard});
      ASSERT_TRUE(made.ok()) << made.status();
      scales.push_back(std::move(*made));
    }
    // Part 0's amaxes as measured, then part 1's MAX with them, then part 0's with those.
    // (The CPU backend's memory is the host's.)
    std::vector<float> other;
    auto keep = [&](float* v, int64_t n) {
      other.assign(v, v + n);
      return absl::OkStatus();
    };
    auto max_with_other = [&](float* v, int64_t n) {
      for (int64_t i = 0; i < n; ++i) v[i] = std::max(other[static_cast<size_t>(i)], v[i]);
      return keep(v, n);
    };
    ASSERT_TRUE(scales[0]->refresh({values[0]}, false, keep).ok());
    ASSERT_TRUE(scales[1]->refresh({values[1]}, false, max_with_other).ok());
    ASSERT_TRUE(scales[0]->refresh({values[0]}, false, max_with_other).ok());

    const Float8LinearNeeds& needs = layers[0]->info().needs;
    absl::StatusOr<Cast> want = quantize_whole(whole, kRows, kCols, needs.weight_output);
    absl::StatusOr<Cast> want_gi = quantize_whole(whole, kRows, kCols, needs.weight_grad_input);
    ASSERT_TRUE(want.ok() && want_gi.ok());
    // Where a part's scales and codes lie in the whole cast's.
    auto part_of_scales = [&](const std::vector<float>& all, const Fp8WeightCast& cast, int t) {
      if (cast.granularity == Granularity::kTensorwise) return all;
      const bool by_rows = cast.granularity == Granularity::kRowwise;
      const int64_t n = by_rows ? rows : cols, at = by_rows ? (axis == 0 ? t * rows : 0) : (axis == 1 ? t * cols : 0);
      return std::vector<float>(all.begin() + at, all.begin() + at + n);
    };
    auto part_of_codes = [&](const std::vector<uint8_t>& all, int t) {
      std::vector<uint8_t> part(static_cast<size_t>(rows * cols));
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t k = 0; k < cols; ++k) {
          const int64_t wr = axis == 0 ? t * rows + r : r, wc = axis == 1 ? t * cols + k : k;
          part[static_cast<size_t>(r * cols + k)] = all[static_cast<size_t>(wr * kCols + wc)];
        }
      }
      return part;
    };
    for (int t = 0; t < kParts; ++t) {
      SCOPED_TRACE(absl::StrCat("part ", t));
      const Fp8Weight bound = scales[t]->bind(0);
      const std::vector<float> out_want = part_of_scales(want->scales, needs.weight_output, t);
      EXPECT_EQ(scale_bits(download(bound.output.scale, out_want.size())), scale_bits(out_want));
      const std::vector<float> gi_want = part_of_scales(want_gi->scales, needs.weight_grad_input, t);
      EXPECT_EQ(scale_bits(download(bound.grad_input.scale, gi_want.size())), scale_bits(gi_want));
      uint8_t* codes = upload(std::vector<uint8_t>(static_cast<size_t>(rows * cols)));
      uint8_t* codes_gi = upload(std::vector<uint8_t>(static_cast<size_t>(rows * cols)));
      ASSERT_TRUE(scales[t]->cast_shard(0, values[t], codes, codes_gi).ok());
      EXPECT_EQ(download(codes, static_cast<size_t>(rows * cols)), part_of_codes(want->codes, t));
      if (scales[t]->has_grad_input_codes(0)) {
        EXPECT_EQ(download(codes_gi, static_cast<size_t>(rows * cols)), part_of_codes(want_gi->codes, t));
      }
      backend().deallocate(codes);
      backend().deallocate(codes_gi);
    }
    for (float* p : values) backend().deallocate(p);
  }
}

INSTANTIATE_TEST_SUITE_P(Recipes, PlacedPartsTest,
                         ::testing::Values(v1::Fp8Spec::TENSORWISE, v1::Fp8Spec::ROWWISE,
                                           v1::Fp8Spec::ROWWISE_WITH_GW_HP),
                         [](const ::testing::TestParamInfo<v1::Fp8Spec::Recipe>& info) {
                           return v1::Fp8Spec::Recipe_Name(info.param);
                         });

}  // namespace
}  // namespace fp8::engine
