// The fixture of the coordinator's unit tests: a Coordinator over a real SQLite file in a
// scratch folder, with workers and trainers played by the test through the same calls the
// services make.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/coordinator/coordinator.h"

namespace fp8::server {

namespace fs = std::filesystem;

class CoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / absl::StrCat("fp8_coordinator_test_", ::getpid(), "_",
                                                    ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    open();
  }
  void TearDown() override {
    c_.reset();
    fs::remove_all(dir_);
  }

  void open() {
    c_.reset();
    auto store = store::CoordinatorStore::open((dir_ / "state.db").string());
    ASSERT_TRUE(store.ok()) << store.status();
    CoordinatorOptions options;
    options.heartbeat_interval = absl::Milliseconds(50);
    options.lost_after = lost_after_;
    options.roots.data = {dir_ / "data"};
    options.roots.checkpoint = {dir_ / "ckpt"};
    auto made = Coordinator::create(std::move(*store), rendezvous_, options);
    ASSERT_TRUE(made.ok()) << made.status();
    c_ = std::move(*made);
  }

  v1::JobSpec make_spec(int world_size, int priority = 0, int max_restarts = 0) {
    v1::JobSpec spec;
    spec.set_name("tiny");
    spec.set_priority(priority);
    spec.mutable_model()->set_dim(64);
    spec.mutable_model()->set_n_layers(1);
    spec.mutable_model()->set_n_heads(4);
    spec.mutable_model()->set_max_seq_len(32);
    spec.mutable_data()->set_path((dir_ / "data" / "corpus.txt").string());
    spec.mutable_data()->set_seq_len(32);
    spec.mutable_train()->set_steps(20);
    spec.mutable_train()->set_batch_size(2);
    spec.mutable_train()->set_lr(1e-3);
    spec.mutable_checkpoint()->set_dir((dir_ / "ckpt" / "alice" / "tiny").string());
    spec.mutable_resources()->set_world_size(world_size);
    spec.mutable_restarts()->set_max_restarts(max_restarts);
    spec.mutable_restarts()->set_backoff_seconds(0);
    return spec;
  }

  // A user's checkpoint folders are in its own subtree of the root.
  std::string submit_as(const Principal& who, const v1::JobSpec& spec) {
    v1::SubmitJobRequest r;
    *r.mutable_spec() = spec;
    if (!who.is_admin()) r.mutable_spec()->mutable_checkpoint()->set_dir((dir_ / "ckpt" / who.name / "tiny").string());
    auto job = c_->submit(who, r);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? job->id() : "";
  }

  std::string add_worker(const std::string& previous = "") {
    v1::RegisterWorkerRequest r;
    r.set_device_kind(v1::ResourceSpec::CPU);
    r.set_device_name("cpu");
    r.set_slots(1);
    r.set_previous_worker_id(previous);
    auto got = c_->register_worker(worker_, r);
    EXPECT_TRUE(got.ok()) << got.status();
    return got.ok() ? got->worker_id() : "";
  }

  // One heartbeat listing `ranks`; returns the commands.
  std::vector<v1::WorkerCommand> beat(const std::string& worker_id, const std::vector<v1::RankStatus>& ranks = {}) {
    v1::HeartbeatRequest r;
    r.set_worker_id(worker_id);
    for (const auto& s : ranks) *r.add_ranks() = s;
    auto got = c_->heartbeat(worker_, r);
    EXPECT_TRUE(got.ok()) << got.status();
    if (!got.ok()) return {};
    return {got->commands().begin(), got->commands().end()};
  }

  static v1::RankStatus running_status(const v1::StartRank& s) {
    v1::RankStatus st;
    st.set_job_id(s.job_id());
    st.set_attempt(s.attempt());
    st.set_rank(s.rank());
    st.set_state(v1::RankStatus::RUNNING);
    return st;
  }

  absl::Status exit(const std::string& worker_id, const v1::StartRank& s, int code) {
    v1::ReportRankExitRequest r;
    r.set_worker_id(worker_id);
    r.set_job_id(s.job_id());
    r.set_attempt(s.attempt());
    r.set_rank(s.rank());
    r.set_exit_code(code);
    return c_->report_rank_exit(worker_, r);
  }

  v1::Job get(const std::string& id) {
    auto job = c_->get_job(admin_, id);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *job : v1::Job();
  }

  // A job of alice's with `spec` running on a fresh worker, and its trainer's principal.
  struct RunningJob {
    std::string worker, id;
    v1::StartRank start;
    Principal trainer;
  };
  RunningJob start_running(const v1::JobSpec& spec) {
    RunningJob job;
    job.worker = add_worker();
    job.id = submit_as(alice_, spec);
    job.start = beat(job.worker)[0].start_rank();
    beat(job.worker, {running_status(job.start)});
    auto trainer = c_->authenticate(job.start.trainer_token());
    EXPECT_TRUE(trainer.ok()) << trainer.status();
    if (trainer.ok()) job.trainer = *trainer;
    return job;
  }

  fs::path dir_;
  absl::Duration lost_after_ = absl::Seconds(30);
  RendezvousStore rendezvous_;
  std::unique_ptr<Coordinator> c_;
  Principal admin_{Role::kAdmin, "root", "", 0};
  Principal alice_{Role::kUser, "alice", "", 0};
  Principal bob_{Role::kUser, "bob", "", 0};
  Principal worker_{Role::kWorker, "workers", "", 0};
};

}  // namespace fp8::server
