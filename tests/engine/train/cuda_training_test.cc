// The whole training step on a GPU against the CPU: the tiny model's first 50 steps per fp8
// recipe, the reported peak memory, and a checkpoint written on the GPU resumed on the CPU.
// Skips, saying why, where no GPU is present.
//
// Tolerances (relative loss difference per step; NOT yet calibrated on a GPU — see
// bench/RESULTS.md for what has run): both devices compute in fp32 with the same
// per-element formulas (kernels/ops/model_arith.h, fp8/arith.h); they differ in summation
// order (cuBLASLt vs OpenBLAS GEMMs, block reductions vs chunked loops, attention tiles),
// which moves a loss by ~1e-7 per step and compounds through training. fp8 recipes round
// activations to 3 mantissa bits: a summation-order difference that moves an input across
// a rounding boundary changes that element by a whole fp8 step, so they drift faster.
#include <cmath>
#include <memory>

#include "gtest/gtest.h"
#include "tests/engine/train/train_test_util.h"
#include "worker/engine/train/trainer.h"

namespace fp8::engine::testing {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kSteps = 50;
constexpr double kHighPrecisionTolerance = 1e-4;
constexpr double kFp8Tolerance = 2e-3;
// bf16 activations: an fp32 difference that straddles a bf16 rounding boundary moves that
// activation by a whole bf16 step (2^-8 relative), more often than fp8 inputs flip.
constexpr double kBf16Tolerance = 5e-3;

class CudaTrainingTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<Device>> d = Device::cuda(0);
    if (!d.ok()) GTEST_SKIP() << "no CUDA device: " << d.status().message();
    gpu_ = std::move(*d);
    WriteSyntheticCorpus(corpus_, 200'000);
  }

  v1::JobSpec Job(const std::string& checkpoints, std::vector<std::string> extra = {}) {
    extra.push_back(absl::StrCat("fp8.recipe=", GetParam()));
    extra.push_back(absl::StrCat("train.steps=", kSteps));
    extra.push_back("train.eval_every=25");
    return TinyJob(corpus_, tmp_.path() / checkpoints, extra);
  }

  RecordingObserver Train(const v1::JobSpec& spec, const Device& device) {
    RecordingObserver log;
    absl::StatusOr<std::unique_ptr<Trainer>> t = Trainer::create(spec, device);
    EXPECT_TRUE(t.ok()) << t.status();
    if (!t.ok()) return log;
    absl::StatusOr<TrainSummary> s = (*t)->run(log);
    EXPECT_TRUE(s.ok()) << s.status();
    return log;
  }

  double tolerance() const { return std::string(GetParam()) == "none" ? kHighPrecisionTolerance : kFp8Tolerance; }

  TempDir tmp_{"cuda-train"};
  // Every step's loss on the GPU within `tolerance` (relative) of the CPU's; prints the worst.
  static void ExpectLossesClose(const RecordingObserver& cpu, const RecordingObserver& gpu, double tolerance,
                                const char* what) {
    ASSERT_EQ(cpu.steps.size(), static_cast<size_t>(kSteps));
    ASSERT_EQ(gpu.steps.size(), static_cast<size_t>(kSteps));
    double worst = 0;
    for (size_t i = 0; i < cpu.steps.size(); ++i) {
      const double rel = std::abs(gpu.steps[i].loss - cpu.steps[i].loss) / cpu.steps[i].loss;
      worst = std::max(worst, rel);
      EXPECT_LE(rel, tolerance) << "step " << cpu.steps[i].step << ": cpu " << cpu.steps[i].loss << ", cuda "
                                << gpu.steps[i].loss;
    }
    std::printf("%s %s: worst relative loss difference cuda vs cpu over %lld steps: %.3g\n", GetParam(), what,
                static_cast<long long>(kSteps), worst);
  }

  fs::path corpus_ = tmp_.path() / "corpus.txt";
  std::unique_ptr<Device> gpu_;
};

