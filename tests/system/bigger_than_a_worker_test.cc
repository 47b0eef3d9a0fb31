// A model whose training state is several times what any worker offers a rank trains
// through the service anyway: sharded over ranks (FSDP) with full activation checkpointing
// it fits, the coordinator places it by its memory estimate, and a checkpoint of it resumes
// on another world size. Without sharding it is refused at submit, with the numbers.
#include <chrono>
#include <cmath>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/jobspec/loader.h"
#include "gtest/gtest.h"
#include "tests/system/control_plane.h"

namespace fp8::system_test {
namespace {

using std::chrono::seconds;

constexpr seconds kJobLimit{240};
// What each worker offers a rank: less than the job's estimate (fp8ctl submit --dry-run)
// on one rank, with or without checkpointing, and more than its estimate with full
// checkpointing on enough ranks.
constexpr double kWorkerGiB = 0.05;

v1::JobSpec big_job(const ControlPlane& cp, int world_size, const std::string& checkpointing) {
  const std::string yaml = absl::StrCat(
      "name: big\n"
      "model: {dim: 256, n_layers: 8, n_heads: 4, ffn_dim: 704, max_seq_len: 128}\n"
      "data: {path: corpus.txt, seq_len: 128, val_fraction: 0}\n"
      "train: {steps: 100, batch_size: 1, lr: 1e-3, log_every: 1, eval_every: 0, activation_checkpointing: ",
      checkpointing,
      "}\n"
      "checkpoint: {dir: ckpt/big, every: 2, keep: 2}\n"
      "resources: {world_size: ",
      world_size, ", cpus_per_rank: 1}\n");
  const std::filesystem::path file = cp.dir() / "big.yaml";
  std::ofstream(file) << yaml;
  absl::StatusOr<v1::JobSpec> spec = jobspec::load_job_spec_file(file.string());
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : v1::JobSpec();
}

bool final(const v1::Job& j) {
  return j.state() == v1::Job::SUCCEEDED || j.state() == v1::Job::FAILED || j.state() == v1::Job::CANCELLED;
}

TEST(BiggerThanAWorkerTest, TrainsShardedWithFullCheckpointingAndResumesOnAnotherWorldSize) {
  ControlPlane cp;
  ASSERT_NO_FATAL_FAILURE(cp.start_coordinator());
  for (int i = 0; i < 5; ++i) cp.start_worker("cpu", kWorkerGiB);
  ASSERT_TRUE(cp.wait_for_workers(5, seconds(60))) << cp.logs();

  // One rank cannot hold it, even recomputing every block: refused at submit, saying why.
  v1::Job job;
  const grpc::Status refused = cp.submit(big_job(cp, 1, "full"), &job);
  ASSERT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << refused.error_message();
  EXPECT_NE(refused.error_message().find("a rank of this job needs 0.11 GiB"), std::string::npos)
      << refused.error_message();
  EXPECT_NE(refused.error_message().find("the largest cpu worker offers 0.05 GiB"), std::string::npos)
      << refused.error_message();

  // Four ranks with full checkpointing fit: it trains until a checkpoint, then is stopped.
  const grpc::Status submitted = cp.submit(big_job(cp, 4, "full"), &job);
  ASSERT_TRUE(submitted.ok()) << submitted.error_message();
  const v1::Job checkpointed =
      cp.wait_for(job.id(), [](const v1::Job& j) { return j.last_checkpoint_step() >= 2 || final(j); }, kJobLimit);
  ASSERT_EQ(checkpointed.state(), v1::Job::RUNNING) << checkpointed.DebugString() << cp.logs();
  EXPECT_EQ(checkpointed.attempt_history(0).ranks_size(), 4);
  v1::Job out;
  ASSERT_TRUE(cp.cancel(job.id(), &out).ok());

  // The checkpoint of four ranks resumes on five, which the workers hold too, and trains on.
  v1::ResumeJobRequest resume;
  resume.set_job_id(job.id());
  resume.set_world_size(5);
  auto ctx = with_token(cp.admin_token(), seconds(30));
  const grpc::Status resumed = cp.job_stub()->ResumeJob(ctx.get(), resume, &out);
  ASSERT_TRUE(resumed.ok()) << resumed.error_message();
  const v1::Job training = cp.wait_for(
      job.id(),
      [](const v1::Job& j) {
        return final(j) || (j.attempts() == 2 && j.attempt_history(1).resumed_from_step() > 0 &&
                            j.latest_progress().step() > j.attempt_history(1).resumed_from_step());
      },
      kJobLimit);
  ASSERT_EQ(training.state(), v1::Job::RUNNING) << training.DebugString() << cp.logs();
  EXPECT_EQ(training.attempt_history(1).ranks_size(), 5);
  EXPECT_GE(training.attempt_history(1).resumed_from_step(), 2);
  EXPECT_TRUE(std::isfinite(training.latest_progress().loss()));
  ASSERT_TRUE(cp.cancel(job.id(), &out).ok());
}

}  // namespace
}  // namespace fp8::system_test
