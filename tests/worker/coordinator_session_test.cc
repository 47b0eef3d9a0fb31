// The session against an in-process fake WorkerService: registration, heartbeats that
// start a rank, the exit report, re-registration on NOT_FOUND, a refused token, and a
// coordinator that is not there at all.
#include "worker/fp8_worker/coordinator_session.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "fp8/v1/worker_service.grpc.pb.h"
#include "tests/worker/worker_test_util.h"

namespace fp8::worker {
namespace {

using testing::TempDir;
using testing::wait_for;
using testing::write_script;

class FakeWorkerService final : public v1::WorkerService::Service {
 public:
  grpc::Status RegisterWorker(grpc::ServerContext* ctx, const v1::RegisterWorkerRequest* req,
                              v1::RegisterWorkerResponse* resp) override {
    std::lock_guard<std::mutex> lock(mu);
    if (!authorized(ctx)) return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "bad worker token");
    registrations.push_back(*req);
    current_id = absl::StrCat("w-", registrations.size());
    resp->set_worker_id(current_id);
    resp->set_heartbeat_interval_ms(50);
    resp->set_lost_after_ms(5000);
    return grpc::Status::OK;
  }

  grpc::Status Heartbeat(grpc::ServerContext* ctx, const v1::HeartbeatRequest* req,
                         v1::HeartbeatResponse* resp) override {
    std::lock_guard<std::mutex> lock(mu);
    if (!authorized(ctx)) return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "bad worker token");
    if (req->worker_id() != current_id || forget_worker) {
      forget_worker = false;
      current_id.clear();
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown worker " + req->worker_id());
    }
    heartbeats.push_back(*req);
    for (v1::WorkerCommand& c : commands) *resp->add_commands() = std::move(c);
    commands.clear();
    return grpc::Status::OK;
  }

  grpc::Status ReportRankExit(grpc::ServerContext* ctx, const v1::ReportRankExitRequest* req,
                              v1::ReportRankExitResponse*) override {
    std::lock_guard<std::mutex> lock(mu);
    if (!authorized(ctx)) return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "bad worker token");
    exits.push_back(*req);
    return grpc::Status::OK;
  }

  bool authorized(grpc::ServerContext* ctx) const {
    auto it = ctx->client_metadata().find("authorization");
    return it != ctx->client_metadata().end() && std::string(it->second.data(), it->second.size()) == "Bearer " + token;
  }

  std::mutex mu;
  std::string token = "worker-token";
  std::string current_id;
  bool forget_worker = false;
  std::vector<v1::RegisterWorkerRequest> registrations;
  std::vector<v1::HeartbeatRequest> heartbeats;
  std::vector<v1::ReportRankExitRequest> exits;
  std::vector<v1::WorkerCommand> commands;  // handed out with the next heartbeat
};

class CoordinatorSessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
  }
  void TearDown() override {
    stop_ = 1;
    if (runner_.joinable()) runner_.join();
    if (server_) server_->Shutdown();
  }

  WorkerConfig make_config(const std::string& script_body) {
    WorkerConfig c;
    c.coordinator = absl::StrCat("127.0.0.1:", port_);
    c.token = "worker-token";
    c.token_source = "test";
    c.trainer = dir_.path() + "/fake-train";
    write_script(c.trainer, script_body);
    c.work_dir = dir_.path() + "/work";
    c.stop_grace_default_s = 30;
    return c;
  }

  static SessionOptions fast_options() {
    SessionOptions o;
    o.rpc_deadline = std::chrono::milliseconds(2000);
    o.backoff_initial = std::chrono::milliseconds(10);
    o.backoff_max = std::chrono::milliseconds(50);
    o.poll_interval = std::chrono::milliseconds(10);
    o.shutdown_report_budget = std::chrono::milliseconds(2000);
    return o;
  }

  std::shared_ptr<grpc::Channel> channel(const std::string& address) {
    return grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  }

  void run_in_background(CoordinatorSession& session) {
    runner_ = std::thread([this, &session] { result_ = session.run(stop_); });
  }

  absl::Status stop_and_join() {
    stop_ = 1;
    runner_.join();
    return result_;
  }

  template <typename F>
  bool eventually(F check) {
    return wait_for([&] {
      std::lock_guard<std::mutex> lock(service_.mu);
      return check();
    });
  }

  static v1::WorkerCommand start_command(const std::string& job, int attempt) {
    v1::WorkerCommand c;
    v1::StartRank* s = c.mutable_start_rank();
    s->set_job_id(job);
    s->set_attempt(attempt);
    s->set_rank(0);
    s->set_world_size(1);
    s->set_rendezvous_namespace(absl::StrCat(job, "/attempt-", attempt, "/"));
    s->set_coordinator_address("127.0.0.1:1");  // logs go nowhere; that must not matter
    s->set_trainer_token("tt");
    return c;
  }

  FakeWorkerService service_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  TempDir dir_;
  std::atomic<int> stop_{0};
  std::thread runner_;
  absl::Status result_;
};

