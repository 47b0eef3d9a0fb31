// Activation checkpointing (train.activation_checkpointing): a block that keeps less of its
// forward and makes the rest again before its backward trains exactly as one that keeps
// everything (losses, gradient norms, and every checkpoint record, parameters, moments and
// delayed-scaling histories included), and holds less memory by what it no longer keeps.
#include <map>
#include <span>
#include <string>
#include <tuple>

#include "gtest/gtest.h"
#include "tests/engine/train/train_test_util.h"
#include "worker/engine/checkpoint/layout.h"
#include "worker/engine/checkpoint/shard_reader.h"
#include "worker/engine/train/trainer.h"

namespace fp8::engine::testing {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kSteps = 12;

// Every record of a checkpoint shard, as raw bytes by name.
std::map<std::string, std::string> shard_contents(const fs::path& file) {
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

class ActivationCheckpointingTest : public ::testing::Test {
 public:
  struct Run {
    RecordingObserver log;
    std::map<std::string, std::string> last_checkpoint;
  };

 protected:
  void SetUp() override { write_synthetic_corpus(corpus_, 200'000); }
  Run train(const std::string& mode, std::vector<std::string> extra) {
    extra.push_back("train.activation_checkpointing=" + mode);
    extra.push_back(absl::StrCat("train.steps=", kSteps));
    const fs::path dir = tmp_.path() / absl::StrCat("run", runs_++);
    const v1::JobSpec spec = tiny_job(corpus_, dir, extra);
    Run run;
    absl::StatusOr<std::unique_ptr<Trainer>> t = Trainer::create(spec, Device::cpu());
    EXPECT_TRUE(t.ok()) << t.status();
    if (!t.ok()) return run;
    const absl::StatusOr<TrainSummary> summary = (*t)->run(run.log);
    EXPECT_TRUE(summary.ok()) << summary.status();
    run.last_checkpoint = shard_contents(checkpoint::shard_path(dir, kSteps, 0, 1));
    return run;
  }

  TempDir tmp_{"activation-checkpointing"};
  fs::path corpus_ = tmp_.path() / "corpus.txt";
  int runs_ = 0;
};

void expect_same_training(const char* mode, const ActivationCheckpointingTest::Run& kept,
                        const ActivationCheckpointingTest::Run& recomputed) {
  ASSERT_EQ(kept.log.steps.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(recomputed.log.steps.size(), kept.log.steps.size());
  for (size_t i = 0; i < kept.log.steps.size(); ++i) {
    const StepReport &a = kept.log.steps[i], &b = recomputed.log.steps[i];
    EXPECT_EQ(a.loss, b.loss) << mode << ", step " << a.step;
    EXPECT_EQ(a.grad_norm, b.grad_norm) << mode << ", step " << a.step;
    EXPECT_EQ(a.val_loss, b.val_loss) << mode << ", step " << a.step;
  }
  ASSERT_FALSE(kept.last_checkpoint.empty());
  ASSERT_EQ(kept.last_checkpoint.size(), recomputed.last_checkpoint.size());
  for (const auto& [name, bytes] : kept.last_checkpoint) {
    const auto it = recomputed.last_checkpoint.find(name);
    ASSERT_NE(it, recomputed.last_checkpoint.end()) << mode << ": no record " << name;
    EXPECT_TRUE(it->second == bytes) << mode << ": record " << name << " differs";
  }
}

// Recipe, compute dtype and micro-batches per step.
using Case = std::tuple<const char*, const char*, int>;

class BitForBit : public ActivationCheckpointingTest, public ::testing::WithParamInterface<Case> {};

TEST_P(BitForBit, FullAndSelectiveTrainAsKeepingEverything) {
  const auto [recipe, dtype, grad_accum] = GetParam();
  const std::vector<std::string> extra{absl::StrCat("fp8.recipe=", recipe), absl::StrCat("train.compute_dtype=", dtype),
                                       absl::StrCat("train.grad_accum=", grad_accum)};
  const Run kept = train("none", extra);
  expect_same_training("full", kept, train("full", extra));
  expect_same_training("selective", kept, train("selective", extra));
  // The runs train: a comparison of runs that learned nothing would prove little.
  EXPECT_LT(kept.log.steps.back().loss, kept.log.steps.front().loss - 0.3);
}

INSTANTIATE_TEST_SUITE_P(Recipes, BitForBit,
                         ::testing::Values(Case{"none", "fp32", 1}, Case{"tensorwise", "fp32", 1},
                                           Case{"rowwise", "fp32", 1}, Case{"rowwise_with_gw_hp", "fp32", 1},
                                           Case{"delayed", "fp32", 1}, Case{"delayed", "fp32", 2},
                                           Case{"tensorwise", "bf16", 2}, Case{"rowwise", "bf16", 1}),
                         [](const ::testing::TestParamInfo<Case>& p) {
                           return absl::StrCat(std::get<0>(p.param), "_", std::get<1>(p.param),
                                               std::get<2>(p.param) > 1 ? "_grad_accum" : "");
                         });

// The bytes of one block's activations a mode no longer keeps per block, for the tiny
// job's shapes at fp32: what the peak should fall by, (n_layers - 1) times over, since
// every block but one shares them. Without checkpointing a block keeps its linears' inputs
// (the normed inputs, SwiGLU's product) only where their backward reads them in high
// precision (`inputs_read`: recipe none); otherwise the blocks share them already.
int64_t dropped_per_block(const std::string& mode, bool inputs_read, int64_t m, int64_t dim, int64_t ffn,
                          int64_t heads, int64_t rows, int64_t seq) {
  const int64_t f = sizeof(float);
  const int64_t inv_rms = 2 * m * f;
  const int64_t inputs = inputs_read ? (2 * m * dim + m * ffn) * f : 0;
  if (mode == "selective") return inv_rms + inputs;
  const int64_t qkv_out = 4 * m * dim * f, lse = rows * heads * seq * f, mid = m * dim * f, gate_up = 2 * m * ffn * f;
  return inv_rms + inputs + qkv_out + lse + mid + gate_up;
}

// The bytes of one block's fp8 cast copies under the tensorwise recipe, which `full`
// shares between blocks (float8/cast_copies.h): each linear's input, weight and
// grad_output as stored and transposed, one byte an element; wk and wv take wq's input
// casts and w3 takes w1's. Every projection is dim x dim here (as many kv heads as heads).
int64_t cast_copies_per_block(int64_t m, int64_t dim, int64_t ffn) {
  auto layer = [&](int64_t in, int64_t out, bool own_input) {
    return 2 * ((own_input ? m * in : 0) + out * in + m * out);
  };
  return layer(dim, dim, true) + 2 * layer(dim, dim, false) + layer(dim, dim, true) +  // wq, wk and wv, wo
         layer(dim, ffn, true) + layer(dim, ffn, false) + layer(ffn, dim, true);       // w1, w3, w2
}

class PeakMemory : public ActivationCheckpointingTest, public ::testing::WithParamInterface<const char*> {};

TEST_P(PeakMemory, FallsByWhatTheBlocksNoLongerKeep) {
  constexpr int64_t kLayers = 6, kDim = 32, kFfn = 64, kHeads = 2, kRows = 4, kSeq = 32;
  const std::string recipe = GetParam();
  const std::vector<std::string> extra{"model.n_layers=6", "train.eval_every=0", "fp8.recipe=" + recipe};
  const Run none = train("none", extra), full = train("full", extra), selective = train("selective", extra);
  ASSERT_EQ(none.log.steps.size(), static_cast<size_t>(kSteps));
  const auto peak = [](const Run& r) { return r.log.steps.back().peak_memory_bytes; };
  const int64_t m = kRows * kSeq;
  // tensorwise's backward reads its fp8 copies, none's the inputs themselves.
  const bool inputs_read = recipe == "none";
  const int64_t casts = recipe == "none" ? 0 : cast_copies_per_block(m, kDim, kFfn);
  EXPECT_EQ(peak(none) - peak(full),
            (kLayers - 1) * (dropped_per_block("full", inputs_read, m, kDim, kFfn, kHeads, kRows, kSeq) + casts));
  EXPECT_EQ(peak(none) - peak(selective),
            (kLayers - 1) * dropped_per_block("selective", inputs_read, m, kDim, kFfn, kHeads, kRows, kSeq));
}

INSTANTIATE_TEST_SUITE_P(Recipes, PeakMemory, ::testing::Values("tensorwise", "none"));

TEST_F(ActivationCheckpointingTest, AnUnknownModeIsRefusedNamingTheField) {
  absl::StatusOr<v1::JobSpec> spec = jobspec::load_job_spec_string(
      "name: x\nmodel: {dim: 32}\ntrain: {steps: 1, batch_size: 1, lr: 1, activation_checkpointing: some}\n", "job.yaml");
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find("train.activation_checkpointing"), std::string::npos) << spec.status();
}

}  // namespace
}  // namespace fp8::engine::testing
