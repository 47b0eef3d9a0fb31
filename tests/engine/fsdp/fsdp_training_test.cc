// FSDP training against single-process training, on real ranks (forked processes, Gloo
// over loopback), per fp8 recipe.
//
// What is equal bit for bit, and why:
//   - fp8 all-gather on vs off, at any world size: each rank casts its shard with the
//     global scale, which is the scale the layer derives from the gathered fp32 weight, and
//     casting is elementwise, so the gathered codes are the bytes the layer would have made.
//   - one rank under FSDP vs a single process (grad_accum 1): the "gather" of one shard is a
//     copy, the reduce-scatter of one rank too, and the loss, grad norm and clipping sum the
//     same numbers in the same order.
// What is equal within a tolerance, and why:
//   - W ranks vs one process training the same global batch (batch_size x W): the process
//     sums every token's weight gradient in one GEMM, the ranks in W partial GEMMs whose
//     results are then added (another order of fp32 additions), and dynamic fp8 scaling
//     measures each rank's activations on its own share of the batch (other scales, other
//     rounding). Measured on this model: see kStepTolerance.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <span>
#include <csignal>
#include <cstdlib>
#include <string>
#include <tuple>

#include "gtest/gtest.h"
#include "tests/engine/fsdp/rank_harness.h"
#include "tests/engine/train/train_test_util.h"
#include "absl/strings/str_join.h"
#include "common/jobspec/memory_estimate.h"
#include "worker/engine/checkpoint/discovery.h"
#include "worker/engine/checkpoint/commit_marker.h"
#include "worker/engine/checkpoint/layout.h"
#include "worker/engine/checkpoint/save.h"
#include "worker/engine/checkpoint/shard_reader.h"
#include "worker/engine/train/checkpoint_rows.h"
#include "worker/engine/fsdp/shard_layout.h"
#include "worker/engine/status_macros.h"
#include "worker/engine/train/trainer.h"

namespace fp8::engine::testing {
namespace {

constexpr int kSteps = 10;

// Every case runs with both layouts of FSDP's collectives (fsdp_model.h).
std::string collectives_name(fsdp::UnitCollectives c) {
  return c == fsdp::UnitCollectives::kPacked ? "packed" : "per_parameter";
}
const auto kBothCollectives =
    ::testing::Values(fsdp::UnitCollectives::kPacked, fsdp::UnitCollectives::kPerParameter);

class FsdpTrainingBase : public ::testing::Test {
 protected:
  virtual fsdp::UnitCollectives collectives() const = 0;
  void SetUp() override {
    corpus_ = dir_.path() / "corpus.txt";
    write_synthetic_corpus(corpus_, 200000);
  }
  v1::JobSpec job(std::vector<std::string> extra, const std::string& checkpoints = "") {
    extra.push_back(absl::StrCat("train.steps=", kSteps));
    extra.push_back("train.eval_every=0");
    v1::JobSpec spec = tiny_job(corpus_, checkpoints.empty() ? dir_.path() / "unused" : dir_.path() / checkpoints, extra);
    if (checkpoints.empty()) spec.mutable_checkpoint()->clear_dir();
    return spec;
  }
  std::vector<RankOutcome> train_ranks(const v1::JobSpec& spec, RunOptions o) {
    o.collectives = collectives();
    return run_ranks(spec, o, dir_.path());
  }
  std::vector<RankOutcome> train_ranks(const v1::JobSpec& spec, int world) {
    RunOptions o;
    o.world_size = world;
    return train_ranks(spec, o);
  }

