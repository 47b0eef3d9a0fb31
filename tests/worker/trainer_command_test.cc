#include "worker/fp8_worker/trainer_command.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace fp8::worker {
namespace {

WorkerConfig config() {
  WorkerConfig c;
  c.trainer = "/opt/fp8/bin/fp8-train";
  c.work_dir = "/var/fp8";
  c.address = "10.0.0.5:9400";
  c.listen_host = "10.0.0.5";
  return c;
}

v1::StartRank start(int attempt) {
  v1::StartRank s;
  s.set_job_id("job-7");
  s.set_attempt(attempt);
  s.set_rank(1);
  s.set_world_size(2);
  s.set_rendezvous_namespace("job-7/attempt-2/");
  s.set_coordinator_address("coord:7070");
  s.set_trainer_token("s3cret-token");
  return s;
}

bool contains(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

TEST(TrainerCommand, ArgvOfTheFirstAttempt) {
  absl::StatusOr<TrainerCommand> cmd = build_trainer_command(start(1), config(), {"PATH=/usr/bin"});
  ASSERT_TRUE(cmd.ok()) << cmd.status();
  EXPECT_EQ(cmd->rank_dir, "/var/fp8/job-7/attempt-1/rank-1");
  EXPECT_EQ(cmd->config_path, "/var/fp8/job-7/attempt-1/rank-1/job.yaml");
  EXPECT_EQ(cmd->log_path, "/var/fp8/job-7/attempt-1/rank-1/output.log");
  const std::vector<std::string> want = {
      "/opt/fp8/bin/fp8-train", "--config", "/var/fp8/job-7/attempt-1/rank-1/job.yaml",
      "--rank", "1", "--world-size", "2", "--coordinator", "coord:7070", "--job-id", "job-7",
      "--attempt", "1", "--rendezvous-namespace", "job-7/attempt-2/", "--listen", "10.0.0.5",
      "--log-format", "json"};
  EXPECT_EQ(cmd->argv, want);
}

TEST(TrainerCommand, ResumeOnlyAfterTheFirstAttempt) {
  EXPECT_FALSE(contains(build_trainer_command(start(1), config(), {})->argv, "--resume"));
  absl::StatusOr<TrainerCommand> second = build_trainer_command(start(2), config(), {});
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(contains(second->argv, "--resume"));
  EXPECT_EQ(second->rank_dir, "/var/fp8/job-7/attempt-2/rank-1");
}

TEST(TrainerCommand, CoordinatorCaPassedWhenSet) {
  WorkerConfig c = config();
  EXPECT_FALSE(contains(build_trainer_command(start(1), c, {})->argv, "--coordinator-ca"));
  c.coordinator_ca = "/etc/fp8/ca.pem";
  std::vector<std::string> argv = build_trainer_command(start(1), c, {})->argv;
  auto it = std::find(argv.begin(), argv.end(), "--coordinator-ca");
  ASSERT_NE(it, argv.end());
  ASSERT_NE(it + 1, argv.end());
  EXPECT_EQ(*(it + 1), "/etc/fp8/ca.pem");
}

TEST(TrainerCommand, AGpuWorkerNamesItsGpu) {
  WorkerConfig c = config();
  EXPECT_FALSE(contains(build_trainer_command(start(1), c, {})->argv, "--cuda-device"));
  c.device_kind = v1::ResourceSpec::CUDA;
  c.device_name = "cuda:3";
  std::vector<std::string> argv = build_trainer_command(start(1), c, {})->argv;
  auto it = std::find(argv.begin(), argv.end(), "--cuda-device");
  ASSERT_NE(it, argv.end());
  ASSERT_NE(it + 1, argv.end());
  EXPECT_EQ(*(it + 1), "3");
}

TEST(TrainerCommand, TokenOnlyInTheEnvironment) {
  absl::StatusOr<TrainerCommand> cmd = build_trainer_command(
      start(1), config(),
      {"PATH=/usr/bin", "FP8_WORKER_TOKEN=worker-secret", "FP8_TRAINER_TOKEN=stale", "HOME=/root"});
  ASSERT_TRUE(cmd.ok()) << cmd.status();
  for (const std::string& a : cmd->argv) EXPECT_EQ(a.find("s3cret"), std::string::npos) << a;
  EXPECT_TRUE(contains(cmd->env, "FP8_TRAINER_TOKEN=s3cret-token"));
  EXPECT_TRUE(contains(cmd->env, "PATH=/usr/bin"));
  EXPECT_TRUE(contains(cmd->env, "HOME=/root"));
  EXPECT_FALSE(contains(cmd->env, "FP8_TRAINER_TOKEN=stale"));
  for (const std::string& e : cmd->env) EXPECT_EQ(e.find("worker-secret"), std::string::npos) << e;
}

TEST(TrainerCommand, ListenHostComesFromTheAddress) {
  WorkerConfig c = config();
  c.listen_host = "node-4.cluster";
  std::vector<std::string> argv = build_trainer_command(start(1), c, {})->argv;
  auto it = std::find(argv.begin(), argv.end(), "--listen");
  ASSERT_NE(it, argv.end());
  EXPECT_EQ(*(it + 1), "node-4.cluster");
}

TEST(TrainerCommand, RefusesWhatCannotRun) {
  v1::StartRank s = start(1);
  s.set_job_id("../etc");
  EXPECT_FALSE(build_trainer_command(s, config(), {}).ok());
  s = start(1);
  s.set_job_id("a/b");
  EXPECT_FALSE(build_trainer_command(s, config(), {}).ok());
  s = start(0);
  EXPECT_FALSE(build_trainer_command(s, config(), {}).ok());
  s = start(1);
  s.set_rank(2);
  absl::StatusOr<TrainerCommand> bad = build_trainer_command(s, config(), {});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("StartRank.rank"), absl::string_view::npos);
  s = start(1);
  s.clear_trainer_token();
  EXPECT_FALSE(build_trainer_command(s, config(), {}).ok());
}

}  // namespace
}  // namespace fp8::worker
