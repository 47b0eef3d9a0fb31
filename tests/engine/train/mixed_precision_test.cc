// Mixed precision (train.compute_dtype: bf16): bf16 activations between layers with fp32
// master weights, on the CPU device. What must hold: it trains (the loss falls, close to
// fp32's), it repeats bit for bit, and it holds less memory than fp32 activations do.
#include <cmath>

#include "gtest/gtest.h"
#include "tests/engine/train/train_test_util.h"
#include "worker/engine/train/trainer.h"

namespace fp8::engine::testing {
namespace {

class MixedPrecisionTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override { write_synthetic_corpus(corpus_, 200'000); }

  v1::JobSpec job(const std::string& dtype, const std::string& checkpoints) {
    return tiny_job(corpus_, tmp_.path() / checkpoints,
                   {absl::StrCat("fp8.recipe=", GetParam()), "train.compute_dtype=" + dtype, "train.eval_every=10",
                    "train.batch_size=8"});
  }

  // Each step's report, and the bytes the device holds right after it.
  struct Run {
    RecordingObserver log;
    std::vector<int64_t> in_use_after;
  };
  Run train(const v1::JobSpec& spec) {
    struct Observer final : public TrainObserver {
      explicit Observer(Run& r) : run(r) {}
      void on_step(const StepReport& s) override {
        run.log.on_step(s);
        run.in_use_after.push_back(Device::cpu().backend().memory_stats().allocated);
      }
      Run& run;
    };
    Run run;
    Observer observer(run);
    absl::StatusOr<std::unique_ptr<Trainer>> t = Trainer::create(spec, Device::cpu());
    EXPECT_TRUE(t.ok()) << t.status();
    if (!t.ok()) return run;
    EXPECT_TRUE((*t)->run(observer).ok());
    return run;
  }

  TempDir tmp_{"mixed-precision"};
  std::filesystem::path corpus_ = tmp_.path() / "corpus.txt";
};

TEST_P(MixedPrecisionTest, TrainsCloseToFp32) {
  const Run fp32 = train(job("fp32", "fp32"));
  const Run bf16 = train(job("bf16", "bf16"));
  ASSERT_EQ(fp32.log.steps.size(), bf16.log.steps.size());
  ASSERT_FALSE(bf16.log.steps.empty());
  bool any_difference = false;
  for (size_t i = 0; i < fp32.log.steps.size(); ++i) {
    any_difference |= bf16.log.steps[i].loss != fp32.log.steps[i].loss;
    const double rel = std::abs(bf16.log.steps[i].loss - fp32.log.steps[i].loss) / fp32.log.steps[i].loss;
    // bf16 keeps 8 significant bits: each activation moves by up to 2^-9 relative, which
    // moves the mean loss by far less; over 20 steps of a tiny model it stays within 2%.
    EXPECT_LT(rel, 0.02) << "step " << fp32.log.steps[i].step << ": fp32 " << fp32.log.steps[i].loss << ", bf16 "
                         << bf16.log.steps[i].loss;
  }
  EXPECT_TRUE(any_difference) << "bf16 activations trained exactly like fp32: were they used?";
  EXPECT_LT(bf16.log.steps.back().loss, bf16.log.steps.front().loss - 0.3) << "bf16 did not train";
}

TEST_P(MixedPrecisionTest, RepeatsBitForBit) {
  const Run a = train(job("bf16", "a"));
  const Run b = train(job("bf16", "b"));
  ASSERT_EQ(a.log.steps.size(), b.log.steps.size());
  for (size_t i = 0; i < a.log.steps.size(); ++i) {
    EXPECT_EQ(a.log.steps[i].loss, b.log.steps[i].loss) << "step " << a.log.steps[i].step;
    EXPECT_EQ(a.log.steps[i].grad_norm, b.log.steps[i].grad_norm) << "step " << a.log.steps[i].step;
  }
}

TEST_P(MixedPrecisionTest, HoldsLessMemoryThanFp32Activations) {
  const Run fp32 = train(job("fp32", "fp32"));
  const Run bf16 = train(job("bf16", "bf16"));
  ASSERT_GE(fp32.in_use_after.size(), 2u);
  ASSERT_GE(bf16.in_use_after.size(), 2u);
  // After a step the activation buffers stay allocated for the next one: the same shapes
  // at half the bytes (logits and the loss stay fp32).
  EXPECT_LT(bf16.in_use_after[1], fp32.in_use_after[1]);
  EXPECT_LT(bf16.log.steps[1].peak_memory_bytes, fp32.log.steps[1].peak_memory_bytes);
}

INSTANTIATE_TEST_SUITE_P(Recipes, MixedPrecisionTest, ::testing::Values("none", "tensorwise", "rowwise", "delayed"),
                         [](const ::testing::TestParamInfo<const char*>& p) { return std::string(p.param); });

}  // namespace
}  // namespace fp8::engine::testing
