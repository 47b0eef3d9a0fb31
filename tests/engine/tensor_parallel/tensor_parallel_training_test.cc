// Tensor-parallel training (parallel.tensor) against one process, on real ranks (forked
// processes, Gloo over loopback), per fp8 recipe.
//
// Every tensor-parallel rank trains the whole batch, so the ranks and the one process
// compute the same function on the same data; what differs is the order of fp32 additions:
// a row-parallel layer's output (and a column-parallel layer's input gradient) is the sum of
// the ranks' partial GEMMs instead of one GEMM's accumulation. The fp8 scales are the one
// process's (amaxes reduced across the ranks), so fp8 adds only the rounding flips those
// last bits cause. Hence losses within a tolerance, and the ranks equal to each other bit
// for bit (every collective gives every rank the same bits).
#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/engine/fsdp/rank_harness.h"
#include "tests/engine/train/train_test_util.h"
#include "common/jobspec/loader.h"
#include "worker/engine/train/trainer.h"

namespace fp8::engine::testing {
namespace {

constexpr int kSteps = 10;
// Relative loss difference allowed per step against one process (see above).
constexpr double kFp8StepTolerance = 5e-4;
constexpr double kHighPrecisionStepTolerance = 1e-5;

class TensorParallelTrainingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    corpus_ = dir_.path() / "corpus.txt";
    write_synthetic_corpus(corpus_, 200000);
  }
  // A model whose heads and feed-forward columns split in 2 or 4 with fp8-sized shares.
  // `data` data-parallel groups of `tensor` ranks (resources.world_size = data × tensor), each
  // rank reading batch_size sequences a step (FSDP's share of the global batch).
  v1::JobSpec job(const std::vector<std::string>& extra, int tensor, int data = 1) {
    const std::string yaml = absl::StrCat(R"(name: tensor-parallel-test
model: {dim: 64, n_layers: 2, n_heads: 4, ffn_dim: 128, max_seq_len: 32}
data: {path: )", corpus_.string(), R"(, seq_len: 32}
train: {steps: )", kSteps, R"(, batch_size: 4, lr: 3e-3, warmup_steps: 4, log_every: 1, eval_every: 0}
parallel: {tensor: )", tensor, R"(}
resources: {world_size: )", tensor * data, R"(}
)");
    absl::StatusOr<v1::JobSpec> spec = jobspec::load_job_spec_string(yaml, "tensor-parallel-test.yaml", extra);
    EXPECT_TRUE(spec.ok()) << spec.status();
    if (!spec.ok()) return v1::JobSpec();
    // No checkpoints unless a case asks for them in a folder of its own: the derived default
    // is relative to the working directory, which parallel test processes share.
    const bool checkpoints = std::any_of(extra.begin(), extra.end(),
                                         [](const std::string& e) { return e.rfind("checkpoint.dir=", 0) == 0; });
    if (!checkpoints) spec->mutable_checkpoint()->clear_dir();
    return *spec;
  }
  // One process training the same global batch.
  std::vector<RankOutcome> single(const v1::JobSpec& spec) {
    v1::JobSpec one = spec;
    const int data = spec.resources().world_size() / spec.parallel().tensor();
    one.mutable_parallel()->set_tensor(1);
    one.mutable_resources()->set_world_size(1);
    one.mutable_train()->set_batch_size(spec.train().batch_size() * data);
    RunOptions o;
    o.world_size = 0;
    return run_ranks(one, o, dir_.path());
  }
  std::vector<RankOutcome> ranks(const v1::JobSpec& spec, RunOptions o = {}) {
    o.world_size = spec.resources().world_size();
    return run_ranks(spec, o, dir_.path());
  }

  TempDir dir_{"tensor-parallel"};
  std::filesystem::path corpus_;
};

// Beside data parallelism each rank scales its activations by its own share of the batch
// (dynamic scaling, as under FSDP alone): more rounding differs, so only losses are compared.
void expect_close(const RankOutcome& single, const RankOutcome& split, double tolerance, bool grad_norms = true) {
  ASSERT_EQ(single.steps.size(), split.steps.size());
  for (size_t i = 0; i < single.steps.size(); ++i) {
    const double rel = std::abs(single.steps[i].loss - split.steps[i].loss) / single.steps[i].loss;
    EXPECT_LE(rel, tolerance) << "step " << single.steps[i].step << ": one process " << single.steps[i].loss
                              << ", tensor parallel " << split.steps[i].loss;
    if (!grad_norms) continue;
    const double norm_rel =
        std::abs(single.steps[i].grad_norm - split.steps[i].grad_norm) / single.steps[i].grad_norm;
    EXPECT_LE(norm_rel, 10 * tolerance) << "grad norm at step " << single.steps[i].step;
  }
}

