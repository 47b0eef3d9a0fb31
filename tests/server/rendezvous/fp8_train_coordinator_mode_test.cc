// fp8-train in coordinator mode, end to end: the real binary as two child processes (rank
// 0 and 1 of one attempt) against an in-process coordinator on loopback that hosts the
// real RendezvousServiceImpl and a TrainerService written here that records what the ranks
// report and checks their bearer token; the same for two tensor-parallel ranks. Also: no
// token in the environment (exit 2), and a token the coordinator refuses (the ranks fail
// with exit 1, naming the coordinator).
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "absl/synchronization/mutex.h"
#include "common/jobspec/loader.h"
#include "common/jobspec/model_flops.h"
#include "fp8/v1/trainer_service.grpc.pb.h"
#include "server/rendezvous/rendezvous_service.h"
#include "server/rendezvous/rendezvous_store.h"
#include "tests/cli/subprocess.h"

#ifndef FP8_TRAIN_BINARY
#error "FP8_TRAIN_BINARY must name the fp8-train executable"
#endif

namespace fp8::cli_test {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;

constexpr char kToken[] = "trainer-token-of-job-7-attempt-2";
constexpr char kJob[] = "job-7";
constexpr int kAttempt = 2;
constexpr char kNamespace[] = "job-7/attempt-2/";
constexpr milliseconds kRunLimit{120'000};  // per child; a healthy run takes a few seconds

// The token check the coordinator makes: "authorization: Bearer <token of this attempt>".
grpc::Status check_token(const grpc::ServerContext& ctx) {
  const auto& md = ctx.client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "no authorization metadata");
  if (std::string(it->second.data(), it->second.size()) != std::string("Bearer ") + kToken) {
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "the token is not this attempt's trainer token");
  }
  return grpc::Status::OK;
}

class RecordingTrainer final : public fp8::v1::TrainerService::Service {
 public:
  grpc::Status ReportProgress(grpc::ServerContext* ctx, const fp8::v1::ReportProgressRequest* req,
                              fp8::v1::ReportProgressResponse*) override {
    if (grpc::Status s = check_token(*ctx); !s.ok()) return s;
    if (attempt_ended) return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "attempt 2 of job-7 has ended");
    absl::MutexLock lock(&mu_);
    progress_.push_back(*req);
    return grpc::Status::OK;
  }
  grpc::Status CommitCheckpoint(grpc::ServerContext* ctx, const fp8::v1::CommitCheckpointRequest* req,
                                fp8::v1::CommitCheckpointResponse*) override {
    if (grpc::Status s = check_token(*ctx); !s.ok()) return s;
    absl::MutexLock lock(&mu_);
    commits_.push_back(*req);
    return grpc::Status::OK;
  }
  std::vector<fp8::v1::ReportProgressRequest> progress() {
    absl::MutexLock lock(&mu_);
    return progress_;
  }
  std::vector<fp8::v1::CommitCheckpointRequest> commits() {
    absl::MutexLock lock(&mu_);
    return commits_;
  }

  // Answer every report as the coordinator does once the attempt is over.
  std::atomic<bool> attempt_ended{false};

 private:
  absl::Mutex mu_;
  std::vector<fp8::v1::ReportProgressRequest> progress_;
  std::vector<fp8::v1::CommitCheckpointRequest> commits_;
};

std::string corpus(size_t bytes) {
  static const char* kWords[] = {"the", "model", "trains", "in", "float8", "and", "a", "river", "of", "light"};
  std::string text;
  uint64_t x = 7;
  while (text.size() < bytes) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    text += kWords[(x >> 33) % std::size(kWords)];
    text += ((x >> 20) % 9 == 0) ? ". " : " ";
  }
  return text;
}

// A tiny job: one block of width 32; 10 steps, a report every 2, checkpoints at 5 and 10.
std::string job_yaml() {
  return "name: coordinator-test\n"
         "model:\n  dim: 32\n  n_layers: 1\n  n_heads: 2\n  max_seq_len: 32\n"
         "data:\n  path: corpus.txt\n  seq_len: 32\n  val_fraction: 0.05\n"
         "train:\n  steps: 10\n  batch_size: 4\n  lr: 3e-3\n  warmup_steps: 2\n  log_every: 2\n"
         "  eval_every: 5\n  eval_batches: 1\n"
         "fp8:\n  recipe: tensorwise\n"
         "checkpoint:\n  dir: ckpt\n  every: 5\n  keep: 3\n"
         "resources:\n  device: cpu\n  cpus_per_rank: 1\n";
}

class CoordinatorModeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    dir_ = fs::temp_directory_path() /
           ("fp8-train-coord-" + std::to_string(getpid()) + "-" + std::to_string(counter++));
    fs::remove_all(dir_);
    ASSERT_TRUE(fs::create_directories(dir_));
    std::ofstream(dir_ / "corpus.txt") << corpus(200 * 1024);
    std::ofstream(dir_ / "job.yaml") << job_yaml();
    config_ = dir_ / "job.yaml";

    rendezvous_ = std::make_unique<server::RendezvousServiceImpl>(
        store_, [](grpc::ServerContext& ctx, std::string_view ns) {
          if (grpc::Status s = check_token(ctx); !s.ok()) return s;
          if (ns != kNamespace) return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "not this attempt's namespace");
          return grpc::Status::OK;
        });
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(rendezvous_.get());
    builder.RegisterService(&trainer_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port_, 0);
  }

  void TearDown() override {
    store_.shutdown();
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
    if (!HasFailure()) fs::remove_all(dir_);
  }

  std::vector<std::string> rank_args(int rank) const {
    return {FP8_TRAIN_BINARY, "--config", config_.string(), "--rank", std::to_string(rank),
            "--world-size", "2", "--coordinator", "127.0.0.1:" + std::to_string(port_), "--job-id", kJob,
            "--attempt", std::to_string(kAttempt), "--rendezvous-namespace", kNamespace, "--timeout", "30"};
  }

  static std::map<std::string, std::string> env(const std::string& token) {
    return {{"FP8_NUM_THREADS", "1"}, {"OPENBLAS_NUM_THREADS", "1"}, {"FP8_TRAINER_TOKEN", token}};
  }

  // Runs ranks 0 and 1 side by side to the end.
  std::vector<RunResult> run_both_ranks(const std::string& token) {
    std::vector<std::unique_ptr<Subprocess>> children;
    for (int r = 0; r < 2; ++r) {
      const std::string tag = "rank" + std::to_string(r);
      children.push_back(std::make_unique<Subprocess>(rank_args(r), env(token), dir_ / (tag + ".out"),
                                                      dir_ / (tag + ".err")));
      EXPECT_TRUE(children.back()->started()) << children.back()->start_error();
    }
    std::vector<RunResult> results;
    for (auto& c : children) {
      RunResult r;
      r.exit = c->wait(kRunLimit);
      r.out = c->stdout_text();
      r.err = c->stderr_text();
      results.push_back(r);
    }
    return results;
  }

  fs::path dir_;
  fs::path config_;  // the job the ranks run
  server::RendezvousStore store_;
  std::unique_ptr<server::RendezvousServiceImpl> rendezvous_;
  RecordingTrainer trainer_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

std::string show(const RunResult& r) {
  return r.exit.describe() + "\n--- stdout ---\n" + r.out + "--- stderr ---\n" + r.err;
}

