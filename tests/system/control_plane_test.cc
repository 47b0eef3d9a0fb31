// The control plane end to end: fp8-coordinator, fp8-worker daemons and fp8-train ranks as
// real processes on loopback, driven through the JobService API as fp8ctl would.
#include <signal.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include <httplib.h>

#include "common/jobspec/loader.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/system/control_plane.h"

namespace fp8::system_test {
namespace {

using std::chrono::seconds;

constexpr seconds kJobLimit{240};

bool final(const v1::Job& j) {
  return j.state() == v1::Job::SUCCEEDED || j.state() == v1::Job::FAILED || j.state() == v1::Job::CANCELLED;
}

// The lines one rank of an attempt logged, as they reached the coordinator through its
// worker; none (with a test failure) when the call fails.
v1::GetJobLogsResponse rank_log_lines(const ControlPlane& cp, const std::string& job_id, int attempt, int rank) {
  v1::GetJobLogsRequest logs;
  logs.set_job_id(job_id);
  logs.set_attempt(attempt);
  logs.set_rank(rank);
  logs.set_tail_lines(10000);
  v1::GetJobLogsResponse lines;
  auto ctx = with_token(cp.admin_token(), seconds(10));
  const grpc::Status s = cp.job_stub()->GetJobLogs(ctx.get(), logs, &lines);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return lines;
}

// The same as text, a line each.
std::string rank_log(const ControlPlane& cp, const std::string& job_id, int attempt, int rank) {
  const v1::GetJobLogsResponse lines = rank_log_lines(cp, job_id, attempt, rank);
  std::string text;
  for (const v1::JobLogLine& l : lines.lines()) text += l.line().text() + "\n";
  return text;
}

TEST(ControlPlaneTest, TwoRankJobRunsToSuccess) {
  ControlPlane cp;
  ASSERT_NO_FATAL_FAILURE(cp.start_coordinator());
  cp.start_worker();
  cp.start_worker();
  v1::Job job;
  ASSERT_TRUE(cp.submit(cp.spec({}), &job).ok());
  EXPECT_EQ(job.id(), "job-1");
  const v1::Job done = cp.wait_for(job.id(), final, kJobLimit);
  ASSERT_EQ(done.state(), v1::Job::SUCCEEDED) << done.DebugString() << cp.logs();
  EXPECT_EQ(done.attempts(), 1);
  EXPECT_EQ(done.latest_progress().step(), 40);
  EXPECT_TRUE(std::isfinite(done.latest_progress().loss()));
  EXPECT_GT(done.latest_progress().loss(), 0);
  EXPECT_GT(done.latest_progress().tokens_per_second(), 0);
  EXPECT_GT(done.latest_progress().memory().peak_bytes(), 0);
  EXPECT_GT(done.latest_progress().memory().reserved_bytes(), 0);
  EXPECT_EQ(done.last_checkpoint_step(), 40);
  ASSERT_EQ(done.attempt_history_size(), 1);
  EXPECT_EQ(done.attempt_history(0).ranks_size(), 2);
  EXPECT_NE(done.attempt_history(0).ranks(0).worker_id(), done.attempt_history(0).ranks(1).worker_id());
}

// The blockwise recipe through the whole service: two ranks on two workers train a model of
// block sizes to success, their weights all-gathered as fp8 codes (all_gather_fp8, the
// default for every fp8 recipe), which the progress reports count.
TEST(ControlPlaneTest, ABlockwiseJobTrainsOnTwoRanksGatheringItsWeightsInFp8) {
  ControlPlane cp;
  ASSERT_NO_FATAL_FAILURE(cp.start_coordinator());
  cp.start_worker();
  cp.start_worker();
  const std::filesystem::path file = cp.dir() / "blockwise.yaml";
  std::ofstream(file) << "name: blockwise\n"
                         "model: {dim: 128, n_layers: 1, n_heads: 2, ffn_dim: 384, max_seq_len: 128}\n"
                         "data: {path: corpus.txt, seq_len: 128, val_fraction: 0}\n"
                         "train: {steps: 6, batch_size: 1, lr: 1e-3, log_every: 1, eval_every: 0}\n"
                         "fp8: {recipe: blockwise}\n"
                         "checkpoint: {dir: ckpt/blockwise, every: 6, keep: 1}\n"
                         "resources: {world_size: 2, cpus_per_rank: 1}\n";
  absl::StatusOr<v1::JobSpec> spec = jobspec::load_job_spec_file(file.string());
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(spec->fp8().all_gather_fp8());
  v1::Job job;
  ASSERT_TRUE(cp.submit(*spec, &job).ok());
  const v1::Job done = cp.wait_for(job.id(), final, kJobLimit);
  ASSERT_EQ(done.state(), v1::Job::SUCCEEDED) << done.DebugString() << cp.logs();
  EXPECT_EQ(done.latest_progress().step(), 6);
  EXPECT_TRUE(std::isfinite(done.latest_progress().loss()));
  EXPECT_GT(done.latest_progress().communication().all_gather_fp8_bytes(), 0) << done.latest_progress().DebugString();
  EXPECT_EQ(done.attempt_history(0).ranks_size(), 2);
}

// The value of the coordinator's series `series` ("name{labels}"), NaN when it has none.
double metric(const ControlPlane& cp, const std::string& series) {
  httplib::Client client("127.0.0.1", cp.metrics_port());
  const auto res = client.Get("/metrics");
  EXPECT_TRUE(res && res->status == 200) << "scraping the coordinator's metrics";
  if (!res || res->status != 200) return std::nan("");
  const size_t at = res->body.find("\n" + series + " ");
  if (at == std::string::npos) return std::nan("");
  return std::stod(res->body.substr(at + series.size() + 2));
}

// Tensor parallelism through the whole service: two ranks on two workers split the model
// (parallel.tensor 2, one data-parallel rank), train one batch together to success and
// commit checkpoints. The job's throughput and tokens count that batch once, not once a
// rank, and its traffic is the tensor axis's all-reduces.
TEST(ControlPlaneTest, ATensorParallelJobTrainsOnTwoRanksCountingOneDataParallelRank) {
  ControlPlane cp;
  ASSERT_NO_FATAL_FAILURE(cp.start_coordinator());
  cp.start_worker();
  cp.start_worker();
  const std::filesystem::path file = cp.dir() / "tensor-parallel.yaml";
  std::ofstream(file) << "name: tensor-parallel\n"
                         "model: {dim: 64, n_layers: 1, n_heads: 4, ffn_dim: 128, max_seq_len: 64}\n"
                         "data: {path: corpus.txt, seq_len: 64, val_fraction: 0}\n"
                         "train: {steps: 6, batch_size: 2, lr: 1e-3, log_every: 1, eval_every: 0}\n"
                         "fp8: {recipe: tensorwise}\n"
                         "checkpoint: {dir: ckpt/tensor-parallel, every: 3, keep: 2}\n"
                         "parallel: {tensor: 2}\n"
                         "resources: {world_size: 2, cpus_per_rank: 1}\n";
  absl::StatusOr<v1::JobSpec> spec = jobspec::load_job_spec_file(file.string());
  ASSERT_TRUE(spec.ok()) << spec.status();
  v1::Job job;
  ASSERT_TRUE(cp.submit(*spec, &job).ok());
  const v1::Job done = cp.wait_for(job.id(), final, kJobLimit);
  ASSERT_EQ(done.state(), v1::Job::SUCCEEDED) << done.DebugString() << cp.logs();
  EXPECT_EQ(done.attempts(), 1);
  ASSERT_EQ(done.attempt_history_size(), 1);
  EXPECT_EQ(done.attempt_history(0).ranks_size(), 2);
  EXPECT_EQ(done.last_checkpoint_step(), 6);
  const v1::TrainingProgress& p = done.latest_progress();
  EXPECT_EQ(p.step(), 6);
  EXPECT_TRUE(std::isfinite(p.loss()));
  EXPECT_GT(p.communication().tensor_all_reduce_bytes(), 0) << p.DebugString();
  EXPECT_EQ(p.communication().all_gather_fp8_bytes() + p.communication().all_gather_fp32_bytes(), 0) << p.DebugString();
  // Rank 0's rate is the shared batch's: 2 sequences of 64 tokens a step.
  constexpr double kBatchTokens = 2 * 64;
  EXPECT_NEAR(p.tokens_per_second() * p.step_time().step_ms() / 1e3, kBatchTokens, 1e-6 * kBatchTokens)
      << p.DebugString();
  // The job's: rank 0's times one data-parallel rank; its tokens, 6 steps of the batch once.
  const std::string id = "{job_id=\"" + job.id() + "\"}";
  const double job_rate = metric(cp, "fp8_job_tokens_per_second" + id);
  EXPECT_NEAR(job_rate, p.tokens_per_second(), 1e-6 * p.tokens_per_second());
  EXPECT_DOUBLE_EQ(metric(cp, "fp8_job_tokens_total" + id), 6 * kBatchTokens);
  EXPECT_GT(metric(cp, "fp8_job_tensor_parallel_exposed_seconds" + id), 0);
}

// The step numbers rank `rank` of an attempt logged ("step N/M ..."), in order.
std::vector<int64_t> logged_steps(const ControlPlane& cp, const std::string& job_id, int attempt, int rank) {
  const v1::GetJobLogsResponse lines = rank_log_lines(cp, job_id, attempt, rank);
  std::vector<int64_t> steps;
  for (const v1::JobLogLine& l : lines.lines()) {
    const std::string& text = l.line().text();
    if (text.rfind("step ", 0) != 0) continue;
    steps.push_back(std::stoll(text.substr(5)));
  }
  return steps;
}

// Issue 37's "done when": a 2 x 2 mesh (parallel.tensor 2, world_size 4: two data-parallel
// groups of two tensor-parallel ranks, FSDP across the pairs) on four workers, its groups
// formed over the coordinator's rendezvous. It commits whole-model checkpoints, is cancelled
// after one, resumed (a second attempt on four ranks starting after the checkpoint's step)
// and runs to success, ending at the loss one process reaches on the same global batch
// (2 data-parallel ranks x batch_size 2 = 4 sequences a step).
TEST(ControlPlaneTest, ATwoByTwoMeshJobCheckpointsResumesAndEndsWhereOneProcessEnds) {
  ControlPlane cp;
  ASSERT_NO_FATAL_FAILURE(cp.start_coordinator());
  for (int i = 0; i < 4; ++i) cp.start_worker();
  const std::filesystem::path file = cp.dir() / "mesh.yaml";
  constexpr int64_t kSteps = 60;
  std::ofstream(file) << "name: mesh\n"
                         "model: {dim: 64, n_layers: 1, n_heads: 4, ffn_dim: 128, max_seq_len: 64}\n"
                         "data: {path: corpus.txt, seq_len: 64, val_fraction: 0}\n"
                         "train: {steps: " << kSteps << ", batch_size: 2, lr: 1e-3, log_every: 1, eval_every: 0}\n"
                         "fp8: {recipe: tensorwise}\n"
                         "checkpoint: {dir: ckpt/mesh, every: 10, keep: 2}\n"
                         "parallel: {tensor: 2}\n"
                         "resources: {world_size: 4, cpus_per_rank: 1}\n";
  absl::StatusOr<v1::JobSpec> spec = jobspec::load_job_spec_file(file.string());
  ASSERT_TRUE(spec.ok()) << spec.status();
  v1::Job job;
  ASSERT_TRUE(cp.submit(*spec, &job).ok());
  const v1::Job checkpointed =
      cp.wait_for(job.id(), [](const v1::Job& j) { return j.last_checkpoint_step() >= 10 || final(j); }, kJobLimit);
  ASSERT_EQ(checkpointed.state(), v1::Job::RUNNING) << checkpointed.DebugString() << cp.logs();
  EXPECT_GE(checkpointed.latest_progress().step(), 10);
  EXPECT_EQ(checkpointed.attempts(), 1);
  v1::Job out;
  ASSERT_TRUE(cp.cancel(job.id(), &out).ok());
  ASSERT_EQ(out.state(), v1::Job::CANCELLED);

  v1::ResumeJobRequest resume;
  resume.set_job_id(job.id());
  auto ctx = with_token(cp.admin_token(), seconds(30));
  const grpc::Status resumed = cp.job_stub()->ResumeJob(ctx.get(), resume, &out);
  ASSERT_TRUE(resumed.ok()) << resumed.error_message();
  const v1::Job done = cp.wait_for(job.id(), final, kJobLimit);
  ASSERT_EQ(done.state(), v1::Job::SUCCEEDED) << done.DebugString() << cp.logs();
  ASSERT_EQ(done.attempts(), 2);
  ASSERT_EQ(done.attempt_history_size(), 2);
  EXPECT_EQ(done.attempt_history(0).state(), v1::Attempt::CANCELLED);
  for (const v1::Attempt& a : done.attempt_history()) EXPECT_EQ(a.ranks_size(), 4);
  const int64_t from = done.attempt_history(1).resumed_from_step();
  EXPECT_GE(from, 10);
  EXPECT_LT(from, kSteps);
  EXPECT_EQ(done.last_checkpoint_step(), kSteps);
  EXPECT_EQ(done.latest_progress().step(), kSteps);
  EXPECT_GT(done.latest_progress().communication().tensor_all_reduce_bytes(), 0);
  // FSDP across the data-parallel pairs: the tensor-parallel parts are gathered.
  EXPECT_GT(done.latest_progress().communication().all_gather_fp8_bytes() +
                done.latest_progress().communication().all_gather_fp32_bytes(),
            0)
      << done.latest_progress().DebugString();
  // The second attempt trained from just after the checkpoint to the end. (The first
  // attempt's lines may not have reached the coordinator at all: a cancelled attempt's
  // token is revoked at once, and the workers forward lines in batches.)
  const std::vector<int64_t> second = logged_steps(cp, job.id(), 2, 0);
  ASSERT_FALSE(second.empty()) << rank_log(cp, job.id(), 2, 0);
  EXPECT_EQ(second.front(), from + 1);
  EXPECT_EQ(second.back(), kSteps);
  // The checkpoints are committed whole-model ones, written by world rank 0.
  const std::filesystem::path ckpt = cp.dir() / "ckpt" / "mesh" / job.id();
  char last[32];
  std::snprintf(last, sizeof last, "step-%08lld", static_cast<long long>(kSteps));
  EXPECT_TRUE(std::filesystem::exists(ckpt / last / "COMMITTED")) << ckpt;
  EXPECT_TRUE(std::filesystem::exists(ckpt / last / "rank-00000-of-00001.ckpt")) << ckpt;

  // One process on the same global batch.
  absl::StatusOr<v1::JobSpec> one = jobspec::load_job_spec_file(
      file.string(), {"name=one-process", "checkpoint.dir=ckpt/one-process", "parallel.tensor=1",
                      "resources.world_size=1", "train.batch_size=4"});
  ASSERT_TRUE(one.ok()) << one.status();
  v1::Job reference;
  ASSERT_TRUE(cp.submit(*one, &reference).ok());
  const v1::Job ref = cp.wait_for(reference.id(), final, kJobLimit);
  ASSERT_EQ(ref.state(), v1::Job::SUCCEEDED) << ref.DebugString() << cp.logs();
  ASSERT_EQ(ref.latest_progress().step(), kSteps);
  EXPECT_NEAR(done.latest_progress().loss(), ref.latest_progress().loss(), 1e-3 * ref.latest_progress().loss());
}

TEST(ControlPlaneTest, JsonLogsFromEveryDaemonAndRankLinesKeepTheirLevel) {
  ControlPlane cp;
  cp.set_log_format("json");
  ASSERT_NO_FATAL_FAILURE(cp.start_coordinator());
  cp.start_worker();
  ControlPlane::JobOptions o;
  o.world_size = 1;
  o.steps = 10;
  o.checkpoint_every = 10;
  v1::Job job;
  ASSERT_TRUE(cp.submit(cp.spec(o), &job).ok());
  ASSERT_EQ(cp.wait_for(job.id(), final, kJobLimit).state(), v1::Job::SUCCEEDED) << cp.logs();

  // Each line a daemon wrote is one json object with time, level, component and message.
  for (const auto& [child, component] : {std::pair<std::string, std::string>{"coordinator-1", "fp8-coordinator"},
                                         {"worker-0", "fp8-worker"}}) {
    std::istringstream lines(cp.stderr_of(child));
    int count = 0;
    for (std::string line; std::getline(lines, line); ++count) {
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      ASSERT_TRUE(j.is_object()) << child << " wrote a line that is not json: " << line;
      for (const char* key : {"time", "level", "component", "message"}) {
        ASSERT_TRUE(j.contains(key) && j.at(key).is_string()) << key << " missing: " << line;
      }
      EXPECT_EQ(j.at("component"), component) << line;
    }
    EXPECT_GT(count, 0) << child << " logged nothing";
  }

  // The rank's lines reach the coordinator as their message, with their level.
  const v1::GetJobLogsResponse resp = rank_log_lines(cp, job.id(), 1, 0);
  int steps = 0;
  for (const v1::JobLogLine& l : resp.lines()) {
    EXPECT_NE(l.line().text().front(), '{') << "a rank's json line was forwarded whole: " << l.line().text();
    if (l.line().text().rfind("step ", 0) != 0) continue;
    ++steps;
    EXPECT_EQ(l.line().level(), v1::LogLine::LEVEL_INFO) << l.line().text();
  }
  EXPECT_GT(steps, 0) << resp.DebugString();
}

TEST(ControlPlaneTest, GangWaitsForEnoughWorkers) {
  ControlPlane cp;
  ASSERT_NO_FATAL_FAILURE(cp.start_coordinator());
  cp.start_worker();
  cp.start_worker();
  ControlPlane::JobOptions o;
  o.world_size = 3;
  o.steps = 20;
  v1::Job job;
  ASSERT_TRUE(cp.submit(cp.spec(o), &job).ok());
  std::this_thread::sleep_for(std::chrono::seconds(2));  // both workers registered and idle
  ASSERT_TRUE(cp.get(job.id(), &job).ok());
  EXPECT_EQ(job.state(), v1::Job::QUEUED);
  EXPECT_EQ(job.attempts(), 0);
  cp.start_worker();
  const v1::Job done = cp.wait_for(job.id(), final, kJobLimit);
  ASSERT_EQ(done.state(), v1::Job::SUCCEEDED) << done.DebugString() << cp.logs();
  EXPECT_EQ(done.attempt_history(0).ranks_size(), 3);
}

TEST(ControlPlaneTest, KilledWorkerRestartsFromCheckpoint) {
  ControlPlane cp;
  ASSERT_NO_FATAL_FAILURE(cp.start_coordinator());
  cp.start_worker();
  cp.start_worker();
  ControlPlane::JobOptions o;
  o.name = "crash";
  o.steps = 400;
  o.checkpoint_every = 50;
  o.max_restarts = 2;
  v1::Job job;
  ASSERT_TRUE(cp.submit(cp.spec(o), &job).ok());
  const v1::Job checkpointed =
      cp.wait_for(job.id(), [](const v1::Job& j) { return j.last_checkpoint_step() >= 50 || final(j); }, kJobLimit);
  ASSERT_EQ(checkpointed.state(), v1::Job::RUNNING) << checkpointed.DebugString() << cp.logs();
  cp.kill_worker(1, SIGKILL);
  cp.start_worker();  // a replacement, so that the gang of 2 can form again
  const v1::Job done = cp.wait_for(job.id(), final, kJobLimit);
  ASSERT_EQ(done.state(), v1::Job::SUCCEEDED) << done.DebugString() << cp.logs();
  ASSERT_GE(done.attempts(), 2);
  EXPECT_EQ(done.attempt_history(0).state(), v1::Attempt::FAILED);
  // Either the worker was declared lost, or, first, its orphaned rank (stopped by the
  // kernel when its daemon died) made the gang stop together and exit.
  const std::string& reason = done.attempt_history(0).end_reason();
  EXPECT_TRUE(reason.find("lost") != std::string::npos || reason.find("exited") != std::string::npos) << reason;
  EXPECT_GE(done.attempt_history(1).resumed_from_step(), 50);

  // The same job uninterrupted ends at the same loss: the restart resumed the checkpoint
  // (model, optimizer, data position) rather than starting over.
  o.name = "reference";
  v1::Job reference;
  ASSERT_TRUE(cp.submit(cp.spec(o), &reference).ok());
  const v1::Job ref = cp.wait_for(reference.id(), final, kJobLimit);
  ASSERT_EQ(ref.state(), v1::Job::SUCCEEDED) << ref.DebugString() << cp.logs();
  EXPECT_EQ(ref.attempts(), 1);
  EXPECT_NEAR(done.latest_progress().loss(), ref.latest_progress().loss(), 1e-3 * ref.latest_progress().loss());
}

// A job whose loss diverges fails at its first attempt although restarts are left: the
// same checkpoint would diverge again (fp8-train's exit code 3; restarts.on's default).
TEST(ControlPlaneTest, ADivergedJobIsNotRestarted) {
  ControlPlane cp;
  ASSERT_NO_FATAL_FAILURE(cp.start_coordinator());
  cp.start_worker();
  cp.start_worker();
  ControlPlane::JobOptions o;
  o.name = "diverges";
  o.max_restarts = 3;
  v1::JobSpec spec = cp.spec(o);
  spec.mutable_train()->set_lr(1e30);
  spec.mutable_train()->set_grad_clip(0);
  spec.mutable_train()->set_warmup_steps(0);
  v1::Job job;
  ASSERT_TRUE(cp.submit(spec, &job).ok());
  const v1::Job done = cp.wait_for(job.id(), final, kJobLimit);
  ASSERT_EQ(done.state(), v1::Job::FAILED) << done.DebugString() << cp.logs();
  EXPECT_EQ(done.attempts(), 1);
  EXPECT_EQ(done.restarts_left(), 3);
  EXPECT_EQ(done.attempt_history(0).failure_class(), v1::RestartPolicy::DIVERGENCE);
  EXPECT_NE(done.failure_reason().find("training diverged at step"), std::string::npos) << done.failure_reason();
  EXPECT_NE(done.failure_reason().find("not restarted"), std::string::npos) << done.failure_reason();
}

// A cancelled job continues from its checkpoint when resumed (the same job, a second
// attempt) and ends where the same job run straight through ends.
TEST(ControlPlaneTest, ACancelledJobResumesAndEndsWhereAStraightRunEnds) {
  ControlPlane cp;
  ASSERT_NO_FATAL_FAILURE(cp.start_coordinator());
  cp.start_worker();
  cp.start_worker();
  ControlPlane::JobOptions o;
  o.name = "paused";
  o.steps = 300;
  o.checkpoint_every = 50;
  v1::Job job;
  ASSERT_TRUE(cp.submit(cp.spec(o), &job).ok());
  const v1::Job checkpointed =
      cp.wait_for(job.id(), [](const v1::Job& j) { return j.last_checkpoint_step() >= 50 || final(j); }, kJobLimit);
  ASSERT_EQ(checkpointed.state(), v1::Job::RUNNING) << checkpointed.DebugString() << cp.logs();
  v1::Job out;
  ASSERT_TRUE(cp.cancel(job.id(), &out).ok());
  ASSERT_EQ(out.state(), v1::Job::CANCELLED);

  v1::ResumeJobRequest resume;
  resume.set_job_id(job.id());
  auto ctx = with_token(cp.admin_token(), std::chrono::seconds(30));
  const grpc::Status resumed = cp.job_stub()->ResumeJob(ctx.get(), resume, &out);
  ASSERT_TRUE(resumed.ok()) << resumed.error_message();
  const v1::Job done = cp.wait_for(job.id(), final, kJobLimit);
  ASSERT_EQ(done.state(), v1::Job::SUCCEEDED) << done.DebugString() << cp.logs();
  ASSERT_EQ(done.attempts(), 2);
  EXPECT_EQ(done.attempt_history(0).state(), v1::Attempt::CANCELLED);
  EXPECT_GE(done.attempt_history(1).resumed_from_step(), 50);
  EXPECT_EQ(done.latest_progress().step(), 300);

  o.name = "straight";
  v1::Job reference;
  ASSERT_TRUE(cp.submit(cp.spec(o), &reference).ok());
  const v1::Job ref = cp.wait_for(reference.id(), final, kJobLimit);
  ASSERT_EQ(ref.state(), v1::Job::SUCCEEDED) << ref.DebugString() << cp.logs();
  EXPECT_NEAR(done.latest_progress().loss(), ref.latest_progress().loss(), 1e-3 * ref.latest_progress().loss());
}

TEST(ControlPlaneTest, KilledCoordinatorLosesNothing) {
  ControlPlane cp;
  ASSERT_NO_FATAL_FAILURE(cp.start_coordinator());
  cp.start_worker();
  cp.start_worker();
  ControlPlane::JobOptions o;
  o.steps = 300;
  o.checkpoint_every = 50;
  v1::Job job, queued;
  ASSERT_TRUE(cp.submit(cp.spec(o), &job).ok());
  o.name = "second";
  o.steps = 20;
  ASSERT_TRUE(cp.submit(cp.spec(o), &queued).ok());
  const v1::Job running =
      cp.wait_for(job.id(), [](const v1::Job& j) { return j.latest_progress().step() >= 10 || final(j); }, kJobLimit);
  ASSERT_EQ(running.state(), v1::Job::RUNNING) << running.DebugString() << cp.logs();
  cp.kill_coordinator(SIGKILL);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  ASSERT_NO_FATAL_FAILURE(cp.start_coordinator());
  const v1::Job done = cp.wait_for(job.id(), final, kJobLimit);
  ASSERT_EQ(done.state(), v1::Job::SUCCEEDED) << done.DebugString() << cp.logs();
  EXPECT_EQ(done.latest_progress().step(), 300);
  EXPECT_EQ(done.attempts(), 1) << "the running attempt should have carried on through the restart";
  const v1::Job second = cp.wait_for(queued.id(), final, kJobLimit);
  EXPECT_EQ(second.state(), v1::Job::SUCCEEDED) << second.DebugString() << cp.logs();

  // The event history is whole: one sequence across the restart (progress included),
  // ending in SUCCEEDED.
  v1::WatchJobRequest watch;
  watch.set_job_id(job.id());
  watch.set_include_progress(true);
  auto ctx = with_token(cp.admin_token(), std::chrono::seconds(30));
  auto stub = cp.job_stub();
  auto reader = stub->WatchJob(ctx.get(), watch);
  v1::JobEvent e;
  int64_t expected = 1;
  v1::Job::State last = v1::Job::STATE_UNSPECIFIED;
  while (reader->Read(&e)) {
    EXPECT_EQ(e.sequence(), expected++);
    if (e.has_state_change()) last = e.state_change().current();
  }
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_EQ(last, v1::Job::SUCCEEDED);
}

TEST(ControlPlaneTest, RestartedDelayedJobResumesAmaxHistories) {
  ControlPlane cp;
  ASSERT_NO_FATAL_FAILURE(cp.start_coordinator());
  cp.start_worker();
  cp.start_worker();
  ControlPlane::JobOptions o;
  o.name = "delayed";
  o.recipe = "delayed";
  o.steps = 400;
  o.checkpoint_every = 0;  // no periodic checkpoint: only the one the stopped ranks write on their way out
  o.max_restarts = 1;
  v1::Job job;
  ASSERT_TRUE(cp.submit(cp.spec(o), &job).ok());
  const v1::Job running =
      cp.wait_for(job.id(), [](const v1::Job& j) { return j.latest_progress().step() >= 30 || final(j); }, kJobLimit);
  ASSERT_EQ(running.state(), v1::Job::RUNNING) << running.DebugString() << cp.logs();
  cp.kill_worker(0, SIGKILL);
  cp.start_worker();
  const v1::Job done = cp.wait_for(job.id(), final, kJobLimit);
  ASSERT_EQ(done.state(), v1::Job::SUCCEEDED) << done.DebugString() << cp.logs();
  ASSERT_EQ(done.attempts(), 2);
  // The rank on the killed worker was stopped by the kernel (SIGTERM) and its peer with
  // it, after the same step, with a checkpoint: the restart resumed from it, and the
  // attempt records the step its ranks reported loading.
  const int64_t resumed = done.attempt_history(1).resumed_from_step();

  // Rank 0 of the second attempt says where its delayed scaling started from.
  const std::string text = rank_log(cp, job.id(), 2, 0);
  EXPECT_NE(text.find("amax histories from the coordinator (step "), std::string::npos) << text << cp.logs();
  EXPECT_NE(text.find("done: steps " + std::to_string(resumed + 1) + "..400"), std::string::npos) << text;
}

TEST(ControlPlaneTest, ADelayedJobWarmStartsFromAnEarlierJobsAmaxHistories) {
  ControlPlane cp;
  ASSERT_NO_FATAL_FAILURE(cp.start_coordinator());
  cp.start_worker();
  cp.start_worker();
  ControlPlane::JobOptions o;
  o.name = "delayed";
  o.recipe = "delayed";
  o.steps = 20;
  v1::Job first;
  ASSERT_TRUE(cp.submit(cp.spec(o), &first).ok());
  const v1::Job first_done = cp.wait_for(first.id(), final, kJobLimit);
  ASSERT_EQ(first_done.state(), v1::Job::SUCCEEDED) << first_done.DebugString() << cp.logs();

  o.name = "warm";
  v1::JobSpec warm = cp.spec(o);
  warm.mutable_fp8()->set_amax_init_from(first.id());
  v1::Job second;
  const grpc::Status submitted = cp.submit(warm, &second);
  ASSERT_TRUE(submitted.ok()) << submitted.error_message();
  const v1::Job done = cp.wait_for(second.id(), final, kJobLimit);
  ASSERT_EQ(done.state(), v1::Job::SUCCEEDED) << done.DebugString() << cp.logs();

  // Rank 0 of the first attempt says its delayed scaling started from the earlier job's.
  const std::string text = rank_log(cp, second.id(), 1, 0);
  const size_t at = text.find("delayed scaling: started from ");
  ASSERT_NE(at, std::string::npos) << text << cp.logs();
  const std::string line = text.substr(at, text.find('\n', at) - at);
  EXPECT_NE(line.find(" amax histories of " + first.id() + " (its step "), std::string::npos) << line;
  EXPECT_EQ(line.find("started from 0 "), std::string::npos) << "no history matched a layer: " << line;
}

TEST(ControlPlaneTest, CancelStopsTheRanks) {
  ControlPlane cp;
  ASSERT_NO_FATAL_FAILURE(cp.start_coordinator());
  cp.start_worker();
  cp.start_worker();
  ControlPlane::JobOptions o;
  o.steps = 100000;  // would run for a long time
  v1::Job job;
  ASSERT_TRUE(cp.submit(cp.spec(o), &job).ok());
  const v1::Job running =
      cp.wait_for(job.id(), [](const v1::Job& j) { return j.latest_progress().step() >= 5 || final(j); }, kJobLimit);
  ASSERT_EQ(running.state(), v1::Job::RUNNING) << cp.logs();
  v1::Job cancelled;
  ASSERT_TRUE(cp.cancel(job.id(), &cancelled).ok());
  EXPECT_EQ(cancelled.state(), v1::Job::CANCELLED);
  EXPECT_EQ(cancelled.attempt_history(0).state(), v1::Attempt::CANCELLED);
  // The workers come free again: a next job runs on both.
  o.name = "after";
  o.steps = 10;
  v1::Job next;
  ASSERT_TRUE(cp.submit(cp.spec(o), &next).ok());
  const v1::Job done = cp.wait_for(next.id(), final, kJobLimit);
  EXPECT_EQ(done.state(), v1::Job::SUCCEEDED) << done.DebugString() << cp.logs();
}

TEST(ControlPlaneTest, PriorityDecidesWhoRunsFirst) {
  ControlPlane cp;
  ASSERT_NO_FATAL_FAILURE(cp.start_coordinator());
  ControlPlane::JobOptions o;
  o.world_size = 1;
  o.steps = 10;
  v1::Job low, high;
  o.name = "low";
  ASSERT_TRUE(cp.submit(cp.spec(o), &low).ok());
  o.name = "high";
  o.priority = 10;
  ASSERT_TRUE(cp.submit(cp.spec(o), &high).ok());
  cp.start_worker();  // one worker: one job at a time
  const v1::Job h = cp.wait_for(high.id(), final, kJobLimit);
  const v1::Job l = cp.wait_for(low.id(), final, kJobLimit);
  ASSERT_EQ(h.state(), v1::Job::SUCCEEDED) << cp.logs();
  ASSERT_EQ(l.state(), v1::Job::SUCCEEDED) << cp.logs();
  EXPECT_LE(h.finished_unix_ms(), l.started_unix_ms());
}

TEST(ControlPlaneTest, ServesTls) {
  ControlPlane cp;
  ASSERT_NO_FATAL_FAILURE(cp.enable_tls());
  ASSERT_NO_FATAL_FAILURE(cp.start_coordinator());
  cp.start_worker();
  ControlPlane::JobOptions o;
  o.world_size = 1;
  o.steps = 10;
  v1::Job job;
  const grpc::Status submitted = cp.submit(cp.spec(o), &job);
  ASSERT_TRUE(submitted.ok()) << submitted.error_message() << cp.logs();
  const v1::Job done = cp.wait_for(job.id(), final, kJobLimit);
  ASSERT_EQ(done.state(), v1::Job::SUCCEEDED) << done.DebugString() << cp.logs();
  EXPECT_EQ(done.latest_progress().step(), 10);  // the trainer reached it over TLS too

  // A plaintext client gets nowhere.
  auto plain = v1::JobService::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(cp.port()), grpc::InsecureChannelCredentials()));
  v1::GetJobRequest get;
  get.set_job_id(job.id());
  v1::Job out;
  auto ctx = with_token(cp.admin_token(), seconds(5));
  EXPECT_FALSE(plain->GetJob(ctx.get(), get, &out).ok());
}

