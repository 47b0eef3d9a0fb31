// Loss parity: the example job (examples/jobs/tiny-cpu.yaml: a byte-level Llama, 64 wide,
// 2 blocks, on the King James Bible) trained 300 steps with each fp8 recipe ends within 3%
// of the high-precision baseline's training loss, and every run's loss falls by more than
// half from its start (ln 256 ≈ 5.55 for an untrained byte model).
//
// "Ends" is the mean over the last 25 steps, so that one noisy batch cannot decide it, and
// the batch is 16 sequences rather than the example's 8: at 8 the runs' own noise (two
// init seeds move a recipe by ±2%) is as large as the bar, at 16 the recipes land within
// 1% of the baseline for both seeds tried. The corpus comes from scripts/install_corpus.sh
// (scripts/test.sh runs it).
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/engine/train/train_test_util.h"
#include "worker/engine/train/trainer.h"

namespace fp8::engine::testing {
namespace {

constexpr int64_t kSteps = 300;
constexpr size_t kTail = 25;

struct RunResult {
  double first_loss = 0;
  double final_loss = 0;  // mean over the last kTail steps
  double val_loss = 0;
};

RunResult train(const std::string& recipe, const std::filesystem::path& checkpoints,
                const std::string& compute_dtype = "fp32", const std::vector<std::string>& more = {}) {
  std::vector<std::string> overrides = {"fp8.recipe=" + recipe,
                                        absl::StrCat("train.steps=", kSteps),
                                        "train.batch_size=16",
                                        "train.log_every=1",
                                        "train.eval_every=300",
                                        "checkpoint.dir=" + checkpoints.string(),
                                        "checkpoint.every=0",
                                        "train.compute_dtype=" + compute_dtype};
  overrides.insert(overrides.end(), more.begin(), more.end());
  absl::StatusOr<v1::JobSpec> spec = jobspec::load_job_spec_file(FP8_EXAMPLE_JOB, overrides);
  EXPECT_TRUE(spec.ok()) << spec.status();
  if (!spec.ok()) return {};
  if (!std::filesystem::exists(spec->data().path())) {
    ADD_FAILURE() << "no corpus at " << spec->data().path() << ": run scripts/install_corpus.sh";
    return {};
  }
  absl::StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::create(*spec, Device::cpu());
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  if (!trainer.ok()) return {};
  RecordingObserver log;
  absl::StatusOr<TrainSummary> summary = (*trainer)->run(log);
  EXPECT_TRUE(summary.ok()) << summary.status();
  if (!summary.ok() || log.steps.size() != static_cast<size_t>(kSteps)) return {};
  RunResult r;
  r.first_loss = log.steps.front().loss;
  double tail = 0;
  for (size_t i = log.steps.size() - kTail; i < log.steps.size(); ++i) tail += log.steps[i].loss;
  r.final_loss = tail / kTail;
  r.val_loss = summary->last_val_loss.value_or(NAN);
  return r;
}

TEST(LossParity, EveryRecipeEndsWithinThreePercentOfTheHighPrecisionBaseline) {
  TempDir tmp("parity");
  const RunResult none = train("none", tmp.path() / "none");
  std::printf("| recipe             | first loss | final loss (mean of last %zu) | vs none | val loss |\n", kTail);
  std::printf("| none               | %10.4f | %28.4f | %7s | %8.4f |\n", none.first_loss, none.final_loss, "-",
              none.val_loss);
  EXPECT_LT(none.final_loss, 0.5 * none.first_loss);
  for (const char* recipe : {"tensorwise", "rowwise", "rowwise_with_gw_hp", "delayed"}) {
    const RunResult r = train(recipe, tmp.path() / recipe);
    const double relative = (r.final_loss - none.final_loss) / none.final_loss;
    std::printf("| %-18s | %10.4f | %28.4f | %+6.2f%% | %8.4f |\n", recipe, r.first_loss, r.final_loss,
                100 * relative, r.val_loss);
    EXPECT_LT(std::fabs(relative), 0.03) << recipe << " ends at " << r.final_loss << ", none at " << none.final_loss;
    EXPECT_LT(r.final_loss, 0.5 * r.first_loss) << recipe << ": the loss must fall by more than half";
  }
  // Mixed precision: bf16 activations, fp32 master weights, against the fp32 baseline.
  for (const char* recipe : {"none", "tensorwise", "rowwise"}) {
    const RunResult r = train(recipe, tmp.path() / absl::StrCat(recipe, "-bf16"), "bf16");
    const double relative = (r.final_loss - none.final_loss) / none.final_loss;
    std::printf("| %-13s bf16 | %10.4f | %28.4f | %+6.2f%% | %8.4f |\n", recipe, r.first_loss, r.final_loss,
                100 * relative, r.val_loss);
    EXPECT_LT(std::fabs(relative), 0.03) << recipe << " with bf16 activations ends at " << r.final_loss
                                         << ", fp32 none at " << none.final_loss;
    EXPECT_LT(r.final_loss, 0.5 * r.first_loss) << recipe << " bf16: the loss must fall by more than half";
  }
}

// blockwise needs every fp8 layer's dimensions and a micro-batch's tokens in multiples of
// 128, so it trains the example's model widened to 128 (2 heads of 64, ffn_dim 384) on
// sequences of 128 (16 x 128 tokens a step), against the baseline of that same model.
TEST(LossParity, BlockwiseEndsWithinThreePercentOfTheBaselineAtBlockSizes) {
  TempDir tmp("parity-block");
  const std::vector<std::string> sizes = {"model.dim=128", "model.n_heads=2", "model.ffn_dim=384",
                                          "model.max_seq_len=128", "data.seq_len=128"};
  const RunResult none = train("none", tmp.path() / "none", "fp32", sizes);
  const RunResult block = train("blockwise", tmp.path() / "blockwise", "fp32", sizes);
  const double relative = (block.final_loss - none.final_loss) / none.final_loss;
  std::printf("dim 128: none first %.4f final %.4f val %.4f; blockwise first %.4f final %.4f (%+.2f%%) val %.4f\n",
              none.first_loss, none.final_loss, none.val_loss, block.first_loss, block.final_loss, 100 * relative,
              block.val_loss);
  EXPECT_LT(none.final_loss, 0.5 * none.first_loss);
  EXPECT_LT(block.final_loss, 0.5 * block.first_loss) << "blockwise: the loss must fall by more than half";
  EXPECT_LT(std::fabs(relative), 0.03) << "blockwise ends at " << block.final_loss << ", none at " << none.final_loss;
}

}  // namespace
}  // namespace fp8::engine::testing
