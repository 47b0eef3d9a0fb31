// The memory estimate (common/jobspec/memory_estimate.h) against what training really
// holds: the CPU backend counts every tensor byte in use, and the estimate of a job must
// come within 15% of the most a step had in use, per recipe, compute dtype and activation
// checkpointing mode, for the tiny test model and the example job.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <tuple>

#include "common/jobspec/loader.h"
#include "common/jobspec/memory_estimate.h"
#include "gtest/gtest.h"
#include "tests/engine/train/train_test_util.h"
#include "worker/engine/train/trainer.h"

namespace fp8::engine::testing {
namespace {

constexpr double kTolerance = 0.15;

// The most the CPU backend had in use from the start of training to its end (evaluations
// included), above what it held before the trainer was built.
int64_t measured_peak(const v1::JobSpec& spec) {
  Backend& backend = Device::cpu().backend();
  const int64_t before = backend.memory_stats().allocated;
  absl::StatusOr<std::unique_ptr<Trainer>> t = Trainer::create(spec, Device::cpu());
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) return 0;
  RecordingObserver log;
  const absl::StatusOr<TrainSummary> s = (*t)->run(log);
  EXPECT_TRUE(s.ok()) << s.status();
  return backend.memory_stats().peak_allocated - before;
}

void expect_estimate_close(const v1::JobSpec& spec, const std::string& what) {
  const absl::StatusOr<jobspec::MemoryEstimate> estimate = jobspec::estimate_rank_memory(spec);
  ASSERT_TRUE(estimate.ok()) << estimate.status();
  const int64_t measured = measured_peak(spec);
  ASSERT_GT(measured, 0);
  const double rel = static_cast<double>(estimate->total_bytes() - measured) / static_cast<double>(measured);
  std::printf("%s: estimate %lld, measured %lld (%+.1f%%)\n%s", what.c_str(),
              static_cast<long long>(estimate->total_bytes()), static_cast<long long>(measured), 100 * rel,
              jobspec::format_memory_estimate(*estimate).c_str());
  EXPECT_LE(std::abs(rel), kTolerance) << what << ": estimate " << estimate->total_bytes() << " bytes, measured "
                                       << measured << "\n"
                                       << jobspec::format_memory_estimate(*estimate);
}

// Recipe, compute dtype, activation checkpointing.
using Case = std::tuple<const char*, const char*, const char*>;

class MemoryEstimateTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override { write_synthetic_corpus(corpus_, 200'000); }
  TempDir tmp_{"memory-estimate"};
  std::filesystem::path corpus_ = tmp_.path() / "corpus.txt";
};

// A model a little larger than the other tests' tiny one, so that no part is negligible.
TEST_P(MemoryEstimateTest, IsWithinFifteenPercentOfTheMeasuredPeak) {
  const auto [recipe, dtype, mode] = GetParam();
  const v1::JobSpec spec =
      tiny_job(corpus_, tmp_.path() / "checkpoints",
              {absl::StrCat("fp8.recipe=", recipe), absl::StrCat("train.compute_dtype=", dtype),
               absl::StrCat("train.activation_checkpointing=", mode), "model.dim=64", "model.n_layers=4",
               "model.n_heads=4", "train.steps=3", "train.warmup_steps=0", "train.eval_every=2", "train.grad_accum=2", "train.batch_size=8"});
  expect_estimate_close(spec, absl::StrCat(recipe, ", ", dtype, ", ", mode));
}

INSTANTIATE_TEST_SUITE_P(
    Jobs, MemoryEstimateTest,
    ::testing::Values(Case{"none", "fp32", "none"}, Case{"tensorwise", "fp32", "none"},
                      Case{"rowwise", "fp32", "none"}, Case{"rowwise_with_gw_hp", "fp32", "none"},
                      Case{"delayed", "fp32", "none"}, Case{"tensorwise", "fp32", "full"},
                      Case{"tensorwise", "fp32", "selective"}, Case{"none", "bf16", "none"},
                      Case{"tensorwise", "bf16", "full"}, Case{"rowwise", "bf16", "selective"}),
    [](const ::testing::TestParamInfo<Case>& p) {
      return absl::StrCat(std::get<0>(p.param), "_", std::get<1>(p.param), "_", std::get<2>(p.param));
    });

// blockwise needs every fp8 dimension and a micro-batch's tokens to be multiples of 128.
TEST_F(MemoryEstimateTest, BlockwiseIsWithinFifteenPercentOfTheMeasuredPeak) {
  for (const char* mode : {"none", "full"}) {
    const v1::JobSpec spec = tiny_job(
        corpus_, tmp_.path() / absl::StrCat("blockwise-", mode),
        {"fp8.recipe=blockwise", absl::StrCat("train.activation_checkpointing=", mode), "model.dim=128",
         "model.ffn_dim=384", "model.n_layers=2", "model.n_heads=2", "model.max_seq_len=128", "data.seq_len=128",
         "train.batch_size=2", "train.steps=3", "train.warmup_steps=0", "train.eval_every=2"});
    expect_estimate_close(spec, absl::StrCat("blockwise, fp32, ", mode));
  }
}

// The example job as users run it (on the synthetic corpus, a few steps).
TEST(MemoryEstimateExampleTest, TheExampleJobIsWithinFifteenPercent) {
  TempDir tmp("memory-estimate-example");
  write_synthetic_corpus(tmp.path() / "corpus.txt", 200'000);
  for (const char* mode : {"none", "full"}) {
    absl::StatusOr<v1::JobSpec> spec = jobspec::load_job_spec_file(
        FP8_EXAMPLE_JOB, {absl::StrCat("data.path=", (tmp.path() / "corpus.txt").string()), "train.steps=3", "train.warmup_steps=0",
                          absl::StrCat("checkpoint.dir=", (tmp.path() / mode).string()),
                          absl::StrCat("train.activation_checkpointing=", mode)});
    ASSERT_TRUE(spec.ok()) << spec.status();
    expect_estimate_close(*spec, absl::StrCat("tiny-cpu.yaml, ", mode));
  }
}

}  // namespace
}  // namespace fp8::engine::testing
