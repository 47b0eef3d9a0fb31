// The blockwise recipe (1x128 activation tiles, 128x128 weight blocks) trains a tiny Llama
// whose sizes are multiples of 128 on the CPU: the loss falls, every fp8 linear reports its
// six block casts, and a job that is not a multiple of 128 is refused before training.
#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/engine/train/train_test_util.h"
#include "worker/engine/train/trainer.h"

namespace fp8::engine::testing {
namespace {

const std::vector<std::string> kBlockSizes = {
    "model.dim=128",       "model.n_heads=2",     "model.ffn_dim=384", "model.max_seq_len=128",
    "data.seq_len=128",    "train.batch_size=2",  "train.steps=40",    "train.warmup_steps=4",
    "train.eval_every=40", "fp8.recipe=blockwise"};

TEST(BlockwiseTraining, TheLossFallsOnATinyModelOfBlockSizes) {
  TempDir tmp("blockwise");
  write_synthetic_corpus(tmp.path() / "corpus.txt", 200'000);
  const v1::JobSpec spec = tiny_job(tmp.path() / "corpus.txt", tmp.path() / "ckpt", kBlockSizes);
  ASSERT_EQ(spec.fp8().recipe(), v1::Fp8Spec::BLOCKWISE);
  absl::StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::create(spec, Device::cpu());
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  RecordingObserver log;
  absl::StatusOr<TrainSummary> summary = (*trainer)->run(log);
  ASSERT_TRUE(summary.ok()) << summary.status();
  ASSERT_EQ(log.steps.size(), 40u);
  double tail = 0;
  for (size_t i = log.steps.size() - 5; i < log.steps.size(); ++i) tail += log.steps[i].loss;
  tail /= 5;
  std::printf("blockwise: first loss %.4f, mean of the last 5 %.4f\n", log.steps.front().loss, tail);
  EXPECT_TRUE(std::isfinite(tail));
  EXPECT_LT(tail, 0.6 * log.steps.front().loss);
  // The block casts report like any other: dynamic scales never clip.
  ASSERT_FALSE(log.cast_numerics.empty());
  const auto& [step, casts] = log.cast_numerics.back();
  ASSERT_FALSE(casts.empty());
  for (const CastNumericsRecord& c : casts) {
    EXPECT_GT(c.amax, 0.0f) << c.layer << " " << c.tensor;
    EXPECT_LE(c.range_use, 1.0f) << c.layer << " " << c.tensor;
    EXPECT_EQ(c.saturated_ratio, 0.0f) << c.layer << " " << c.tensor;
  }
}

TEST(BlockwiseTraining, AJobNotOfBlockSizesIsRefusedNamingTheFix) {
  TempDir tmp("blockwise-bad");
  // tiny_job's model is 32 wide: load it as written, then ask for blockwise.
  const absl::StatusOr<v1::JobSpec> spec = jobspec::load_job_spec_string(
      "name: t\nmodel: {dim: 32, n_layers: 1, n_heads: 2, max_seq_len: 32}\ndata: {path: c.txt, seq_len: 32}\n"
      "train: {steps: 1, batch_size: 4, lr: 1e-3}\nfp8: {recipe: blockwise}\n",
      "t.yaml");
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find("multiples of 128"), std::string::npos) << spec.status();
}

}  // namespace
}  // namespace fp8::engine::testing
