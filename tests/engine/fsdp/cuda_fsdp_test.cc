// FSDP on GPUs over NCCL against single-process GPU training, on real ranks (forked
// processes, rank r on GPU r), mirroring fsdp_training_test.cc's CPU cases. Skips, saying
// why, where the machine has fewer GPUs than a case needs: the one-rank cases need one GPU,
// the rest two.
//
// What must hold, and why (see fsdp_training_test.cc for the CPU's reasons):
//   - one rank under FSDP (an NCCL group of one) equals one process bit for bit;
//   - fp8 all-gather on and off train bit for bit identically;
//   - two ranks on the same global batch as one process agree within the CPU's tolerances
//     (kFp8StepTolerance, kHighPrecisionStepTolerance): per-rank activation scales and
//     another summation order, nothing device-specific.
#include <cmath>

#include "gtest/gtest.h"
#include "tests/engine/fsdp/rank_harness.h"
#include "tests/engine/train/train_test_util.h"

namespace fp8::engine::testing {
namespace {

constexpr int kSteps = 10;
constexpr double kFp8StepTolerance = 5e-4;
constexpr double kHighPrecisionStepTolerance = 1e-6;

// Every case with both layouts of FSDP's collectives (fsdp_model.h): one packed collective
// a unit, and a collective a parameter grouped in one NCCL launch.
class CudaFsdpTest : public ::testing::TestWithParam<fsdp::UnitCollectives> {
 protected:
  void SetUp() override {
    corpus_ = dir_.path() / "corpus.txt";
    write_synthetic_corpus(corpus_, 200000);
  }
  // Empty when the machine has n GPUs, else why the test skips.
  static std::string missing_gpus(int n) {
    const int have = cuda_device_count();
    return have >= n ? "" : absl::StrCat("needs ", n, " CUDA GPU(s), this machine has ", have);
  }
  v1::JobSpec job(std::vector<std::string> extra) {
    extra.push_back(absl::StrCat("train.steps=", kSteps));
    extra.push_back("train.eval_every=0");
    v1::JobSpec spec = tiny_job(corpus_, dir_.path() / "unused", extra);
    spec.mutable_checkpoint()->clear_dir();
    return spec;
  }
  std::vector<RankOutcome> train_ranks(const v1::JobSpec& spec, int world, bool nccl_host_wait = false) {
    RunOptions o;
    o.world_size = world;
    o.cuda = true;
    o.collectives = GetParam();
    o.nccl_host_wait = nccl_host_wait;
    return run_ranks(spec, o, dir_.path());
  }