TEST_F(CoordinatorSessionTest, RegistersStartsARankAndReportsItsExit) {
  WorkerConfig config = make_config("echo 'rank done badly'; exit 3");
  config.cpus = 4;
  config.memory_gb = 8;
  config.address = "127.0.0.1:9400";
  RankSupervisor ranks(config, nullptr, {"PATH=/usr/bin:/bin"});
  CoordinatorSession session(config, channel(config.coordinator), ranks, fast_options());
  {
    std::lock_guard<std::mutex> lock(service_.mu);
    service_.commands.push_back(start_command("job-1", 1));
  }
  run_in_background(session);
  ASSERT_TRUE(eventually([&] { return !service_.exits.empty(); }));
  EXPECT_TRUE(stop_and_join().ok());

  std::lock_guard<std::mutex> lock(service_.mu);
  ASSERT_EQ(service_.registrations.size(), 1u);
  const v1::RegisterWorkerRequest& reg = service_.registrations[0];
  EXPECT_EQ(reg.device_kind(), v1::ResourceSpec::CPU);
  EXPECT_EQ(reg.device_name(), "cpu");
  EXPECT_EQ(reg.slots(), 1);
  EXPECT_EQ(reg.cpus(), 4);
  EXPECT_EQ(reg.memory_gb(), 8);
  EXPECT_EQ(reg.address(), "127.0.0.1:9400");
  EXPECT_EQ(reg.version(), "0.1.0");
  EXPECT_TRUE(reg.previous_worker_id().empty());
  ASSERT_EQ(service_.exits.size(), 1u);
  const v1::ReportRankExitRequest& e = service_.exits[0];
  EXPECT_EQ(e.worker_id(), "w-1");
  EXPECT_EQ(e.job_id(), "job-1");
  EXPECT_EQ(e.attempt(), 1);
  EXPECT_EQ(e.rank(), 0);
  ASSERT_TRUE(e.has_exit_code());
  EXPECT_EQ(e.exit_code(), 3);
  EXPECT_FALSE(e.has_signal());
  EXPECT_EQ(e.message(), "rank done badly");
  EXPECT_EQ(session.worker_id(), "w-1");
}