TEST(ControlPlaneTest, TokensAndRoles) {
  ControlPlane cp;
  ASSERT_NO_FATAL_FAILURE(cp.start_coordinator());
  const std::string alice = cp.create_token("user", "alice");
  const std::string bob = cp.create_token("user", "bob");
  ASSERT_FALSE(alice.empty());
  ControlPlane::JobOptions o;
  o.world_size = 1;
  v1::Job job;
  v1::JobSpec mine = cp.spec(o);
  mine.mutable_checkpoint()->set_dir((cp.dir() / "alice" / "sys").string());  // a user's folders are its own
  const grpc::Status submitted = cp.submit(mine, &job, alice);
  ASSERT_TRUE(submitted.ok()) << submitted.error_code() << " " << submitted.error_message() << " token [" << alice << "]";
  EXPECT_EQ(job.spec().owner(), "alice");

  auto stub = cp.job_stub();
  v1::GetJobRequest get;
  get.set_job_id(job.id());
  v1::Job out;
  auto none = with_token("", seconds(10));
  EXPECT_EQ(stub->GetJob(none.get(), get, &out).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(cp.get(job.id(), &out, "fp8u_0123").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(cp.get(job.id(), &out, bob).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(cp.cancel(job.id(), &out, bob).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_TRUE(cp.get(job.id(), &out, alice).ok());
  EXPECT_EQ(cp.submit(cp.spec(o), &out, cp.worker_token()).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  v1::JobSpec for_bob = cp.spec(o);
  for_bob.set_owner("bob");
  EXPECT_EQ(cp.submit(for_bob, &out, alice).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(cp.cancel(job.id(), &out, alice).ok());
}

TEST(ControlPlaneTest, InvalidSpecsAreRefusedWithTheField) {
  ControlPlane cp;
  ASSERT_NO_FATAL_FAILURE(cp.start_coordinator());
  v1::JobSpec bad = cp.spec({});
  bad.mutable_train()->set_steps(-3);
  v1::Job out;
  grpc::Status s = cp.submit(bad, &out);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("spec.train.steps"), std::string::npos) << s.error_message();

  v1::JobSpec escape = cp.spec({});
  escape.mutable_checkpoint()->set_dir(cp.dir().string() + "/../../etc/ckpt");
  s = cp.submit(escape, &out);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("spec.checkpoint.dir"), std::string::npos) << s.error_message();

  v1::JobSpec outside = cp.spec({});
  outside.mutable_data()->set_path("/etc/passwd");
  s = cp.submit(outside, &out);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("spec.data.path"), std::string::npos) << s.error_message();

  v1::ListJobsRequest list;
  v1::ListJobsResponse jobs;
  auto ctx = with_token(cp.admin_token(), seconds(10));
  ASSERT_TRUE(cp.job_stub()->ListJobs(ctx.get(), list, &jobs).ok());
  EXPECT_EQ(jobs.jobs_size(), 0);  // nothing was queued
}

}  // namespace
}  // namespace fp8::system_test
