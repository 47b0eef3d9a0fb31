// A whole job through the control plane on GPUs: a real fp8-coordinator, fp8-worker
// daemons offering cuda:N, and fp8-train ranks training on them (NCCL between two).
// Skips, saying why, where no GPU is present.
#include <cmath>

#include "fp8/fp8.h"
#include "gtest/gtest.h"
#include "tests/system/control_plane.h"

#if defined(FP8_HAVE_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace fp8::system_test {
namespace {

constexpr std::chrono::seconds kJobLimit{300};

int gpu_count() {
#if defined(FP8_HAVE_CUDA)
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
#else
  return 0;
#endif
}

bool final(const v1::Job& j) {
  return j.state() == v1::Job::SUCCEEDED || j.state() == v1::Job::FAILED || j.state() == v1::Job::CANCELLED;
}

TEST(CudaJobTest, OneRankJobOnAGpuWorkerRunsToSuccess) {
  if (gpu_count() < 1) GTEST_SKIP() << "no CUDA GPU on this machine";
  ControlPlane cp;
  ASSERT_NO_FATAL_FAILURE(cp.start_coordinator());
  cp.start_worker("cuda:0");
  ControlPlane::JobOptions o;
  o.name = "gpu";
  o.world_size = 1;
  o.device = "cuda";
  v1::Job job;
  ASSERT_TRUE(cp.submit(cp.spec(o), &job).ok());
  const v1::Job done = cp.wait_for(job.id(), final, kJobLimit);
  ASSERT_EQ(done.state(), v1::Job::SUCCEEDED) << done.DebugString() << cp.logs();
  EXPECT_EQ(done.latest_progress().step(), o.steps);
  EXPECT_TRUE(std::isfinite(done.latest_progress().loss()));
  EXPECT_LT(done.latest_progress().loss(), 5.0) << "a byte-level model starts near ln 256 = 5.55";
  EXPECT_GT(done.latest_progress().memory().peak_bytes(), 0);
  EXPECT_EQ(done.last_checkpoint_step(), o.steps);
}

TEST(CudaJobTest, CpuJobsDoNotLandOnGpuWorkers) {
  if (gpu_count() < 1) GTEST_SKIP() << "no CUDA GPU on this machine";
  ControlPlane cp;
  ASSERT_NO_FATAL_FAILURE(cp.start_coordinator());
  cp.start_worker("cuda:0");
  ControlPlane::JobOptions o;
  o.name = "cpu-job";
  o.world_size = 1;
  v1::Job job;
  ASSERT_TRUE(cp.submit(cp.spec(o), &job).ok());
  const v1::Job waiting = cp.wait_for(job.id(), final, std::chrono::seconds(5));
  EXPECT_EQ(waiting.state(), v1::Job::QUEUED) << waiting.DebugString();
}

TEST(CudaJobTest, TwoRankJobOverNcclRunsToSuccess) {
  if (gpu_count() < 2) GTEST_SKIP() << "needs 2 CUDA GPUs, this machine has " << gpu_count();
  ControlPlane cp;
  ASSERT_NO_FATAL_FAILURE(cp.start_coordinator());
  cp.start_worker("cuda:0");
  cp.start_worker("cuda:1");
  ControlPlane::JobOptions o;
  o.name = "gpu2";
  o.world_size = 2;
  o.device = "cuda";
  v1::Job job;
  ASSERT_TRUE(cp.submit(cp.spec(o), &job).ok());
  const v1::Job done = cp.wait_for(job.id(), final, kJobLimit);
  ASSERT_EQ(done.state(), v1::Job::SUCCEEDED) << done.DebugString() << cp.logs();
  EXPECT_GT(done.latest_progress().communication().all_gather_fp8_bytes(), 0);
}

}  // namespace
}  // namespace fp8::system_test