TEST_F(CoordinatorSessionTest, NotFoundReRegistersWithTheRunningRanks) {
  WorkerConfig config = make_config("trap 'echo term; exit 0' TERM; echo up; while true; do sleep 0.1; done");
  RankSupervisor ranks(config, nullptr, {"PATH=/usr/bin:/bin"});
  CoordinatorSession session(config, channel(config.coordinator), ranks, fast_options());
  {
    std::lock_guard<std::mutex> lock(service_.mu);
    service_.commands.push_back(start_command("job-2", 1));
  }
  run_in_background(session);
  // Wait until a heartbeat carries the rank as running, then forget the worker.
  ASSERT_TRUE(eventually([&] {
    return !service_.heartbeats.empty() && service_.heartbeats.back().ranks_size() == 1 &&
           service_.heartbeats.back().ranks(0).state() == v1::RankStatus::RUNNING;
  }));
  {
    std::lock_guard<std::mutex> lock(service_.mu);
    service_.forget_worker = true;
  }
  ASSERT_TRUE(eventually([&] { return service_.registrations.size() == 2; }));
  {
    std::lock_guard<std::mutex> lock(service_.mu);
    const v1::RegisterWorkerRequest& again = service_.registrations[1];
    EXPECT_EQ(again.previous_worker_id(), "w-1");
    ASSERT_EQ(again.running_size(), 1);
    EXPECT_EQ(again.running(0).job_id(), "job-2");
    EXPECT_GT(again.running(0).pid(), 0);
    // Then the coordinator stops the attempt.
    v1::WorkerCommand stop;
    stop.mutable_stop_rank()->set_job_id("job-2");
    stop.mutable_stop_rank()->set_attempt(1);
    stop.mutable_stop_rank()->set_grace_seconds(30);
    stop.mutable_stop_rank()->set_reason("cancelled");
    service_.commands.push_back(stop);
  }
  ASSERT_TRUE(eventually([&] { return !service_.exits.empty(); }));
  EXPECT_TRUE(stop_and_join().ok());
  std::lock_guard<std::mutex> lock(service_.mu);
  EXPECT_EQ(service_.exits[0].worker_id(), "w-2");
  EXPECT_EQ(service_.exits[0].exit_code(), 0);
  EXPECT_EQ(service_.exits[0].message(), "term");
}

TEST_F(CoordinatorSessionTest, BadTokenIsFatal) {
  WorkerConfig config = make_config("exit 0");
  config.token = "wrong";
  RankSupervisor ranks(config, nullptr, {});
  CoordinatorSession session(config, channel(config.coordinator), ranks, fast_options());
  std::atomic<int> stop{0};
  absl::Status s = session.run(stop);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
  EXPECT_NE(s.message().find("token"), absl::string_view::npos) << s;
}

// A coordinator that is not there: the session keeps trying, the ranks it has are
// untouched, and a stop still ends everything cleanly.
TEST_F(CoordinatorSessionTest, UnreachableCoordinatorKeepsRetryingAndStopsCleanly) {
  WorkerConfig config = make_config("exit 0");
  server_->Shutdown();
  server_.reset();
  RankSupervisor ranks(config, nullptr, {});
  CoordinatorSession session(config, channel(config.coordinator), ranks, fast_options());
  run_in_background(session);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_TRUE(stop_and_join().ok());
  EXPECT_TRUE(session.worker_id().empty());
}

// SIGINT to fp8-worker: ranks get SIGTERM, and their exits are reported before Run returns.
TEST_F(CoordinatorSessionTest, StopRequestStopsRanksAndReportsThem) {
  WorkerConfig config = make_config("trap 'echo shutting down; exit 130' TERM; echo up; while true; do sleep 0.1; done");
  RankSupervisor ranks(config, nullptr, {"PATH=/usr/bin:/bin"});
  CoordinatorSession session(config, channel(config.coordinator), ranks, fast_options());
  {
    std::lock_guard<std::mutex> lock(service_.mu);
    service_.commands.push_back(start_command("job-3", 2));
  }
  run_in_background(session);
  ASSERT_TRUE(eventually([&] {
    return !service_.heartbeats.empty() && service_.heartbeats.back().ranks_size() == 1 &&
           service_.heartbeats.back().ranks(0).state() == v1::RankStatus::RUNNING;
  }));
  EXPECT_TRUE(stop_and_join().ok());
  EXPECT_TRUE(ranks.empty());
  std::lock_guard<std::mutex> lock(service_.mu);
  ASSERT_EQ(service_.exits.size(), 1u);
  EXPECT_EQ(service_.exits[0].job_id(), "job-3");
  EXPECT_EQ(service_.exits[0].attempt(), 2);
  EXPECT_EQ(service_.exits[0].exit_code(), 130);
  EXPECT_EQ(service_.exits[0].message(), "shutting down");
}

}  // namespace
}  // namespace fp8::worker