  TempDir dir_{"fsdp-train"};
  std::filesystem::path corpus_;
};

class FsdpTrainingTest : public FsdpTrainingBase, public ::testing::WithParamInterface<fsdp::UnitCollectives> {
 protected:
  fsdp::UnitCollectives collectives() const override { return GetParam(); }
};
INSTANTIATE_TEST_SUITE_P(Collectives, FsdpTrainingTest, kBothCollectives,
                         [](const auto& info) { return collectives_name(info.param); });

// Relative loss difference allowed per step between W ranks and one process on the same
// global batch (see the top of this file). fp8 recipes differ more than summation order
// alone (per-rank activation scales); the bounds leave room over what 10 steps at W = 2
// measured (bench/RESULTS.md) for W = 4 and other machines.
constexpr double kFp8StepTolerance = 5e-4;
constexpr double kHighPrecisionStepTolerance = 1e-6;

void expect_bit_equal(const RankOutcome& a, const RankOutcome& b) {
  ASSERT_EQ(a.steps.size(), b.steps.size());
  for (size_t i = 0; i < a.steps.size(); ++i) {
    EXPECT_EQ(a.steps[i].loss, b.steps[i].loss) << "step " << a.steps[i].step;
    EXPECT_EQ(a.steps[i].grad_norm, b.steps[i].grad_norm) << "step " << a.steps[i].step;
  }
}

void expect_close(const RankOutcome& single, const RankOutcome& fsdp, double tolerance) {
  ASSERT_EQ(single.steps.size(), fsdp.steps.size());
  for (size_t i = 0; i < single.steps.size(); ++i) {
    const double rel = std::abs(single.steps[i].loss - fsdp.steps[i].loss) / single.steps[i].loss;
    EXPECT_LE(rel, tolerance) << "step " << single.steps[i].step << ": single " << single.steps[i].loss << ", fsdp "
                              << fsdp.steps[i].loss;
  }
}

struct RecipeCase {
  const char* recipe;
  const char* all_gather_fp8;  // "true", "false", or null for the recipe's default
};

class OneRank : public FsdpTrainingBase,
                public ::testing::WithParamInterface<std::tuple<RecipeCase, fsdp::UnitCollectives>> {
 protected:
  fsdp::UnitCollectives collectives() const override { return std::get<1>(GetParam()); }
  const RecipeCase& recipe() const { return std::get<0>(GetParam()); }
};

// One rank under FSDP (a real Gloo group of one) is the single process, bit for bit.
TEST_P(OneRank, EqualsSingleProcessBitForBit) {
  std::vector<std::string> extra{absl::StrCat("fp8.recipe=", recipe().recipe)};
  if (recipe().all_gather_fp8) extra.push_back(absl::StrCat("fp8.all_gather_fp8=", recipe().all_gather_fp8));
  const auto single = train_ranks(job(extra), 0);
  const auto fsdp = train_ranks(job(extra), 1);
  ASSERT_TRUE(all_ok(single));
  ASSERT_TRUE(all_ok(fsdp));
  ASSERT_EQ(fsdp[0].steps.size(), static_cast<size_t>(kSteps));
  expect_bit_equal(single[0], fsdp[0]);
}

INSTANTIATE_TEST_SUITE_P(Recipes, OneRank,
                         ::testing::Combine(::testing::Values(RecipeCase{"tensorwise", "true"},
                                                              RecipeCase{"tensorwise", "false"},
                                                              RecipeCase{"rowwise", nullptr},
                                                              RecipeCase{"delayed", "true"}),
                                            kBothCollectives),
                         [](const auto& info) {
                           const RecipeCase& c = std::get<0>(info.param);
                           return absl::StrCat(c.recipe,
                                               c.all_gather_fp8 == nullptr                   ? ""
                                               : std::string(c.all_gather_fp8) == "true" ? "_fp8_gather"
                                                                                         : "_fp32_gather",
                                               "_", collectives_name(std::get<1>(info.param)));
                         });

struct WorldCase {
  const char* recipe;
  int world;
  int grad_accum = 1;
};

class Ranks : public FsdpTrainingBase,
              public ::testing::WithParamInterface<std::tuple<WorldCase, fsdp::UnitCollectives>> {
 protected:
  fsdp::UnitCollectives collectives() const override { return std::get<1>(GetParam()); }
};

// W ranks with batch_size 2 train the global batch a single process trains with batch
// 2 x W: the same losses within the tolerance above; and every rank reports the same ones.
TEST_P(Ranks, MatchSingleProcessOnTheSameGlobalBatch) {
  const auto [recipe, world, grad_accum] = std::get<0>(GetParam());
  const std::string r = absl::StrCat("fp8.recipe=", recipe), accum = absl::StrCat("train.grad_accum=", grad_accum);
  const auto single = train_ranks(job({r, accum, absl::StrCat("train.batch_size=", 2 * world)}), 0);
  const auto fsdp = train_ranks(job({r, accum, "train.batch_size=2"}), world);
  ASSERT_TRUE(all_ok(single));
  ASSERT_TRUE(all_ok(fsdp));
  ASSERT_EQ(fsdp[0].steps.size(), static_cast<size_t>(kSteps));
  expect_close(single[0], fsdp[0],
              std::string(recipe) == "none" ? kHighPrecisionStepTolerance : kFp8StepTolerance);
  for (int k = 1; k < world; ++k) expect_bit_equal(fsdp[0], fsdp[static_cast<size_t>(k)]);
  // The loss falls: the ranks really train.
  EXPECT_LT(fsdp[0].steps.back().loss, fsdp[0].steps.front().loss - 0.3);
}

INSTANTIATE_TEST_SUITE_P(Recipes, Ranks,
                         ::testing::Combine(::testing::Values(WorldCase{"tensorwise", 2}, WorldCase{"tensorwise", 4},
                                                              WorldCase{"rowwise", 2}, WorldCase{"delayed", 2},
                                                              WorldCase{"delayed", 4}, WorldCase{"none", 2},
                                                              WorldCase{"tensorwise", 2, 2},
                                                              WorldCase{"delayed", 2, 2}),
                                            kBothCollectives),
                         [](const auto& info) {
                           const WorldCase& c = std::get<0>(info.param);
                           return absl::StrCat(c.recipe, "_", c.world, "_ranks", c.grad_accum > 1 ? "_grad_accum" : "",
                                               "_", collectives_name(std::get<1>(info.param)));
                         });

// fp8 all-gather changes the bytes on the wire, never the training: on and off give the
// same bits; and its counters show one byte per weight element a pass and one all-reduce
// for all the weight scales per step. The rowwise recipes gather the output GEMM's
// row-scaled codes for the forward and the grad_input GEMM's own codes (column-scaled, or
// one scale) for the backward.
TEST_P(FsdpTrainingTest, Fp8AllGatherEqualsFp32AllGatherAndMovesOneBytePerElement) {
  for (const char* recipe : {"tensorwise", "delayed", "rowwise", "rowwise_with_gw_hp"}) {
    SCOPED_TRACE(recipe);
    const std::string r = absl::StrCat("fp8.recipe=", recipe);
    const auto on = train_ranks(job({r, "fp8.all_gather_fp8=true"}), 2);
    const auto off = train_ranks(job({r, "fp8.all_gather_fp8=false"}), 2);
    ASSERT_TRUE(all_ok(on));
    ASSERT_TRUE(all_ok(off));
    expect_bit_equal(on[0], off[0]);

    // TinyJob: dim 32, 2 heads (kv 2), ffn 64, 2 layers; the output projection (vocab 256)
    // stays in high precision. Per block: wq, wk, wv, wo 32x32 and w1, w2, w3 64x32; all
    // row counts divide by 2, so nothing is padded.
    const double fp8_weight_elements = 2 * (4 * 32 * 32 + 3 * 64 * 32);
    for (const StepRecord& s : on[0].steps) {
      // Gathered once for the forward and once for the backward: one byte per element.
      EXPECT_EQ(s.all_gather_fp8_bytes, 2 * fp8_weight_elements) << "step " << s.step;
      EXPECT_EQ(s.weight_scale_all_reduces, 1) << "step " << s.step;
      // The weight scales, the step's statistics (losses and stop votes in fp32, the sum of
      // squares in fp64), and (delayed) the amaxes.
      EXPECT_EQ(s.all_reduces, std::string(recipe) == "delayed" ? 4 : 3) << "step " << s.step;
    }
    for (const StepRecord& s : off[0].steps) {
      EXPECT_EQ(s.all_gather_fp8_bytes, 0);
      EXPECT_EQ(s.weight_scale_all_reduces, 0);
      // The same weights at four bytes per element, on top of the other parameters.
      EXPECT_EQ(s.all_gather_f32_bytes - on[0].steps[0].all_gather_f32_bytes, 4 * 2 * fp8_weight_elements);
    }
  }
}

// The same for blockwise (a model of block sizes: dim 128, ffn 384): every weight's shard is
// half of its rows, 64 or 192, so blocks straddle the ranks and their scales come from both.
// Also with bf16 activations and full activation checkpointing (one cast both GEMMs read:
// the backward's recompute gathers nothing more).
TEST_P(FsdpTrainingTest, BlockwiseFp8AllGatherEqualsFp32AllGather) {
  const std::vector<std::string> blocks = {"model.dim=128",    "model.n_heads=2",    "model.ffn_dim=384",
                                           "model.max_seq_len=128", "data.seq_len=128", "train.batch_size=1",
                                           "fp8.recipe=blockwise"};
  for (const std::vector<std::string>& variant :
       {std::vector<std::string>{}, {"train.compute_dtype=bf16", "train.activation_checkpointing=full"}}) {
    SCOPED_TRACE(absl::StrJoin(variant, ", "));
    auto with = [&](const char* gather) {
      std::vector<std::string> extra = blocks;
      extra.insert(extra.end(), variant.begin(), variant.end());
      extra.push_back(gather);
      return job(extra);
    };
    const auto on = train_ranks(with("fp8.all_gather_fp8=true"), 2);
    const auto off = train_ranks(with("fp8.all_gather_fp8=false"), 2);
    ASSERT_TRUE(all_ok(on));
    ASSERT_TRUE(all_ok(off));
    expect_bit_equal(on[0], off[0]);
    // Per block wq, wk, wv, wo 128x128 and w1, w2, w3 384x128, 2 blocks (tiny_job's layers).
    const double fp8_weight_elements = 2 * (4 * 128 * 128 + 3 * 384 * 128);
    for (const StepRecord& s : on[0].steps) {
      EXPECT_EQ(s.all_gather_fp8_bytes, 2 * fp8_weight_elements) << "step " << s.step;
      EXPECT_EQ(s.weight_scale_all_reduces, 1) << "step " << s.step;
    }
    for (const StepRecord& s : off[0].steps) EXPECT_EQ(s.all_gather_fp8_bytes, 0);
  }
}

// Gathered weights (fp8 codes, their transposes, fp32 parameters) and unsharded gradients
// live only while their unit computes: between steps a rank holds its shards, their
// optimizer state and the activation buffers, the same bytes after every step, fewer than
// a single process holding the whole model.
TEST_P(FsdpTrainingTest, GatheredWeightsAreFreedAfterUse) {
  const v1::JobSpec spec = job({"fp8.recipe=tensorwise", "fp8.all_gather_fp8=true"});
  const auto fsdp = train_ranks(spec, 2);
  RunOptions single_options;
  single_options.world_size = 0;
  const auto single = train_ranks(spec, single_options);
  ASSERT_TRUE(all_ok(fsdp));
  ASSERT_TRUE(all_ok(single));
  for (const RankOutcome& rank : fsdp) {
    ASSERT_EQ(rank.steps.size(), static_cast<size_t>(kSteps));
    const double steady = rank.steps[1].memory_in_use_after;  // step 1 allocates the activations
    for (size_t i = 1; i < rank.steps.size(); ++i) {
      const StepRecord& s = rank.steps[i];
      EXPECT_EQ(s.memory_in_use_after, steady) << "step " << s.step << " kept memory it allocated";
      // Each step gathers units on top of what stays, and frees them again.
      EXPECT_GT(s.peak_memory_bytes, steady) << "step " << s.step;
    }
    EXPECT_LT(steady, single[0].steps[1].memory_in_use_after);
  }
}

// No rank holds the whole model at start-up: each draws its own rows of every parameter
// (the bits one process draws: OneRank and Ranks above train alike), so what creating the
// trainer holds at most falls with the world size; at 4 ranks well under half of one
// process's (whose whole parameters, gradients and moments are four copies of the model).
TEST_P(FsdpTrainingTest, StartUpHoldsOneRanksShardsNotTheWholeModel) {
  const v1::JobSpec spec = job({"fp8.recipe=tensorwise", "train.steps=1"});
  RunOptions single_options;
  single_options.world_size = 0;
  const auto single = train_ranks(spec, single_options);
  ASSERT_TRUE(all_ok(single));
  const double whole = single[0].startup_peak_bytes;
  ASSERT_GT(whole, 0);
  for (int world : {2, 4}) {
    SCOPED_TRACE(absl::StrCat(world, " ranks"));
    const auto ranks = train_ranks(spec, world);
    ASSERT_TRUE(all_ok(ranks));
    for (const RankOutcome& r : ranks) {
      EXPECT_GT(r.startup_peak_bytes, 0);
      // Shards, their gradients and moments, and the packed send buffer: 5 / (4 * world)
      // of one process's, with room for the per-weight fp8 buffers.
      EXPECT_LT(r.startup_peak_bytes, whole * (5.0 / (4.0 * world) + 0.1)) << r.startup_peak_bytes << " of " << whole;
    }
  }
}

// The model the ranks draw at start-up, put back together from their shards, is the single
// process's bit for bit, at 1, 2 and 4 ranks. A learning rate too small to change any float
// lets the first step's checkpoint show the initial values.
TEST_P(FsdpTrainingTest, ShardsDrawnAtStartUpAreTheSingleProcessesModel) {
  const std::vector<std::string> extra{"fp8.recipe=tensorwise", "train.steps=1", "train.lr=1e-30", "train.min_lr=0",
                                       "checkpoint.every=1"};
  auto rows_of = [&](int world) -> std::optional<CheckpointRows> {
    const std::string name = absl::StrCat("init-", world);
    RunOptions o;
    o.world_size = world;
    EXPECT_TRUE(all_ok(train_ranks(job(extra, name), o)));
    absl::StatusOr<checkpoint::ResumePoint> point = checkpoint::find_latest_good(dir_.path() / name);
    EXPECT_TRUE(point.ok() && point->checkpoint) << point.status();
    if (!point.ok() || !point->checkpoint) return std::nullopt;
    absl::StatusOr<CheckpointRows> rows = CheckpointRows::open(*point->checkpoint);
    EXPECT_TRUE(rows.ok()) << rows.status();
    return rows.ok() ? std::optional<CheckpointRows>(*std::move(rows)) : std::nullopt;
  };
  const std::optional<CheckpointRows> single = rows_of(0);
  ASSERT_TRUE(single.has_value());
  int compared = 0;
  for (int world : {1, 2, 4}) {
    SCOPED_TRACE(absl::StrCat(world, " ranks"));
    const std::optional<CheckpointRows> sharded = rows_of(world);
    ASSERT_TRUE(sharded.has_value());
    for (const checkpoint::RecordInfo& record : single->first().records()) {
      if (record.name.rfind("params/", 0) != 0) continue;
      SCOPED_TRACE(record.name);
      absl::StatusOr<std::vector<float>> want = single->rows(record.name, record.shape, 0, record.shape.at(0));
      absl::StatusOr<std::vector<float>> got = sharded->rows(record.name, record.shape, 0, record.shape.at(0));
      ASSERT_TRUE(want.ok() && got.ok()) << want.status() << " " << got.status();
      ASSERT_EQ(got->size(), want->size());
      EXPECT_EQ(std::memcmp(got->data(), want->data(), want->size() * sizeof(float)), 0);
      ++compared;
    }
  }
  EXPECT_GT(compared, 3 * 6);
}

// A rank that dies mid-training takes the others down within the collective timeout, with
// an error naming it, instead of leaving them hanging.
TEST_P(FsdpTrainingTest, KilledRankMakesEveryOtherRankFailWithinTheTimeout) {
  for (int world : {2, 4}) {
    SCOPED_TRACE(absl::StrCat(world, " ranks"));
    RunOptions o;
    o.world_size = world;
    o.timeout_seconds = 10;
    o.kill_rank = 1;
    o.kill_at_step = 3;
    o.deadline_seconds = 60;
    const auto ranks = train_ranks(job({"fp8.recipe=tensorwise"}), o);
    EXPECT_EQ(ranks[1].signal, SIGKILL);
    for (int k = 0; k < world; ++k) {
      if (k == 1) continue;
      const RankOutcome& r = ranks[static_cast<size_t>(k)];
      EXPECT_TRUE(r.exited) << "rank " << k << " did not exit on its own";
      EXPECT_EQ(r.exit_code, 1) << "rank " << k;
      EXPECT_FALSE(r.ok);
      EXPECT_NE(r.error.find("rank 1"), std::string::npos) << "rank " << k << ": " << r.error;
      EXPECT_LT(r.seconds, o.timeout_seconds + 20) << "rank " << k;
    }
  }
}

// A rank that stops answering (SIGSTOP) fails its peers' next collective within
// train.collective_timeout_seconds, however long the group's own timeout is.
TEST_P(FsdpTrainingTest, AStalledRankFailsItsPeersWithinTheJobsCollectiveTimeout) {
  RunOptions o;
  o.world_size = 2;
  o.timeout_seconds = 120;  // the group's (fp8-train --timeout): far longer than the job's
  o.stall_rank = 1;
  o.stall_at_step = 4;
  o.deadline_seconds = 200;
  const auto ranks = train_ranks(job({"fp8.recipe=tensorwise", "train.collective_timeout_seconds=2"}), o);
  ASSERT_EQ(ranks.size(), 2u);
  const RankOutcome& survivor = ranks[0];
  EXPECT_TRUE(survivor.exited) << "rank 0 did not exit on its own";
  EXPECT_EQ(survivor.exit_code, 1);
  EXPECT_NE(survivor.error.find("rank 1 did not answer within 2s"), std::string::npos) << survivor.error;
  // Start-up included; a hang would last the group's 120 s.
  EXPECT_LT(survivor.seconds, 60) << survivor.error;
  EXPECT_FALSE(ranks[1].exited);  // still stopped when the harness ended it
}

// A stop (a signal, a cancel) that reaches one rank stops every rank after the same step:
// the ranks sum their votes with each step's values on the device, and each reads the sum
// of a step once the next one is queued, so all stop one step after the first vote,
// whether steps report or not.
TEST_P(FsdpTrainingTest, AStopOnOneRankStopsEveryRankAfterTheSameStep) {
  for (const int64_t log_every : {int64_t{1}, int64_t{100}}) {
    SCOPED_TRACE(absl::StrCat("log_every ", log_every));
    RunOptions o;
    o.world_size = 2;
    o.stop_rank = 1;
    o.stop_at_step = 3;
    const auto ranks = train_ranks(job({"fp8.recipe=tensorwise", absl::StrCat("train.log_every=", log_every)}), o);
    ASSERT_TRUE(all_ok(ranks));
    for (const RankOutcome& r : ranks) {
      ASSERT_FALSE(r.steps.empty());
      EXPECT_EQ(r.steps.back().step, 4);  // step 3's vote, read in step 4
    }
    expect_bit_equal(ranks[0], ranks[1]);
  }
}

// A diverging run under FSDP fails as one process does, on every rank alike: the ranks'
// summed values are read at the same step (here the checkpoint at step 4, before anything
// is written), and the error names the first step whose loss or norm is not finite.
TEST_P(FsdpTrainingTest, ADivergingRunFailsOnEveryRankAtTheSameReadBeforeItsCheckpoint) {
  const auto ranks = train_ranks(job({"fp8.recipe=tensorwise", "train.lr=1e30", "train.warmup_steps=0", "train.log_every=10",
                              "checkpoint.every=4"},
                             "diverging"),
                         2);
  ASSERT_EQ(ranks.size(), 2u);
  for (const RankOutcome& r : ranks) {
    EXPECT_TRUE(r.exited);
    EXPECT_FALSE(r.ok);
    EXPECT_TRUE(r.error.find("training diverged at step 2:") != std::string::npos ||
                r.error.find("training diverged at step 3:") != std::string::npos)
        << r.error;
    ASSERT_EQ(r.steps.size(), 1u) << "only step 1 reported";
    EXPECT_TRUE(std::isfinite(r.steps[0].loss));
  }
  EXPECT_EQ(ranks[0].error, ranks[1].error);
  EXPECT_FALSE(std::filesystem::exists(checkpoint::step_directory((dir_.path() / "diverging").string(), 4)));
}

// Every record of one rank's checkpoint shard, as raw bytes by name.
std::map<std::string, std::string> shard_records(const std::filesystem::path& file) {
  absl::StatusOr<checkpoint::ShardReader> r = checkpoint::ShardReader::open(file);
  EXPECT_TRUE(r.ok()) << r.status();
  std::map<std::string, std::string> out;
  if (!r.ok()) return out;
  for (const checkpoint::RecordInfo& info : r->records()) {
    std::string bytes(info.size_bytes, '\0');
    absl::Status s = r->read_record(info.name, info.dtype, info.shape, std::as_writable_bytes(std::span(bytes)));
    EXPECT_TRUE(s.ok()) << s;
    out[info.name] = bytes;
  }
  return out;
}

// Activation checkpointing under FSDP trains as keeping everything does, bit for bit, on
// every rank (each rank's checkpoint shard included), and gathers no more: a block's
// forward runs again after its weights were gathered for its backward, and reads them there.
// Except where the two GEMMs read different codes (rowwise): full checkpointing's backward
// gathers the forward's codes beside the grad_input GEMM's, half as many bytes again.
TEST_P(FsdpTrainingTest, ActivationCheckpointingTrainsBitForBitWithoutMoreGathers) {
  for (const char* recipe : {"tensorwise", "delayed", "rowwise"}) {
    SCOPED_TRACE(recipe);
    const std::string r = absl::StrCat("fp8.recipe=", recipe);
    const std::string keep_name = absl::StrCat(recipe, "-none");
    const auto kept = train_ranks(job({r, "train.activation_checkpointing=none"}, keep_name), 2);
    ASSERT_TRUE(all_ok(kept));
    ASSERT_EQ(kept[0].steps.size(), static_cast<size_t>(kSteps));
    for (const char* mode : {"full", "selective"}) {
      SCOPED_TRACE(mode);
      const std::string name = absl::StrCat(recipe, "-", mode);
      const auto recomputed = train_ranks(job({r, absl::StrCat("train.activation_checkpointing=", mode)}, name), 2);
      ASSERT_TRUE(all_ok(recomputed));
      for (int rank = 0; rank < 2; ++rank) {
        const size_t k = static_cast<size_t>(rank);
        expect_bit_equal(kept[k], recomputed[k]);
        for (size_t i = 0; i < kept[k].steps.size(); ++i) {
          const double regathered = std::string(recipe) == "rowwise" && std::string(mode) == "full" ? 1.5 : 1.0;
          EXPECT_EQ(recomputed[k].steps[i].all_gather_fp8_bytes, regathered * kept[k].steps[i].all_gather_fp8_bytes);
          EXPECT_EQ(recomputed[k].steps[i].all_gather_f32_bytes, kept[k].steps[i].all_gather_f32_bytes);
        }
        const auto shard = [&](const std::string& run) {
          return shard_records(checkpoint::shard_path(dir_.path() / run, kSteps, rank, 2));
        };
        const auto want = shard(keep_name), got = shard(name);
        ASSERT_FALSE(want.empty());
        EXPECT_TRUE(want == got) << "rank " << rank << "'s last checkpoint differs";
      }
    }
  }
}

// The memory estimate (common/jobspec/memory_estimate.h) of an FSDP rank against the most
// a step of each rank had in use: within 15%, at 2 and 4 ranks, with and without fp8
// all-gather and activation checkpointing. No validation split, so that every evaluation's
// memory is out of both.
TEST_P(FsdpTrainingTest, MemoryEstimateIsWithinFifteenPercentOfEachRanksPeak) {
  for (const int world : {2, 4}) {
    for (const auto& extra : std::vector<std::vector<std::string>>{
             {"fp8.recipe=tensorwise"}, {"fp8.recipe=none"}, {"fp8.recipe=delayed", "train.activation_checkpointing=full"},
             {"fp8.recipe=rowwise", "train.activation_checkpointing=selective"}}) {
      std::vector<std::string> overrides = extra;
      overrides.insert(overrides.end(), {"model.n_layers=4", "data.val_fraction=0", "train.batch_size=4",
                             absl::StrCat("resources.world_size=", world)});
      const v1::JobSpec spec = job(overrides);
      const std::string what = absl::StrCat(world, " ranks, ", absl::StrJoin(extra, ", "));
      const absl::StatusOr<jobspec::MemoryEstimate> estimate = jobspec::estimate_rank_memory(spec);
      ASSERT_TRUE(estimate.ok()) << estimate.status();
      const auto ranks = train_ranks(spec, world);
      ASSERT_TRUE(all_ok(ranks)) << what;
      for (size_t r = 0; r < ranks.size(); ++r) {
        double peak = 0;
        for (const StepRecord& s : ranks[r].steps) peak = std::max(peak, s.peak_memory_bytes);
        const double rel = (static_cast<double>(estimate->total_bytes()) - peak) / peak;
        std::printf("%s, rank %zu: estimate %lld, measured %.0f (%+.1f%%)\n", what.c_str(), r,
                    static_cast<long long>(estimate->total_bytes()), peak, 100 * rel);
        EXPECT_LE(std::abs(rel), 0.15) << what << ", rank " << r << "\n"
                                       << jobspec::format_memory_estimate(*estimate);
      }
    }
  }
}

// Each rank writes its shard; resuming the sharded checkpoint continues exactly as the run
// that never stopped; and a checkpoint without its commit marker is never used.
TEST_P(FsdpTrainingTest, ShardedCheckpointResumesBitForBit) {
  const std::vector<std::string> extra{"fp8.recipe=delayed", "checkpoint.every=4"};
  RunOptions straight;
  straight.world_size = 2;
  const auto full = train_ranks(job(extra, "straight"), straight);
  ASSERT_TRUE(all_ok(full));
  ASSERT_EQ(full[0].steps.size(), static_cast<size_t>(kSteps));

  RunOptions first = straight;
  first.stop_after_step = 6;  // checkpoints at 4 and (stopping) 6
  ASSERT_TRUE(all_ok(train_ranks(job(extra, "stopped"), first)));
  EXPECT_TRUE(std::filesystem::exists(dir_.path() / "stopped" / "step-00000006" / "COMMITTED"));
  EXPECT_TRUE(std::filesystem::exists(dir_.path() / "stopped" / "step-00000006" / "rank-00001-of-00002.ckpt"));
  // Step 6's marker goes: that checkpoint is incomplete, so resume takes step 4.
  std::filesystem::remove(dir_.path() / "stopped" / "step-00000006" / "COMMITTED");
  RunOptions again = straight;
  again.resume = true;
  const auto resumed = train_ranks(job(extra, "stopped"), again);
  ASSERT_TRUE(all_ok(resumed));
  ASSERT_EQ(resumed[0].steps.size(), static_cast<size_t>(kSteps - 4));
  for (size_t i = 0; i < resumed[0].steps.size(); ++i) {
    const StepRecord& want = full[0].steps[i + 4];
    EXPECT_EQ(resumed[0].steps[i].step, want.step);
    EXPECT_EQ(resumed[0].steps[i].loss, want.loss) << "step " << want.step;
    EXPECT_EQ(resumed[0].steps[i].grad_norm, want.grad_norm) << "step " << want.step;
  }
}

// A sharded checkpoint written before the vocabulary was padded to a multiple of 64 (each
// rank's flat rows of the 300-row embedding and output projection, not of 320) resumes at
// the same world size exactly as the run that never stopped.
TEST_P(FsdpTrainingTest, AShardedCheckpointWithoutTheVocabularysPaddingResumesBitForBit) {
  const std::vector<std::string> extra{"model.vocab_size=300", "model.tie_embeddings=false", "checkpoint.every=4"};
  RunOptions straight;
  straight.world_size = 2;
  const auto full = train_ranks(job(extra, "straight"), straight);
  ASSERT_TRUE(all_ok(full));
  RunOptions first = straight;
  first.stop_after_step = 4;
  ASSERT_TRUE(all_ok(train_ranks(job(extra, "padded"), first)));

  // Step 4 rewritten as before the padding: the whole 320 rows put together from both
  // shards, cut to 300, and split over the ranks again.
  const std::filesystem::path padded = dir_.path() / "padded", unpadded = dir_.path() / "unpadded";
  std::vector<checkpoint::ShardReader> readers;
  for (int r = 0; r < 2; ++r) {
    absl::StatusOr<checkpoint::ShardReader> reader = checkpoint::ShardReader::open(checkpoint::shard_path(padded, 4, r, 2));
    ASSERT_TRUE(reader.ok()) << reader.status();
    readers.push_back(std::move(*reader));
  }
  const fsdp::ShardLayout with = fsdp::shard_layout({320, 32}, 2), without = fsdp::shard_layout({300, 32}, 2);
  auto is_vocab = [](const std::string& name) { return name.ends_with("tok_embeddings") || name.ends_with("/output"); };
  std::vector<checkpoint::ShardInfo> infos;
  for (int r = 0; r < 2; ++r) {
    absl::StatusOr<checkpoint::ShardInfo> info =
        checkpoint::write_rank_shard(unpadded, 4, r, 2, [&](checkpoint::ShardWriter& w) -> absl::Status {
          for (const auto& [key, value] : readers[r].metadata()) FP8_RETURN_IF_ERROR(w.set_metadata(key, value));
          for (const checkpoint::RecordInfo& info : readers[r].records()) {
            std::vector<std::byte> bytes(info.size_bytes);
            FP8_RETURN_IF_ERROR(readers[r].read_record(info.name, info.dtype, info.shape, bytes));
            if (!is_vocab(info.name)) {
              FP8_RETURN_IF_ERROR(w.write_record(info.name, info.dtype, info.shape, bytes));
              continue;
            }
            std::vector<float> whole;
            for (const checkpoint::ShardReader& q : readers) {
              std::vector<float> part(static_cast<size_t>(with.shard_elements()));
              FP8_RETURN_IF_ERROR(q.read_tensor<float>(info.name, part, {with.shard_elements()}));
              whole.insert(whole.end(), part.begin(), part.end());
            }
            std::vector<float> mine(whole.begin() + r * without.shard_elements(),
                                    whole.begin() + (r + 1) * without.shard_elements());
            FP8_RETURN_IF_ERROR(w.write_tensor<float>(info.name, mine, {without.shard_elements()}));
          }
          return absl::OkStatus();
        });
    ASSERT_TRUE(info.ok()) << info.status();
    infos.push_back(*info);
  }
  ASSERT_TRUE(checkpoint::write_commit_marker(checkpoint::step_directory(unpadded, 4), 4, 2, infos).ok());

  RunOptions again = straight;
  again.resume = true;
  const auto resumed = train_ranks(job(extra, "unpadded"), again);
  ASSERT_TRUE(all_ok(resumed)) << resumed[0].error;
  ASSERT_EQ(resumed[0].steps.size(), static_cast<size_t>(kSteps - 4));
  for (size_t i = 0; i < resumed[0].steps.size(); ++i) {
    const StepRecord& want = full[0].steps[i + 4];
    EXPECT_EQ(resumed[0].steps[i].loss, want.loss) << "step " << want.step;
    EXPECT_EQ(resumed[0].steps[i].grad_norm, want.grad_norm) << "step " << want.step;
  }
}

// The steps of `resumed` against the same steps of `straight`, within `tolerance`
// (relative loss difference), or bit for bit at 0.
void expect_steps_match(const RankOutcome& straight, const RankOutcome& resumed, double tolerance) {
  ASSERT_FALSE(resumed.steps.empty());
  for (const StepRecord& got : resumed.steps) {
    SCOPED_TRACE(::testing::Message() << "step " << got.step);
    ASSERT_GE(got.step, 1);
    ASSERT_LE(got.step, static_cast<int64_t>(straight.steps.size()));
    const StepRecord& want = straight.steps[static_cast<size_t>(got.step - 1)];
    ASSERT_EQ(want.step, got.step);
    if (tolerance == 0) {
      EXPECT_EQ(got.loss, want.loss);
      EXPECT_EQ(got.grad_norm, want.grad_norm);
    } else {
      EXPECT_LE(std::abs(got.loss - want.loss) / want.loss, tolerance) << got.loss << " vs " << want.loss;
    }
  }
}

class Reshard : public FsdpTrainingBase,
                public ::testing::WithParamInterface<std::tuple<const char*, fsdp::UnitCollectives>> {
 protected:
  fsdp::UnitCollectives collectives() const override { return std::get<1>(GetParam()); }
  // The job at `world` ranks (0: one process) with a global batch of 8 sequences.
  v1::JobSpec job_at(int world, const std::string& checkpoints) {
    const int per_rank = 8 / std::max(world, 1);
    return job({absl::StrCat("fp8.recipe=", std::get<0>(GetParam())), "checkpoint.every=4",
                absl::StrCat("train.batch_size=", per_rank)},
               checkpoints);
  }
  std::vector<RankOutcome> run_at(int world, const std::string& checkpoints, bool resume, int64_t stop_after) {
    RunOptions o;
    o.world_size = world;
    o.resume = resume;
    o.stop_after_step = stop_after;
    return train_ranks(job_at(world, checkpoints), o);
  }
};

// A checkpoint resumes at another world size, its parameters and AdamW's moments cut anew
// by rows: 2 ranks to 4 to one process continues the straight run on the same global batch
// within the tolerance of W ranks against one process (the arithmetic of other world sizes
// differs that much, not the state), and every rank reports the same steps.
TEST_P(Reshard, ResumesAtAnotherWorldSizeThroughCheckpoints) {
  const double tolerance = std::string(std::get<0>(GetParam())) == "none" ? kHighPrecisionStepTolerance
                                                                          : kFp8StepTolerance;
  const auto straight = run_at(2, "straight", false, 0);
  ASSERT_TRUE(all_ok(straight));
  ASSERT_EQ(straight[0].steps.size(), static_cast<size_t>(kSteps));

  ASSERT_TRUE(all_ok(run_at(2, "resharded", false, 4)));  // checkpoint 4, by 2 ranks
  const auto four = run_at(4, "resharded", true, 8);      // from 4 on 4 ranks; checkpoint 8
  ASSERT_TRUE(all_ok(four));
  ASSERT_EQ(four.size(), 4u);
  EXPECT_EQ(four[0].steps.front().step, 5);
  EXPECT_TRUE(std::filesystem::exists(dir_.path() / "resharded" / "step-00000008" / "rank-00003-of-00004.ckpt"));
  expect_steps_match(straight[0], four[0], tolerance);
  for (size_t k = 1; k < four.size(); ++k) expect_bit_equal(four[0], four[k]);

  const auto one = run_at(0, "resharded", true, 0);  // from 8 in one process, to the end
  ASSERT_TRUE(all_ok(one));
  EXPECT_EQ(one[0].steps.front().step, 9);
  EXPECT_EQ(one[0].steps.back().step, kSteps);
  expect_steps_match(straight[0], one[0], tolerance);
}

// Where the world size does not change the arithmetic (one process and one rank under
// FSDP are bit for bit the same), resuming across them is bit for bit too, both ways:
// whole tensors in a single process's checkpoint, flat ones in FSDP's.
TEST_P(Reshard, OneProcessAndOneRankResumeEachOthersCheckpointsBitForBit) {
  const auto straight = run_at(0, "straight", false, 0);
  ASSERT_TRUE(all_ok(straight));
  ASSERT_TRUE(all_ok(run_at(0, "across", false, 4)));  // checkpoint 4, one process
  const auto fsdp = run_at(1, "across", true, 8);      // one rank; checkpoint 8
  ASSERT_TRUE(all_ok(fsdp));
  EXPECT_EQ(fsdp[0].steps.front().step, 5);
  expect_steps_match(straight[0], fsdp[0], 0);
  const auto single = run_at(0, "across", true, 0);
  ASSERT_TRUE(all_ok(single));
  EXPECT_EQ(single[0].steps.front().step, 9);
  expect_steps_match(straight[0], single[0], 0);
}

INSTANTIATE_TEST_SUITE_P(Recipes, Reshard,
                         ::testing::Combine(::testing::Values("none", "tensorwise", "delayed"), kBothCollectives),
                         [](const auto& info) {
                           return absl::StrCat(std::get<0>(info.param), "_", collectives_name(std::get<1>(info.param)));
                         });

}  // namespace
}  // namespace fp8::engine::testing