TEST_F(CoordinatorModeTest, TwoRanksMeetAndReportThroughTheCoordinator) {
  const std::vector<RunResult> ranks = run_both_ranks(kToken);
  for (const RunResult& r : ranks) ASSERT_TRUE(r.exit.exited && r.exit.code == 0) << show(r);
  EXPECT_NE(ranks[0].out.find("step 10/10"), std::string::npos) << "rank 0 still logs:\n" << ranks[0].out;
  EXPECT_EQ(ranks[1].out, "") << "rank 1 stays quiet";

  std::map<int, std::vector<int64_t>> steps_by_rank;
  for (const fp8::v1::ReportProgressRequest& p : trainer_.progress()) {
    EXPECT_EQ(p.caller().job_id(), kJob);
    EXPECT_EQ(p.caller().attempt(), kAttempt);
    EXPECT_TRUE(std::isfinite(p.progress().loss())) << p.ShortDebugString();
    EXPECT_GT(p.progress().loss(), 0) << p.ShortDebugString();
    EXPECT_GE(p.progress().window_steps(), 1) << p.ShortDebugString();
    EXPECT_GT(p.progress().time_unix_ms(), 0) << p.ShortDebugString();
    EXPECT_GT(p.progress().communication().all_gather_fp8_bytes(), 0) << p.ShortDebugString();
    EXPECT_GT(p.progress().communication().all_reduce_bytes(), 0) << p.ShortDebugString();
    EXPECT_GT(p.progress().step_time().compute_ms(), 0) << p.ShortDebugString();
    EXPECT_EQ(p.progress().communication().tensor_all_reduces(), 0) << p.ShortDebugString();
    // Each FSDP rank reports its own batch's rate: 4 sequences of 32 tokens a step.
    EXPECT_NEAR(p.progress().tokens_per_second() * p.progress().step_time().step_ms() / 1e3, 4 * 32, 1e-6 * 4 * 32)
        << p.ShortDebugString();
    // Means over the same window: waiting for collectives is part of the step.
    EXPECT_LE(p.progress().step_time().exposed_comm_ms(), p.progress().step_time().step_ms()) << p.ShortDebugString();
    // Against an sgemm timed at the rank's start: the model's work is some of what the CPU
    // could do at best.
    ASSERT_TRUE(p.progress().has_mfu()) << p.ShortDebugString();
    EXPECT_GT(p.progress().mfu(), 0) << p.ShortDebugString();
    EXPECT_LE(p.progress().mfu(), 1) << p.ShortDebugString();
    steps_by_rank[p.caller().rank()].push_back(p.progress().step());
  }
  ASSERT_EQ(steps_by_rank.size(), 2u) << "progress from both ranks";
  for (const auto& [rank, steps] : steps_by_rank) {
    ASSERT_GE(steps.size(), 2u) << "rank " << rank;
    for (size_t i = 1; i < steps.size(); ++i) EXPECT_LT(steps[i - 1], steps[i]) << "rank " << rank;
    EXPECT_EQ(steps.back(), 10) << "rank " << rank << "'s final report arrives before it exits";
  }

  const std::vector<fp8::v1::CommitCheckpointRequest> commits = trainer_.commits();
  ASSERT_FALSE(commits.empty());
  for (const fp8::v1::CommitCheckpointRequest& c : commits) {
    EXPECT_EQ(c.caller().rank(), 0) << "only rank 0 commits";
    EXPECT_EQ(c.world_size(), 2);
    EXPECT_TRUE(fs::path(c.dir()).is_absolute()) << c.dir();
  }
  const fp8::v1::CommitCheckpointRequest& last = commits.back();
  EXPECT_EQ(last.step(), 10);
  std::error_code ec;
  EXPECT_TRUE(fs::equivalent(last.dir(), dir_ / "ckpt" / "step-00000010", ec)) << last.dir();
  EXPECT_TRUE(fs::is_regular_file(fs::path(last.dir()) / "COMMITTED")) << last.dir();
}

// Two tensor-parallel ranks (parallel.tensor 2) train one batch together. Each reports
// that batch's rate (not half of it), its MFU on its half of the model, and the tensor
// axis's all-reduces apart from FSDP's (none); rank 0's log has the tensor axis's comm
// line; rank 0 commits the checkpoints.
TEST_F(CoordinatorModeTest, TensorParallelRanksReportTheirSharedBatchAndTheirShareOfTheModel) {
  std::ofstream(dir_ / "tp.yaml") << "name: coordinator-tp-test\n"
                                     "model: {dim: 64, n_layers: 1, n_heads: 4, ffn_dim: 128, max_seq_len: 32}\n"
                                     "data: {path: corpus.txt, seq_len: 32, val_fraction: 0}\n"
                                     "train: {steps: 6, batch_size: 4, lr: 3e-3, warmup_steps: 2, log_every: 2}\n"
                                     "fp8: {recipe: tensorwise}\n"
                                     "checkpoint: {dir: ckpt, every: 3, keep: 2}\n"
                                     "parallel: {tensor: 2}\n"
                                     "resources: {device: cpu, cpus_per_rank: 1, world_size: 2}\n";
  const absl::StatusOr<fp8::v1::JobSpec> spec = jobspec::load_job_spec_file((dir_ / "tp.yaml").string());
  ASSERT_TRUE(spec.ok()) << spec.status();
  const double flops_per_token = jobspec::training_flops_per_token(*spec);
  ASSERT_GT(flops_per_token, 0);
  config_ = dir_ / "tp.yaml";
  const std::vector<RunResult> ranks = run_both_ranks(kToken);
  for (const RunResult& r : ranks) ASSERT_TRUE(r.exit.exited && r.exit.code == 0) << show(r);
  const std::string& log = ranks[0].out;
  EXPECT_NE(log.find("step 6/6"), std::string::npos) << log;
  EXPECT_NE(log.find("  comm  tensor all-reduce "), std::string::npos) << log;
  EXPECT_EQ(log.find("all-gather"), std::string::npos) << "no FSDP under tensor parallelism\n" << log;
  // Rank 0's peak, as its log gives it ("against a peak of 0.1234 TFLOP/s a rank").
  const std::string peak_at = "against a peak of ";
  const size_t at = log.find(peak_at);
  ASSERT_NE(at, std::string::npos) << log;
  const double peak = std::stod(log.substr(at + peak_at.size())) * 1e12;
  ASSERT_GT(peak, 0) << log;

  std::map<int, int> reports_by_rank;
  for (const fp8::v1::ReportProgressRequest& r : trainer_.progress()) {
    const fp8::v1::TrainingProgress& p = r.progress();
    ++reports_by_rank[r.caller().rank()];
    // The rank's rate is the whole batch's: 4 sequences of 32 tokens a step.
    EXPECT_NEAR(p.tokens_per_second() * p.step_time().step_ms() / 1e3, 4 * 32, 1e-6 * 4 * 32) << p.ShortDebugString();
    EXPECT_GT(p.communication().tensor_all_reduces(), 0) << p.ShortDebugString();
    EXPECT_GT(p.communication().tensor_all_reduce_bytes(), 0) << p.ShortDebugString();
    EXPECT_EQ(p.communication().all_gather_fp8_bytes(), 0) << p.ShortDebugString();
    EXPECT_EQ(p.communication().all_gather_fp32_bytes(), 0) << p.ShortDebugString();
    EXPECT_EQ(p.communication().reduce_scatter_bytes(), 0) << p.ShortDebugString();
    // All of the tensor axis's time is exposed, and computation is the rest of the step.
    EXPECT_GT(p.step_time().tensor_comm_ms(), 0) << p.ShortDebugString();
    EXPECT_DOUBLE_EQ(p.step_time().exposed_comm_ms(), p.step_time().tensor_comm_ms()) << p.ShortDebugString();
    EXPECT_LE(p.step_time().compute_ms() + p.step_time().exposed_comm_ms(), p.step_time().step_ms() * (1 + 1e-9))
        << p.ShortDebugString();
    ASSERT_TRUE(p.has_mfu()) << p.ShortDebugString();
    if (r.caller().rank() == 0) {
      // Half the model's FLOPs per token: the log rounds the peak to 4 digits.
      EXPECT_NEAR(p.mfu(), p.tokens_per_second() * flops_per_token / 2 / peak, 1e-3 * p.mfu()) << p.ShortDebugString();
    }
  }
  EXPECT_GE(reports_by_rank[0], 2);
  EXPECT_GE(reports_by_rank[1], 2);

  const std::vector<fp8::v1::CommitCheckpointRequest> commits = trainer_.commits();
  ASSERT_FALSE(commits.empty());
  for (const fp8::v1::CommitCheckpointRequest& c : commits) {
    EXPECT_EQ(c.caller().rank(), 0) << "only rank 0 commits";
    EXPECT_EQ(c.world_size(), 2);
  }
  EXPECT_EQ(commits.back().step(), 6);
  EXPECT_TRUE(fs::is_regular_file(fs::path(commits.back().dir()) / "COMMITTED")) << commits.back().dir();
}