void expect_bit_equal(const RankOutcome& a, const RankOutcome& b) {
  ASSERT_EQ(a.steps.size(), b.steps.size());
  for (size_t i = 0; i < a.steps.size(); ++i) {
    EXPECT_EQ(a.steps[i].loss, b.steps[i].loss) << "step " << a.steps[i].step;
    EXPECT_EQ(a.steps[i].grad_norm, b.steps[i].grad_norm) << "step " << a.steps[i].step;
  }
}

struct MeshCase {
  const char* recipe;
  int tensor;
  std::vector<std::string> extra;
  int data = 1;  // data-parallel groups beside the tensor-parallel ranks (FSDP over them)
};

class Recipes : public TensorParallelTrainingTest, public ::testing::WithParamInterface<MeshCase> {};

TEST_P(Recipes, MatchOneProcessOnTheSameBatches) {
  const MeshCase& c = GetParam();
  std::vector<std::string> extra = c.extra;
  extra.push_back(absl::StrCat("fp8.recipe=", c.recipe));
  const v1::JobSpec spec = job(extra, c.tensor, c.data);
  const auto one = single(spec);
  const auto split = ranks(spec);
  ASSERT_TRUE(all_ok(one));
  ASSERT_TRUE(all_ok(split));
  ASSERT_EQ(split.size(), static_cast<size_t>(c.tensor * c.data));
  ASSERT_EQ(split[0].steps.size(), static_cast<size_t>(spec.train().steps()));
  expect_close(one[0], split[0], std::string(c.recipe) == "none" ? kHighPrecisionStepTolerance : kFp8StepTolerance,
               c.data == 1);
  for (size_t k = 1; k < split.size(); ++k) expect_bit_equal(split[0], split[k]);
  // The loss falls: the ranks really train.
  EXPECT_LT(split[0].steps.back().loss, split[0].steps.front().loss - 0.3);
  // Each step sums partial outputs and gradients across the tensor-parallel ranks:
  // all-reduces, counted apart from FSDP's (whose gathers there are only beside data
  // parallelism).
  EXPECT_GT(split[0].steps.back().tensor_all_reduces, 0);
  if (c.data == 1) {
    EXPECT_EQ(split[0].steps.back().all_reduces, 0);
  } else if (spec.fp8().all_gather_fp8()) {
    EXPECT_GT(split[0].steps.back().all_gather_fp8_bytes, 0);
  } else {
    EXPECT_GT(split[0].steps.back().all_gather_f32_bytes, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Mesh, Recipes,
    ::testing::Values(MeshCase{"none", 2, {}}, MeshCase{"tensorwise", 2, {}}, MeshCase{"delayed", 2, {}},
                      // Column-parallel weights cast per column with the whole weight's scales.
                      MeshCase{"rowwise", 2, {}}, MeshCase{"rowwise_with_gw_hp", 2, {}},
                      MeshCase{"rowwise", 2, {}, 2},
                      MeshCase{"tensorwise", 4, {}}, MeshCase{"tensorwise", 2, {"train.grad_accum=2"}},
                      // Grouped-query attention: each rank keeps its heads' key-value heads.
                      MeshCase{"tensorwise", 2, {"model.n_kv_heads=2"}},
                      // Full activation checkpointing runs each block's forward, collectives
                      // included, once more before its backward.
                      MeshCase{"tensorwise", 2, {"train.activation_checkpointing=full"}},
                      // bf16 activations: each rank's partial sums rounded to bf16 before the
                      // ranks add them (one rounding more than one process makes).
                      MeshCase{"tensorwise", 2, {"train.compute_dtype=bf16"}},
                      MeshCase{"tensorwise", 2, {"train.compute_dtype=bf16"}, 2},
                      // 128-element blocks: each rank's heads and columns whole blocks.
                      // The wider model's fp8 rounding flips grow faster: 5 steps.
                      MeshCase{"blockwise", 2, {"model.dim=256", "model.n_heads=2", "model.ffn_dim=512", "train.steps=5"}},
                      MeshCase{"none", 2, {"model.dim=256", "model.n_heads=2", "model.ffn_dim=512"}},
                      // A 2 x 2 mesh: FSDP over the data-parallel pairs, each rank's tensor-parallel
                      // part sharded across its pair.
                      MeshCase{"none", 2, {}, 2}, MeshCase{"tensorwise", 2, {}, 2}, MeshCase{"delayed", 2, {}, 2},
                      MeshCase{"tensorwise", 2, {"train.activation_checkpointing=full"}, 2},
                      // Sequence parallelism: the norms on each rank's tokens, the normed tokens
                      // all-gathered (as fp8 codes under tensorwise), the row-parallel outputs
                      // reduce-scattered.
                      MeshCase{"none", 2, {"parallel.sequence=true"}}, MeshCase{"tensorwise", 2, {"parallel.sequence=true"}},
                      MeshCase{"delayed", 2, {"parallel.sequence=true"}}, MeshCase{"rowwise", 2, {"parallel.sequence=true"}},
                      MeshCase{"tensorwise", 4, {"parallel.sequence=true"}},
                      MeshCase{"tensorwise", 2, {"parallel.sequence=true", "train.compute_dtype=bf16"}},
                      MeshCase{"tensorwise", 2, {"parallel.sequence=true"}, 2},
                      // Full checkpointing runs each block's forward, gathers included, again.
                      MeshCase{"tensorwise", 2, {"parallel.sequence=true", "train.activation_checkpointing=full"}},
                      // Without checkpointing a block keeps its normed tokens where a backward
                      // reads them (rowwise_with_gw_hp's grad_weight GEMMs), gathered again then;
                      // w3 in high precision beside w1's fp8 gather reads them too.
                      MeshCase{"rowwise_with_gw_hp", 2, {"parallel.sequence=true"}},
                      MeshCase{"tensorwise", 2, {"parallel.sequence=true", "fp8.exclude=[output, '*.w3']"}},
                      // Selective checkpointing gathers the normed tokens again; none and
                      // rowwise_with_gw_hp read them in high precision in the backward.
                      MeshCase{"none", 2, {"parallel.sequence=true", "train.activation_checkpointing=selective"}},
                      MeshCase{"tensorwise", 2, {"parallel.sequence=true", "train.activation_checkpointing=selective"}},
                      MeshCase{"rowwise_with_gw_hp", 2,
                               {"parallel.sequence=true", "train.activation_checkpointing=selective"}},
                      // Tied embeddings: the embedding's backward reads every token's gradient,
                      // so the shared weight's gradient is whole on each rank, like the output
                      // projection's.
                      MeshCase{"tensorwise", 2, {"model.tie_embeddings=true"}},
                      MeshCase{"none", 2, {"parallel.sequence=true", "model.tie_embeddings=true"}},
                      MeshCase{"tensorwise", 2, {"parallel.sequence=true", "model.tie_embeddings=true"}, 2},
                      // FSDP's fp8 all-gather beside tensor parallelism: per-tensor scales
                      // reduced across both axes; 128x128 blocks whole on one rank.
                      MeshCase{"tensorwise", 2, {"fp8.all_gather_fp8=true"}, 2},
                      MeshCase{"delayed", 2, {"fp8.all_gather_fp8=true"}, 2},
                      // Per row and per column: the amaxes laid over the whole weights.
                      MeshCase{"rowwise", 2, {"fp8.all_gather_fp8=true"}, 2},
                      MeshCase{"rowwise_with_gw_hp", 2, {"fp8.all_gather_fp8=true"}, 2},
                      MeshCase{"blockwise", 2,
                               {"model.dim=256", "model.n_heads=2", "model.ffn_dim=512", "train.steps=5",
                                "fp8.all_gather_fp8=true"},
                               2}),
    [](const auto& info) {
      const MeshCase& c = info.param;
      std::string name = c.data > 1 ? absl::StrCat(c.recipe, "_", c.data, "x", c.tensor, "_mesh")
                                    : absl::StrCat(c.recipe, "_", c.tensor, "_ranks");
      for (const std::string& e : c.extra) {
        if (e.rfind("train.grad_accum", 0) == 0) name += "_grad_accum";
        if (e.rfind("model.n_kv_heads", 0) == 0) name += "_gqa";
        if (e == "train.activation_checkpointing=full") name += "_full_checkpointing";
        if (e == "train.activation_checkpointing=selective") name += "_selective_checkpointing";
        if (e == "model.tie_embeddings=true") name += "_tied";
        if (e.rfind("fp8.exclude", 0) == 0) name += "_w3_high_precision";
        if (e == "model.dim=256") name += "_dim_256";
        if (e == "train.compute_dtype=bf16") name += "_bf16";
        if (e == "fp8.all_gather_fp8=true") name += "_fp8_gather";
        if (e == "parallel.sequence=true") name += "_sequence";
      }
      return name;
    });

// The first block's attention casts at step 1 see the one process's tensors bit for bit
// (its weights as initialised; the embedding, norm and per-head attention have no sum to
// reorder), so each rank's scales equal the one process's exactly: a rank's part of a split
// tensor, the row-parallel wo's input and every column-parallel weight, is scaled with the
// whole tensor's amax. Beside data parallelism the activations are each data-parallel
// rank's share of the batch: the weights' casts alone compare.
TEST_P(Recipes, ScaleSplitTensorsWithTheWholeTensorsAmax) {
  const MeshCase& c = GetParam();
  if (std::string(c.recipe) == "none") GTEST_SKIP() << "no fp8 casts";
  // A block's scale covers 128 elements that lie on one rank; a rank reports the largest
  // over its own blocks.
  if (std::string(c.recipe) == "blockwise") GTEST_SKIP() << "block scales are each rank's own";
  std::vector<std::string> extra = c.extra;
  extra.push_back(absl::StrCat("fp8.recipe=", c.recipe));
  extra.push_back("train.steps=1");
  extra.push_back("train.warmup_steps=0");
  const v1::JobSpec spec = job(extra, c.tensor, c.data);
  const auto one = single(spec);
  const auto split = ranks(spec);
  ASSERT_TRUE(all_ok(one));
  ASSERT_TRUE(all_ok(split));
  int compared = 0;
  for (const CastRecord& want : one[0].casts) {
    if (want.layer.rfind("layers.0.attention.", 0) != 0 || want.tensor == "grad_output") continue;
    if (c.data > 1 && want.tensor != "weight") continue;
    for (const RankOutcome& r : split) {
      for (const CastRecord& got : r.casts) {
        if (got.step != want.step || got.layer != want.layer || got.tensor != want.tensor) continue;
        EXPECT_EQ(got.amax, want.amax) << got.layer << " " << got.tensor;
        EXPECT_EQ(got.scale, want.scale) << got.layer << " " << got.tensor;
        ++compared;
      }
    }
  }
  // wq, wk, wv, wo: input and weight, on every rank.
  EXPECT_EQ(compared, (c.data > 1 ? 4 : 8) * c.tensor * c.data);
}

// A 2 x 2 mesh against FSDP alone over its 2 data-parallel ranks: the same batches on the
// same data-parallel ranks, so the same per-rank activation scales; only the order of the
// tensor-parallel sums differs, which moves the weights by fp32's last bits. Scales that are
// powers of 2 (the rowwise recipes', and tensorwise's with fp8.power_of_2_scales) do not move
// with them, so the runs agree as closely as in high precision. (Other scales move by an ulp
// and flip codes near rounding boundaries: the tolerance of the tests above.)
TEST_F(TensorParallelTrainingTest, AMeshMatchesFsdpOverItsDataParallelRanks) {
  for (const char* recipe : {"none", "tensorwise", "rowwise"}) {
    SCOPED_TRACE(recipe);
    const v1::JobSpec mesh = job({absl::StrCat("fp8.recipe=", recipe), "fp8.power_of_2_scales=true"}, 2, 2);
    v1::JobSpec fsdp = mesh;
    fsdp.mutable_parallel()->set_tensor(1);
    fsdp.mutable_resources()->set_world_size(2);
    const auto split = ranks(mesh);
    const auto sharded = ranks(fsdp);
    ASSERT_TRUE(all_ok(split));
    ASSERT_TRUE(all_ok(sharded));
    expect_close(sharded[0], split[0], kHighPrecisionStepTolerance);
  }
}

// FSDP's fp8 all-gather beside tensor parallelism changes the bytes on the wire, never the
// training: each rank casts its shard of its part with the whole weight's scales, the bits
// its layer would have cast from the gathered fp32 weight.
TEST_F(TensorParallelTrainingTest, AMeshGathersInFp8BitForBitAsInFp32) {
  for (const char* recipe : {"tensorwise", "delayed", "rowwise", "rowwise_with_gw_hp"}) {
    SCOPED_TRACE(recipe);
    const std::string r = absl::StrCat("fp8.recipe=", recipe);
    const auto fp8 = ranks(job({r, "fp8.all_gather_fp8=true"}, 2, 2));
    const auto fp32 = ranks(job({r, "fp8.all_gather_fp8=false"}, 2, 2));
    ASSERT_TRUE(all_ok(fp8));
    ASSERT_TRUE(all_ok(fp32));
    expect_bit_equal(fp32[0], fp8[0]);
    EXPECT_GT(fp8[0].steps.back().all_gather_fp8_bytes, 0);
    EXPECT_LT(fp8[0].steps.back().all_gather_f32_bytes, fp32[0].steps.back().all_gather_f32_bytes);
  }
}

// Sequence parallelism's all-gather of the normed tokens moves one byte an element where
// the column-parallel layers cast their input per tensor: each of the two gathers a block
// moves every token's dim values, in codes; the rest (none's values, the gradients, the
// final norm's output) travel as they are.
TEST_F(TensorParallelTrainingTest, SequenceParallelismGathersTheNormedTokensAsFp8Codes) {
  const v1::JobSpec spec = job({"fp8.recipe=tensorwise", "parallel.sequence=true", "train.steps=2", "train.warmup_steps=0"}, 2);
  const auto outcome = ranks(spec);
  ASSERT_TRUE(all_ok(outcome));
  const v1::ModelSpec& m = spec.model();
  const double tokens = static_cast<double>(spec.train().batch_size() * spec.data().seq_len());
  for (const RankOutcome& r : outcome) {
    EXPECT_EQ(r.steps.back().sequence_gather_fp8_bytes, 2.0 * m.n_layers() * tokens * m.dim());
  }
  const auto none = ranks(job({"fp8.recipe=none", "parallel.sequence=true", "train.steps=2", "train.warmup_steps=0"}, 2));
  ASSERT_TRUE(all_ok(none));
  EXPECT_EQ(none[0].steps.back().sequence_gather_fp8_bytes, 0);
  EXPECT_GT(none[0].steps.back().sequence_gather_bytes, outcome[0].steps.back().sequence_gather_bytes);
}

// A tensor-parallel run stopped after a checkpoint and resumed gives the bits of the run
// that never stopped: the checkpoint holds the whole model (rank 0 writes it from every
// rank's parts), and each rank cuts its part again.
TEST_F(TensorParallelTrainingTest, CheckpointAndResumeGiveTheStraightRunsBits) {
  struct Case {
    const char* recipe;
    int data;  // 2: a 2 x 2 mesh, FSDP's shards gathered for the checkpoint and cut again
  };
  for (const Case c : {Case{"tensorwise", 1}, Case{"delayed", 1}, Case{"delayed", 2}}) {
    const std::string name = absl::StrCat(c.recipe, "-", c.data);
    SCOPED_TRACE(name);
    const std::string r = absl::StrCat("fp8.recipe=", c.recipe);
    const auto straight = ranks(job({r, "checkpoint.dir=" + (dir_.path() / name / "straight").string()}, 2, c.data));
    const v1::JobSpec spec = job({r, "checkpoint.dir=" + (dir_.path() / name / "stopped").string()}, 2, c.data);
    RunOptions first;
    first.stop_after_step = 5;
    const auto stopped = ranks(spec, first);
    RunOptions second;
    second.resume = true;
    const auto resumed = ranks(spec, second);
    ASSERT_TRUE(all_ok(straight));
    ASSERT_TRUE(all_ok(stopped));
    ASSERT_TRUE(all_ok(resumed));
    for (const RankOutcome& rank : resumed) {
      ASSERT_EQ(rank.steps.size(), 5u);
      EXPECT_EQ(rank.steps.front().step, 6);
      for (size_t i = 0; i < 5; ++i) {
        EXPECT_EQ(rank.steps[i].loss, straight[0].steps[i + 5].loss) << "step " << rank.steps[i].step;
        EXPECT_EQ(rank.steps[i].grad_norm, straight[0].steps[i + 5].grad_norm) << "step " << rank.steps[i].step;
      }
    }
  }
}

// The checkpoint is one process's: a single process resumes from a tensor-parallel one, and
// tensor-parallel ranks from a single process's, each continuing the run as it would have
// gone on (within the tolerance of the two arithmetic orders).
TEST_F(TensorParallelTrainingTest, CheckpointsMoveBetweenOneProcessAndTensorParallelRanks) {
  const std::string r = "fp8.recipe=tensorwise";
  const auto straight = ranks(job({r}, 2));
  ASSERT_TRUE(all_ok(straight));
  for (const bool from_tensor_parallel : {true, false}) {
    SCOPED_TRACE(from_tensor_parallel ? "tensor parallel, then one process" : "one process, then tensor parallel");
    const std::string dir = "checkpoint.dir=" + (dir_.path() / (from_tensor_parallel ? "from-tp" : "from-one")).string();
    const v1::JobSpec spec = job({r, dir}, 2);
    RunOptions first;
    first.stop_after_step = 5;
    const auto stopped = from_tensor_parallel ? ranks(spec, first) : [&] {
      v1::JobSpec one = spec;
      one.mutable_parallel()->set_tensor(1);
      one.mutable_resources()->set_world_size(1);
      first.world_size = 0;
      return run_ranks(one, first, dir_.path());
    }();
    ASSERT_TRUE(all_ok(stopped));
    RunOptions second;
    second.resume = true;
    const auto resumed = from_tensor_parallel ? [&] {
      v1::JobSpec one = spec;
      one.mutable_parallel()->set_tensor(1);
      one.mutable_resources()->set_world_size(1);
      second.world_size = 0;
      return run_ranks(one, second, dir_.path());
    }() : ranks(spec, second);
    ASSERT_TRUE(all_ok(resumed));
    ASSERT_EQ(resumed[0].steps.size(), 5u);
    EXPECT_EQ(resumed[0].steps.front().step, 6);
    for (size_t i = 0; i < 5; ++i) {
      const double want = straight[0].steps[i + 5].loss, got = resumed[0].steps[i].loss;
      EXPECT_LE(std::abs(got - want) / want, kFp8StepTolerance) << "step " << resumed[0].steps[i].step;
    }
  }
}

// A rank that dies takes the others down within the collective timeout, naming it: its
// tensor-parallel peers at their next all-reduce, and under a 2 x 2 mesh the other
// tensor-parallel pair through FSDP's group (where the dead rank is rank 0 of its pair's
// data-parallel group: world rank 1 is data-parallel rank 0 of tensor-parallel rank 1).
TEST_F(TensorParallelTrainingTest, AKilledRankFailsEveryOtherRankWithinTheTimeout) {
  for (const int data : {1, 2}) {
    SCOPED_TRACE(absl::StrCat(data, " data-parallel groups"));
    RunOptions o;
    o.timeout_seconds = 10;
    o.kill_rank = 1;
    o.kill_at_step = 3;
    o.deadline_seconds = 60;
    const auto outcome = ranks(job({"fp8.recipe=tensorwise"}, 2, data), o);
    ASSERT_EQ(outcome.size(), static_cast<size_t>(2 * data));
    EXPECT_EQ(outcome[1].signal, SIGKILL);
    for (size_t k = 0; k < outcome.size(); ++k) {
      if (k == 1) continue;
      const RankOutcome& survivor = outcome[k];
      EXPECT_TRUE(survivor.exited) << "rank " << k << " did not exit on its own";
      EXPECT_EQ(survivor.exit_code, 1) << "rank " << k;
      EXPECT_NE(survivor.error.find("lost rank"), std::string::npos) << "rank " << k << ": " << survivor.error;
      EXPECT_LT(survivor.seconds, o.timeout_seconds + 20) << "rank " << k;
    }
    // Its tensor-parallel peer names the group by the job's ranks.
    EXPECT_NE(outcome[0].error.find("tensor-parallel group of the job's ranks 0..1"), std::string::npos)
        << outcome[0].error;
  }
}

// A rank that stops answering fails its tensor-parallel peer within
// train.collective_timeout_seconds, which both of a mesh's groups wait, however long the
// groups' own timeout is.
TEST_F(TensorParallelTrainingTest, AStalledRankFailsItsPeerWithinTheJobsCollectiveTimeout) {
  RunOptions o;
  o.timeout_seconds = 120;
  o.stall_rank = 1;
  o.stall_at_step = 4;
  o.deadline_seconds = 200;
  const auto outcome = ranks(job({"fp8.recipe=tensorwise", "train.collective_timeout_seconds=2"}, 2, 2), o);
  ASSERT_EQ(outcome.size(), 4u);
  const RankOutcome& peer = outcome[0];
  EXPECT_TRUE(peer.exited) << "rank 0 did not exit on its own";
  EXPECT_EQ(peer.exit_code, 1);
  EXPECT_NE(peer.error.find("did not answer within 2s"), std::string::npos) << peer.error;
  EXPECT_LT(peer.seconds, 60) << peer.error;
}

// A stop that reaches one rank stops both after the same step, as under FSDP.
TEST_F(TensorParallelTrainingTest, AStopOnOneRankStopsBothAfterTheSameStep) {
  RunOptions o;
  o.stop_rank = 1;
  o.stop_at_step = 3;
  const auto outcome = ranks(job({"fp8.recipe=tensorwise"}, 2), o);
  ASSERT_TRUE(all_ok(outcome));
  for (const RankOutcome& r : outcome) {
    ASSERT_FALSE(r.steps.empty());
    EXPECT_EQ(r.steps.back().step, 4);  // step 3's vote, read in step 4
  }
  expect_bit_equal(outcome[0], outcome[1]);
}

// Rank 0 writes the checkpoint, gathering each record as it writes it; a write that fails
// still takes part in the gathers the others make, so every rank of a 2 x 2 mesh fails at
// once, rank 0 naming what failed, none waiting out the collective timeout.
TEST_F(TensorParallelTrainingTest, AFailedCheckpointWriteFailsEveryRankAtOnce) {
  const std::filesystem::path file = dir_.path() / "a-file";
  std::ofstream(file) << "not a directory\n";
  const auto outcome = ranks(job({"fp8.recipe=tensorwise", "train.steps=4", "checkpoint.every=2",
                                  "train.collective_timeout_seconds=60", "checkpoint.dir=" + (file / "ckpt").string()},
                                 2, 2));
  ASSERT_EQ(outcome.size(), 4u);
  EXPECT_FALSE(outcome[0].ok);
  EXPECT_NE(outcome[0].error.find("Not a directory"), std::string::npos) << outcome[0].error;
  for (size_t k = 0; k < outcome.size(); ++k) {
    EXPECT_FALSE(outcome[k].ok);
    if (k > 0) {
      EXPECT_NE(outcome[k].error.find("writing checkpoint step 2"), std::string::npos) << outcome[k].error;
    }
    EXPECT_LT(outcome[k].seconds, 30);
  }
}

// The engine refuses what it cannot split, whatever the job loader let through.
TEST_F(TensorParallelTrainingTest, TheTrainerRefusesAModelItCannotSplit) {
  v1::JobSpec spec = job({"fp8.recipe=none"}, 2);
  spec.mutable_model()->set_n_heads(3);
  spec.mutable_model()->set_n_kv_heads(3);
  spec.mutable_model()->set_dim(48);
  const auto outcome = ranks(spec);
  ASSERT_EQ(outcome.size(), 2u);
  // Both fail; one may see its peer leave before it got as far itself.
  EXPECT_FALSE(outcome[0].ok);
  EXPECT_FALSE(outcome[1].ok);
  const std::string said = "must each divide by 2 tensor-parallel ranks";
  EXPECT_TRUE(outcome[0].error.find(said) != std::string::npos || outcome[1].error.find(said) != std::string::npos)
      << outcome[0].error << " | " << outcome[1].error;
}

}  // namespace
}  // namespace fp8::engine::testing