  TempDir dir_{"cuda-fsdp"};
  std::filesystem::path corpus_;
};
INSTANTIATE_TEST_SUITE_P(Collectives, CudaFsdpTest,
                         ::testing::Values(fsdp::UnitCollectives::kPacked, fsdp::UnitCollectives::kPerParameter),
                         [](const auto& info) {
                           return info.param == fsdp::UnitCollectives::kPacked ? "packed" : "per_parameter";
                         });

void expect_bit_equal(const RankOutcome& a, const RankOutcome& b) {
  ASSERT_EQ(a.steps.size(), b.steps.size());
  for (size_t i = 0; i < a.steps.size(); ++i) {
    EXPECT_EQ(a.steps[i].loss, b.steps[i].loss) << "step " << a.steps[i].step;
    EXPECT_EQ(a.steps[i].grad_norm, b.steps[i].grad_norm) << "step " << a.steps[i].step;
  }
}

TEST_P(CudaFsdpTest, OneRankOverNcclEqualsOneProcessBitForBit) {
  if (const std::string why = missing_gpus(1); !why.empty()) GTEST_SKIP() << why;
  // Every fp8 recipe gathers its weights in fp8 by default (fp8.all_gather_fp8).
  for (const char* recipe : {"tensorwise", "rowwise", "rowwise_with_gw_hp", "delayed"}) {
    SCOPED_TRACE(recipe);
    const v1::JobSpec spec = job({absl::StrCat("fp8.recipe=", recipe)});
    const auto single = train_ranks(spec, 0);
    const auto fsdp = train_ranks(spec, 1);
    ASSERT_TRUE(all_ok(single));
    ASSERT_TRUE(all_ok(fsdp));
    ASSERT_EQ(fsdp[0].steps.size(), static_cast<size_t>(kSteps));
    expect_bit_equal(single[0], fsdp[0]);
  }
}

// The same with NCCL waiting on the host (its queued mode off): which side a failure of the
// test above is on.
TEST_P(CudaFsdpTest, OneRankOverNcclWaitingOnTheHostEqualsOneProcessBitForBit) {
  if (const std::string why = missing_gpus(1); !why.empty()) GTEST_SKIP() << why;
  const v1::JobSpec spec = job({"fp8.recipe=tensorwise"});
  const auto single = train_ranks(spec, 0);
  const auto fsdp = train_ranks(spec, 1, /*nccl_host_wait=*/true);
  ASSERT_TRUE(all_ok(single));
  ASSERT_TRUE(all_ok(fsdp));
  ASSERT_EQ(fsdp[0].steps.size(), static_cast<size_t>(kSteps));
  expect_bit_equal(single[0], fsdp[0]);
}

// fsdp.param_dtype and fsdp.reduce_dtype bf16 on NCCL (a group of one still rounds,
// gathers and reduce-scatters): half the high-precision bytes, the loss near fp32's
// (fsdp_bf16_comm_test.cc's bound), and the same bits when run again.
TEST_P(CudaFsdpTest, Bf16CommunicationHalvesTheBytesAndFollowsTheFp32Loss) {
  if (const std::string why = missing_gpus(1); !why.empty()) GTEST_SKIP() << why;
  const auto fp32 = train_ranks(job({"fp8.recipe=rowwise"}), 1);
  const v1::JobSpec bf16_job = job({"fp8.recipe=rowwise", "fsdp.param_dtype=bf16", "fsdp.reduce_dtype=bf16"});
  const auto bf16 = train_ranks(bf16_job, 1);
  const auto again = train_ranks(bf16_job, 1);
  ASSERT_TRUE(all_ok(fp32));
  ASSERT_TRUE(all_ok(bf16));
  ASSERT_TRUE(all_ok(again));
  ASSERT_EQ(bf16[0].steps.size(), static_cast<size_t>(kSteps));
  expect_bit_equal(bf16[0], again[0]);
  for (size_t i = 0; i < bf16[0].steps.size(); ++i) {
    const StepRecord &f = fp32[0].steps[i], &b = bf16[0].steps[i];
    EXPECT_EQ(b.all_gather_bf16_bytes, f.all_gather_f32_bytes / 2) << "step " << b.step;
    EXPECT_EQ(b.reduce_scatter_bf16_bytes, f.reduce_scatter_f32_bytes / 2) << "step " << b.step;
    EXPECT_LE(std::fabs(b.loss - f.loss), 0.01 * f.loss) << "step " << b.step;
  }
}

TEST_P(CudaFsdpTest, GatheredWeightsAreFreedAfterUse) {
  if (const std::string why = missing_gpus(1); !why.empty()) GTEST_SKIP() << why;
  const auto fsdp = train_ranks(job({"fp8.recipe=tensorwise", "fp8.all_gather_fp8=true"}), 1);
  ASSERT_TRUE(all_ok(fsdp));
  ASSERT_EQ(fsdp[0].steps.size(), static_cast<size_t>(kSteps));
  const double steady = fsdp[0].steps[1].memory_in_use_after;
  for (size_t i = 1; i < fsdp[0].steps.size(); ++i) {
    EXPECT_EQ(fsdp[0].steps[i].memory_in_use_after, steady) << "step " << fsdp[0].steps[i].step;
    EXPECT_GT(fsdp[0].steps[i].peak_memory_bytes, steady) << "step " << fsdp[0].steps[i].step;
  }
}

TEST_P(CudaFsdpTest, Fp8AllGatherEqualsFp32AllGather) {
  if (const std::string why = missing_gpus(2); !why.empty()) GTEST_SKIP() << why;
  for (const char* recipe : {"tensorwise", "delayed", "rowwise", "rowwise_with_gw_hp"}) {
    SCOPED_TRACE(recipe);
    const std::string r = absl::StrCat("fp8.recipe=", recipe);
    const auto on = train_ranks(job({r, "fp8.all_gather_fp8=true"}), 2);
    const auto off = train_ranks(job({r, "fp8.all_gather_fp8=false"}), 2);
    ASSERT_TRUE(all_ok(on));
    ASSERT_TRUE(all_ok(off));
    expect_bit_equal(on[0], off[0]);
    for (const StepRecord& s : on[0].steps) EXPECT_GT(s.all_gather_fp8_bytes, 0) << "step " << s.step;
  }
}

TEST_P(CudaFsdpTest, TwoRanksMatchOneProcessOnTheSameGlobalBatch) {
  if (const std::string why = missing_gpus(2); !why.empty()) GTEST_SKIP() << why;
  for (const char* recipe : {"none", "tensorwise", "rowwise", "delayed"}) {
    SCOPED_TRACE(recipe);
    const std::string r = absl::StrCat("fp8.recipe=", recipe);
    const auto single = train_ranks(job({r, "train.batch_size=4"}), 0);
    const auto fsdp = train_ranks(job({r, "train.batch_size=2"}), 2);
    ASSERT_TRUE(all_ok(single));
    ASSERT_TRUE(all_ok(fsdp));
    ASSERT_EQ(fsdp[0].steps.size(), single[0].steps.size());
    const double tolerance = std::string(recipe) == "none" ? kHighPrecisionStepTolerance : kFp8StepTolerance;
    for (size_t i = 0; i < single[0].steps.size(); ++i) {
      const double rel = std::abs(single[0].steps[i].loss - fsdp[0].steps[i].loss) / single[0].steps[i].loss;
      EXPECT_LE(rel, tolerance) << "step " << single[0].steps[i].step;
    }
    expect_bit_equal(fsdp[0], fsdp[1]);
  }
}

}  // namespace
}  // namespace fp8::engine::testing