TEST_F(CoordinatorModeTest, MissingTokenExitsTwo) {
  const RunResult r = cli_test::run(rank_args(0), env(""), dir_ / "no-token.out", dir_ / "no-token.err", kRunLimit);
  EXPECT_TRUE(r.exit.exited && r.exit.code == 2) << show(r);
  EXPECT_NE(r.err.find("FP8_TRAINER_TOKEN"), std::string::npos) << r.err;
  EXPECT_TRUE(trainer_.progress().empty());
}

TEST_F(CoordinatorModeTest, RefusedTokenFailsBothRanksNamingTheCoordinator) {
  const std::vector<RunResult> ranks = run_both_ranks("a-stolen-token");
  for (const RunResult& r : ranks) {
    EXPECT_TRUE(r.exit.exited && r.exit.code == 1) << show(r);
    EXPECT_NE(r.err.find("coordinator rendezvous at 127.0.0.1:" + std::to_string(port_)), std::string::npos) << r.err;
  }
  EXPECT_TRUE(trainer_.progress().empty());
  EXPECT_FALSE(fs::exists(dir_ / "ckpt" / "step-00000005" / "COMMITTED"));
}

// A job of one rank also reports; when the coordinator says the attempt ended, the rank
// stops after the step in flight and exits 1 saying so.
TEST_F(CoordinatorModeTest, AttemptEndedByTheCoordinatorStopsTheRank) {
  trainer_.attempt_ended = true;
  std::vector<std::string> args = rank_args(0);
  args[6] = "1";  // --world-size 1
  for (const char* a : {"--set", "train.steps=100000", "--set", "checkpoint.every=0"}) args.push_back(a);
  const RunResult r = cli_test::run(args, env(kToken), dir_ / "ended.out", dir_ / "ended.err", kRunLimit);
  EXPECT_TRUE(r.exit.exited && r.exit.code == 1) << show(r);
  EXPECT_NE(r.err.find("fp8-train [rank 0]: the coordinator ended this attempt"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("step 100000/100000"), std::string::npos) << "the rank must stop early";
}

}  // namespace
}  // namespace fp8::cli_test
