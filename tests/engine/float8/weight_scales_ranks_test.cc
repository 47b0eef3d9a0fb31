// Fp8WeightScales across real ranks (forked processes, Gloo over loopback): each rank holds
// a shard of every weight, and the Fp8Tensor it binds carries, on every rank, the scale its
// shard was cast with, which is the scale of the whole weight; the codes all-gathered from
// the ranks' cast shards are, bit for bit, the whole weight cast by one process with it.
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
#include "worker/engine/float8/config.h"
#include "worker/engine/float8/linear.h"
#include "worker/engine/float8/weight_scales.h"

namespace fp8::engine {
namespace {

using collectives::test::RankChecks;
using collectives::test::RankReport;

constexpr int kWorld = 2;
// rows, row_elements: an odd row count leaves the last rank a padding row of zeros.
constexpr int64_t kShapes[2][2] = {{7, 16}, {10, 32}};

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
std::vector<float> whole_weight(int w) {
  std::mt19937 rng(static_cast<uint32_t>(11 + w));
  std::normal_distribution<float> dist(0.0f, w == 0 ? 0.3f : 25.0f);
  std::vector<float> v(static_cast<size_t>(kShapes[w][0] * kShapes[w][1]));
  for (float& x : v) x = dist(rng);
  return v;
}

uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

// One rank: its shards' scales and the gathered codes against one process's cast of the
// whole weights. Returns the scales' bits, for the parent to compare across ranks.
RankReport check_rank(int rank, v1::Fp8Spec::Recipe recipe, const std::string& store_dir) {
  RankChecks c;
  absl::StatusOr<std::unique_ptr<collectives::ProcessGroup>> group =
      collectives::test::join_group(store_dir, rank, kWorld, absl::Seconds(20));
  if (!c.expect_ok(group.status(), "join")) return {c.text(), ""};
  absl::StatusOr<Float8LinearConfig> config = recipe_config(recipe, 4);
  if (!c.expect_ok(config.status(), "config")) return {c.text(), ""};

  std::vector<std::unique_ptr<Float8Linear>> layers;
  std::vector<Fp8WeightScales::Shard> shards;
  std::vector<float*> shard_values;
  for (int w = 0; w < 2; ++w) {
    const int64_t rows = kShapes[w][0], cols = kShapes[w][1], shard_rows = (rows + kWorld - 1) / kWorld;
    absl::StatusOr<std::unique_ptr<Float8Linear>> layer = Float8Linear::create(backend(), cols, rows, *config);
    if (!c.expect_ok(layer.status(), "layer")) return {c.text(), ""};
    layers.push_back(std::move(*layer));
    const std::vector<float> whole = whole_weight(w);
    std::vector<float> shard(static_cast<size_t>(shard_rows * cols), 0.0f);
    for (int64_t r = 0; r < shard_rows && rank * shard_rows + r < rows; ++r) {
      std::memcpy(&shard[static_cast<size_t>(r * cols)], &whole[static_cast<size_t>((rank * shard_rows + r) * cols)],
                  static_cast<size_t>(cols) * sizeof(float));
    }
    shard_values.push_back(upload(shard));
    shards.push_back({layers.back().get(), shard_rows, cols});
  }
  absl::StatusOr<std::unique_ptr<Fp8WeightScales>> scales = Fp8WeightScales::create(backend(), shards);
  if (!c.expect_ok(scales.status(), "create")) return {c.text(), ""};
  collectives::ProcessGroup& pg = **group;
  const std::vector<const float*> values(shard_values.begin(), shard_values.end());
  c.expect_ok((*scales)->refresh(values, /*row_amaxes_current=*/false,
                                 [&pg](float* v, int64_t n) { return pg.all_reduce(v, n, collectives::ReduceOp::kMax); }),
              "refresh");

  std::string output;
  for (int w = 0; w < 2; ++w) {
    const int64_t rows = kShapes[w][0], cols = kShapes[w][1], shard_rows = shards[static_cast<size_t>(w)].rows;
    const Fp8Tensor bound = (*scales)->bind(w);
    const float scale = download(bound.scale, 1).at(0);
    // One process's way: the whole weight's amax, its dynamic scale (no history has a
    // scale yet under delayed scaling), one cast.
    float* whole = upload(whole_weight(w));
    float* want_scale = upload(std::vector<float>(3, 0.0f));  // scale, inverse, amax
    c.expect_ok(backend().amax({whole, DType::kFloat32, rows, cols}, Granularity::kTensorwise, want_scale + 2), "amax");
    c.expect_ok(backend().compute_scales(want_scale + 2, 1, (*scales)->format(w), /*pow2=*/false, want_scale,
                                         want_scale + 1),
                "scale");
    c.expect(bits(scale) == bits(download(want_scale, 1).at(0)),
             absl::StrCat("weight ", w, ": the shard's scale ", scale, " is not the whole weight's"));
    uint8_t* want_codes = upload(std::vector<uint8_t>(static_cast<size_t>(rows * cols)));
    CastArgs cast;
    cast.input = {whole, DType::kFloat32, rows, cols};
    cast.format = (*scales)->format(w);
    cast.granularity = Granularity::kTensorwise;
    cast.scale = want_scale;
    cast.saturate = true;
    cast.out = want_codes;
    c.expect_ok(backend().cast(cast), "whole cast");
    // The ranks' cast shards, gathered.
    const auto shard_bytes = static_cast<size_t>(shard_rows * cols);
    uint8_t* codes = upload(std::vector<uint8_t>(shard_bytes));
    uint8_t* gathered = upload(std::vector<uint8_t>(shard_bytes * kWorld));
    c.expect_ok((*scales)->cast_shard(w, shard_values[static_cast<size_t>(w)], codes), "cast shard");
    c.expect_ok(pg.all_gather(codes, gathered, shard_bytes), "all_gather");
    std::vector<uint8_t> got = download(gathered, shard_bytes * kWorld);
    got.resize(static_cast<size_t>(rows * cols));  // the last rank's padding rows off
    c.expect(got == download(want_codes, static_cast<size_t>(rows * cols)),
             absl::StrCat("weight ", w, ": the gathered codes are not the whole weight's cast"));
    absl::StrAppend(&output, w, ":", bits(scale), " ");
    for (void* p : {static_cast<void*>(whole), static_cast<void*>(want_scale), static_cast<void*>(want_codes),
                    static_cast<void*>(codes), static_cast<void*>(gathered)}) {
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
                         ::testing::Values(v1::Fp8Spec::TENSORWISE, v1::Fp8Spec::DELAYED),
                         [](const ::testing::TestParamInfo<v1::Fp8Spec::Recipe>& info) {
                           return info.param == v1::Fp8Spec::TENSORWISE ? "tensorwise" : "delayed";
                         });

}  // namespace
}  // namespace fp8::engine
