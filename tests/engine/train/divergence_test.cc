// A diverging run: the host reads each step's loss and grad norm only when a step reports
// or checkpoints (the steps never wait for them), so the run fails there, naming the first
// step whose values are not finite; the updates of such steps are skipped on the device,
// so the weights stay finite, and no checkpoint is written after the divergence.
#include <cmath>
#include <string>

#include "gtest/gtest.h"
#include "tests/engine/train/train_test_util.h"
#include "worker/engine/checkpoint/layout.h"
#include "worker/engine/train/trainer.h"

namespace fp8::engine::testing {
namespace {

TEST(Divergence, FailsAtTheNextReadNamingTheFirstDivergedStepWithWeightsIntactAndNoCheckpoint) {
  TempDir tmp("divergence");
  const std::filesystem::path corpus = tmp.path() / "corpus.txt", checkpoints = tmp.path() / "checkpoints";
  write_synthetic_corpus(corpus, 200'000);
  // A learning rate that overflows the weights within a step or two.
  const v1::JobSpec spec = tiny_job(corpus, checkpoints,
                                   {"train.lr=1e30", "train.warmup_steps=0", "train.log_every=10",
                                    "train.eval_every=0", "checkpoint.every=4", "train.steps=20"});
  absl::StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::create(spec, Device::cpu());
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  RecordingObserver log;
  const absl::StatusOr<TrainSummary> run = (*trainer)->run(log);
  ASSERT_FALSE(run.ok());
  const std::string message(run.status().message());
  EXPECT_EQ(run.status().code(), absl::StatusCode::kInternal);
  // Step 1 reported (finite); the divergence comes at step 2 or 3, and is read at step 4,
  // whose checkpoint it prevents.
  ASSERT_EQ(log.steps.size(), 1u);
  EXPECT_TRUE(std::isfinite(log.steps[0].loss));
  EXPECT_TRUE(message.find("training diverged at step 2:") != std::string::npos ||
              message.find("training diverged at step 3:") != std::string::npos)
      << message;
  EXPECT_NE(message.find("lower train.lr"), std::string::npos) << message;
  EXPECT_EQ((*trainer)->steps_done(), 4);
  EXPECT_TRUE(log.checkpoints.empty());
  EXPECT_FALSE(std::filesystem::exists(checkpoint::step_directory(checkpoints.string(), 4)));
  // The diverged steps' updates were skipped: every weight is still a number.
  for (const Parameter& p : (*trainer)->trained_parameters().all()) {
    absl::StatusOr<std::vector<float>> values = p.value.download<float>();
    ASSERT_TRUE(values.ok()) << values.status();
    for (float v : *values) ASSERT_TRUE(std::isfinite(v)) << p.name;
  }
}

}  // namespace
}  // namespace fp8::engine::testing