TEST_P(CudaTrainingTest, FirstFiftyLossesMatchTheCpu) {
  const RecordingObserver cpu = Train(Job("cpu"), Device::cpu());
  const RecordingObserver gpu = Train(Job("gpu"), *gpu_);
  ASSERT_EQ(cpu.steps.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(gpu.steps.size(), static_cast<size_t>(kSteps));
  double worst = 0;
  for (size_t i = 0; i < cpu.steps.size(); ++i) {
    const double rel = std::abs(gpu.steps[i].loss - cpu.steps[i].loss) / cpu.steps[i].loss;
    worst = std::max(worst, rel);
    EXPECT_LE(rel, tolerance()) << "step " << cpu.steps[i].step << ": cpu " << cpu.steps[i].loss << ", cuda "
                                << gpu.steps[i].loss;
    EXPECT_NEAR(gpu.steps[i].grad_norm, cpu.steps[i].grad_norm, 10 * tolerance() * cpu.steps[i].grad_norm)
        << "step " << cpu.steps[i].step;
    if (cpu.steps[i].val_loss) {
      ASSERT_TRUE(gpu.steps[i].val_loss.has_value()) << "step " << cpu.steps[i].step;
      EXPECT_NEAR(*gpu.steps[i].val_loss, *cpu.steps[i].val_loss, 10 * tolerance() * *cpu.steps[i].val_loss);
    }
  }
  std::printf("%s: worst relative loss difference cuda vs cpu over %lld steps: %.3g\n", GetParam(),
              static_cast<long long>(kSteps), worst);
  EXPECT_LT(gpu.steps.back().loss, gpu.steps.front().loss) << "the loss did not fall on the GPU";
}

TEST_P(CudaTrainingTest, Bf16ActivationsMatchTheCpu) {
  const RecordingObserver cpu = Train(Job("cpu-bf16", {"train.compute_dtype=bf16"}), Device::cpu());
  const RecordingObserver gpu = Train(Job("gpu-bf16", {"train.compute_dtype=bf16"}), *gpu_);
  ExpectLossesClose(cpu, gpu, kBf16Tolerance, "bf16");
}

// head_dim 64 with bf16 activations: attention runs on the tensor cores (bf16 P and dS in
// its products, attention_tc_kernels.h), one more rounding per product than the CPU's fp32
// attention; the loss must stay as close as twice the bf16 tolerance (not yet calibrated on
// a GPU).
TEST_P(CudaTrainingTest, Bf16WithTensorCoreAttentionStaysCloseToTheCpu) {
  const std::vector<std::string> wide = {"train.compute_dtype=bf16", "model.dim=128", "model.n_heads=2",
                                         "model.n_kv_heads=1"};
  const RecordingObserver cpu = Train(Job("cpu-tc", wide), Device::cpu());
  const RecordingObserver gpu = Train(Job("gpu-tc", wide), *gpu_);
  ExpectLossesClose(cpu, gpu, 2 * kBf16Tolerance, "bf16, head_dim 64 (tensor-core attention)");
  EXPECT_LT(gpu.steps.back().loss, gpu.steps.front().loss) << "the loss did not fall on the GPU";
}

TEST_P(CudaTrainingTest, ReportsPeakDeviceMemory) {
  const RecordingObserver gpu = Train(Job("gpu"), *gpu_);
  ASSERT_FALSE(gpu.steps.empty());
  const int64_t parameter_bytes = 4 * 36000;  // fp32, a lower bound for the tiny model
  for (const StepReport& r : gpu.steps) {
    // Parameters, gradients and both AdamW moments are in use during a step.
    EXPECT_GT(r.peak_memory_bytes, 4 * parameter_bytes) << "step " << r.step;
    EXPECT_GE(r.reserved_memory_bytes, 0) << "step " << r.step;
  }
}

TEST_P(CudaTrainingTest, AGpuCheckpointResumesOnTheCpu) {
  // 50 steps on the GPU with a checkpoint at 25, then the last 25 resumed from it on the CPU:
  // checkpoints hold host-order fp32 bytes, whatever device wrote them.
  const v1::JobSpec spec = Job("both", {"checkpoint.every=25"});
  RecordingObserver first;
  {
    absl::StatusOr<std::unique_ptr<Trainer>> t = Trainer::create(spec, *gpu_);
    ASSERT_TRUE(t.ok()) << t.status();
    RunControl control;
    control.stop_after_step = 25;
    ASSERT_TRUE((*t)->run(first, control).ok());
  }
  absl::StatusOr<std::unique_ptr<Trainer>> cpu = Trainer::create(spec, Device::cpu());
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  RecordingObserver second;
  absl::StatusOr<int64_t> from = (*cpu)->resume(second);
  ASSERT_TRUE(from.ok()) << from.status();
  EXPECT_EQ(*from, 25);
  ASSERT_TRUE((*cpu)->run(second).ok());
  ASSERT_FALSE(second.steps.empty());
  EXPECT_EQ(second.steps.front().step, 26);
  EXPECT_LT(second.steps.back().loss, first.steps.front().loss);
}

INSTANTIATE_TEST_SUITE_P(Recipes, CudaTrainingTest, ::testing::Values("none", "tensorwise", "rowwise", "delayed"),
                         [](const ::testing::TestParamInfo<const char*>& p) { return std::string(p.param); });

}  // namespace
}  // namespace fp8::engine::testing
