// Every RPC of the coordinator fed mutated request bytes over real gRPC on loopback (a
// seeded random mutator: flips, insertions, deletions, truncations and splices of valid
// requests), for a bounded number of calls: each call is answered, within its deadline,
// with a status the API defines for bad input (never INTERNAL or UNKNOWN), and the
// coordinator goes on answering valid calls. The same seed gives the same calls.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <future>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fp8/v1/job_service.grpc.pb.h"
#include "fp8/v1/rendezvous_service.grpc.pb.h"
#include "fp8/v1/trainer_service.grpc.pb.h"
#include "fp8/v1/worker_service.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/malformed_requests.h"
#include "server/coordinator/services.h"
#include "server/rendezvous/rendezvous_service.h"

namespace fp8::server {
namespace {

namespace fs = std::filesystem;

constexpr int kCallsPerMethod = 150;

class RequestFuzzTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / absl::StrCat("fp8_request_fuzz_", ::getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "data");
    auto store = store::CoordinatorStore::open((dir_ / "state.db").string());
    ASSERT_TRUE(store.ok()) << store.status();
    CoordinatorOptions options;
    options.roots.data = {dir_};
    options.roots.checkpoint = {dir_};
    auto made = Coordinator::create(std::move(*store), rendezvous_, options);
    ASSERT_TRUE(made.ok()) << made.status();
    c_ = std::move(*made);
    jobs_ = std::make_unique<JobServiceImpl>(*c_);
    workers_ = std::make_unique<WorkerServiceImpl>(*c_);
    trainers_ = std::make_unique<TrainerServiceImpl>(*c_);
    rendezvous_service_ = std::make_unique<RendezvousServiceImpl>(
        rendezvous_, [this](grpc::ServerContext& ctx, std::string_view ns) -> grpc::Status {
          absl::StatusOr<Principal> who = caller(*c_, ctx);
          if (!who.ok()) return to_grpc(who.status());
          return to_grpc(c_->authorize_rendezvous(*who, ns));
        });
    grpc::ServerBuilder builder;
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
    interceptors.push_back(make_malformed_request_interceptor_factory());
    builder.experimental().SetInterceptorCreators(std::move(interceptors));
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.SetMaxReceiveMessageSize(4 << 20);
    for (grpc::Service* s : std::initializer_list<grpc::Service*>{jobs_.get(), workers_.get(), trainers_.get(),
                                                                  rendezvous_service_.get()}) {
      builder.RegisterService(s);
    }
    server_ = builder.BuildAndStart();
    ASSERT_TRUE(server_ != nullptr && port_ > 0);
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", port_), grpc::InsecureChannelCredentials());
    admin_ = *c_->create_token(Role::kAdmin, "admin");
    worker_ = *c_->create_token(Role::kWorker, "workers");
  }
  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    c_.reset();
    fs::remove_all(dir_);
  }

  // A running attempt: a worker, a job on it, and the attempt's trainer token.
  void start_an_attempt(v1::JobSpec* spec) {
    spec->set_name("fuzz");
    spec->mutable_model()->set_dim(32);
    spec->mutable_model()->set_n_layers(1);
    spec->mutable_model()->set_n_heads(2);
    spec->mutable_model()->set_max_seq_len(16);
    spec->mutable_data()->set_path((dir_ / "data" / "corpus.txt").string());
    spec->mutable_train()->set_steps(100);
    spec->mutable_train()->set_batch_size(2);
    spec->mutable_train()->set_lr(1e-3);
    spec->mutable_checkpoint()->set_dir((dir_ / "ckpt").string());
    Principal worker{Role::kWorker, "workers", "", 0};
    v1::RegisterWorkerRequest reg;
    reg.set_device_kind(v1::ResourceSpec::CPU);
    reg.set_device_name("cpu");
    reg.set_slots(1);
    auto registered = c_->register_worker(worker, reg);
    ASSERT_TRUE(registered.ok()) << registered.status();
    worker_id_ = registered->worker_id();
    v1::SubmitJobRequest submit;
    *submit.mutable_spec() = *spec;
    auto job = c_->submit(Principal{Role::kAdmin, "admin", "", 0}, submit);
    ASSERT_TRUE(job.ok()) << job.status();
    job_id_ = job->id();
    v1::HeartbeatRequest beat;
    beat.set_worker_id(worker_id_);
    auto commands = c_->heartbeat(worker, beat);
    ASSERT_TRUE(commands.ok() && commands->commands_size() == 1);
    trainer_ = commands->commands(0).start_rank().trainer_token();
    namespace_ = commands->commands(0).start_rank().rendezvous_namespace();
  }

  // One call of `method` with `bytes` as its request; its status.
  grpc::Status call(const std::string& method, const std::string& token, const std::string& bytes,
                    std::chrono::milliseconds deadline) {
    grpc::GenericStub stub(channel_);
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + token);
    ctx.set_deadline(std::chrono::system_clock::now() + deadline);
    grpc::Slice slice(bytes);
    grpc::ByteBuffer request(&slice, 1), response;
    std::promise<grpc::Status> done;
    stub.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &response,
                   [&done](grpc::Status s) { done.set_value(std::move(s)); });
    return done.get_future().get();
  }

  fs::path dir_;
  RendezvousStore rendezvous_;
  std::unique_ptr<Coordinator> c_;
  std::unique_ptr<JobServiceImpl> jobs_;
  std::unique_ptr<WorkerServiceImpl> workers_;
  std::unique_ptr<TrainerServiceImpl> trainers_;
  std::unique_ptr<RendezvousServiceImpl> rendezvous_service_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  int port_ = 0;
  std::string admin_, worker_, trainer_, worker_id_, job_id_, namespace_;
};

// `seed` changed at random: a few flips, insertions, deletions, a truncation or a splice.
std::string mutate(const std::string& seed, std::mt19937& rng) {
  std::string s = seed;
  const int edits = 1 + static_cast<int>(rng() % 4);
  for (int e = 0; e < edits; ++e) {
    const size_t at = s.empty() ? 0 : rng() % (s.size() + 1);
    switch (rng() % 5) {
      case 0:
        if (at < s.size()) s[at] = static_cast<char>(s[at] ^ (1 << (rng() % 8)));
        break;
      case 1:
        s.insert(at, 1, static_cast<char>(rng() % 256));
        break;
      case 2:
        if (at < s.size()) s.erase(at, 1 + rng() % std::min<size_t>(8, s.size() - at));
        break;
      case 3:
        s.resize(at);
        break;
      default:
        s.insert(at, s.substr(rng() % (s.size() + 1), rng() % 16));  // a piece of itself again
    }
  }
  return s;
}

TEST_F(RequestFuzzTest, MutatedRequestsGetAnAnswerAndNeverBreakTheCoordinator) {
  v1::JobSpec spec;
  ASSERT_NO_FATAL_FAILURE(start_an_attempt(&spec));
  v1::RankRef caller;
  caller.set_job_id(job_id_);
  caller.set_attempt(1);

  // A valid request of each method, and who calls it.
  std::map<std::string, std::pair<std::string, std::string>> seeds;  // method -> (token, bytes)
  v1::SubmitJobRequest submit;
  *submit.mutable_spec() = spec;
  submit.set_idempotency_key("k");
  seeds["/fp8.v1.JobService/Submit"] = {admin_, submit.SerializeAsString()};
  v1::GetJobRequest get;
  get.set_job_id(job_id_);
  seeds["/fp8.v1.JobService/GetJob"] = {admin_, get.SerializeAsString()};
  v1::ListJobsRequest list;
  list.set_page_size(10);
  list.add_states(v1::Job::RUNNING);
  seeds["/fp8.v1.JobService/ListJobs"] = {admin_, list.SerializeAsString()};
  v1::CancelJobRequest cancel;
  cancel.set_job_id("job-999");
  cancel.set_reason("fuzz");
  seeds["/fp8.v1.JobService/CancelJob"] = {admin_, cancel.SerializeAsString()};
  v1::ResumeJobRequest resume;
  resume.set_job_id(job_id_);
  resume.set_world_size(3);
  seeds["/fp8.v1.JobService/ResumeJob"] = {admin_, resume.SerializeAsString()};
  v1::GetJobLogsRequest logs;
  logs.set_job_id(job_id_);
  logs.set_tail_lines(5);
  logs.set_after_sequence(1);
  seeds["/fp8.v1.JobService/GetJobLogs"] = {admin_, logs.SerializeAsString()};
  seeds["/fp8.v1.JobService/ListWorkers"] = {admin_, ""};
  seeds["/fp8.v1.JobService/GetJobAmax"] = {admin_, get.SerializeAsString()};
  seeds["/fp8.v1.JobService/GetVersion"] = {admin_, ""};
  v1::RegisterWorkerRequest reg;
  reg.set_device_kind(v1::ResourceSpec::CPU);
  reg.set_device_name("cpu");
  reg.set_slots(1);
  reg.set_cpus(2);
  reg.set_previous_worker_id(worker_id_);
  seeds["/fp8.v1.WorkerService/RegisterWorker"] = {worker_, reg.SerializeAsString()};
  v1::HeartbeatRequest beat;
  beat.set_worker_id(worker_id_);
  v1::RankStatus* status = beat.add_ranks();
  status->set_job_id(job_id_);
  status->set_attempt(1);
  status->set_state(v1::RankStatus::RUNNING);
  seeds["/fp8.v1.WorkerService/Heartbeat"] = {worker_, beat.SerializeAsString()};
  v1::ReportRankExitRequest exit;
  exit.set_worker_id(worker_id_);
  exit.set_job_id("job-999");
  exit.set_attempt(1);
  exit.set_exit_code(1);
  seeds["/fp8.v1.WorkerService/ReportRankExit"] = {worker_, exit.SerializeAsString()};
  v1::ReportProgressRequest progress;
  *progress.mutable_caller() = caller;
  progress.mutable_progress()->set_step(10);
  progress.mutable_progress()->set_window_steps(10);
  progress.mutable_progress()->set_loss(2.5);
  seeds["/fp8.v1.TrainerService/ReportProgress"] = {trainer_, progress.SerializeAsString()};
  v1::ReportAmaxHistoriesRequest amax;
  *amax.mutable_caller() = caller;
  amax.set_step(10);
  v1::AmaxHistory* h = amax.add_histories();
  h->set_layer("layers.0.attention.wq");
  h->set_operand(v1::AmaxHistory::INPUT);
  h->add_history(1.0f);
  h->set_scale(2.0f);
  seeds["/fp8.v1.TrainerService/ReportAmaxHistories"] = {trainer_, amax.SerializeAsString()};
  v1::GetAmaxHistoriesRequest get_amax;
  *get_amax.mutable_caller() = caller;
  seeds["/fp8.v1.TrainerService/GetAmaxHistories"] = {trainer_, get_amax.SerializeAsString()};
  v1::CommitCheckpointRequest commit;
  *commit.mutable_caller() = caller;
  commit.set_step(10);
  commit.set_world_size(1);
  commit.set_dir((dir_ / "ckpt" / job_id_ / "step-00000010").string());
  seeds["/fp8.v1.TrainerService/CommitCheckpoint"] = {trainer_, commit.SerializeAsString()};
  v1::AppendLogsRequest append;
  *append.mutable_caller() = caller;
  append.add_lines()->set_text("a line");
  seeds["/fp8.v1.TrainerService/AppendLogs"] = {trainer_, append.SerializeAsString()};
  v1::ReportCastNumericsRequest numerics;
  *numerics.mutable_caller() = caller;
  numerics.set_step(10);
  v1::CastNumerics* cast = numerics.add_casts();
  cast->set_layer("layers.0.attention.wq");
  cast->set_operand(v1::AmaxHistory::WEIGHT);
  cast->set_scale(1.0f);
  seeds["/fp8.v1.TrainerService/ReportCastNumerics"] = {trainer_, numerics.SerializeAsString()};
  v1::RendezvousSetRequest set;
  set.set_rendezvous_namespace(namespace_);
  set.set_key("rank/0");
  set.set_value("addr");
  seeds["/fp8.v1.RendezvousService/Set"] = {trainer_, set.SerializeAsString()};
  v1::RendezvousGetRequest rget;
  rget.set_rendezvous_namespace(namespace_);
  rget.set_key("rank/0");
  rget.set_timeout_ms(10);
  seeds["/fp8.v1.RendezvousService/Get"] = {trainer_, rget.SerializeAsString()};
  v1::RendezvousWaitRequest wait;
  wait.set_rendezvous_namespace(namespace_);
  wait.add_keys("rank/0");
  wait.set_timeout_ms(10);
  seeds["/fp8.v1.RendezvousService/Wait"] = {trainer_, wait.SerializeAsString()};

  // Every method of every service has a seed.
  int methods = 0;
  for (const google::protobuf::Descriptor* in_file :
       {v1::SubmitJobRequest::descriptor(), v1::HeartbeatRequest::descriptor(),
        v1::ReportProgressRequest::descriptor(), v1::RendezvousSetRequest::descriptor()}) {
    const google::protobuf::ServiceDescriptor& service = *in_file->file()->service(0);
    for (int m = 0; m < service.method_count(); ++m) {
      if (service.method(m)->server_streaming()) continue;  // WatchJob: its request is the job id of GetJob
      const std::string name = absl::StrCat("/", service.full_name(), "/", service.method(m)->name());
      EXPECT_TRUE(seeds.count(name)) << name << " has no seed";
      ++methods;
    }
  }
  EXPECT_EQ(methods, static_cast<int>(seeds.size()));

  std::mt19937 rng(20261128);
  std::map<grpc::StatusCode, int> codes;  // what the calls got, for the log
  for (const auto& [method, seed] : seeds) {
    const bool may_wait = method.find("RendezvousService/Get") != std::string::npos ||
                          method.find("RendezvousService/Wait") != std::string::npos;
    for (int i = 0; i < kCallsPerMethod; ++i) {
      const std::string bytes = mutate(seed.second, rng);
      const grpc::Status s = call(method, seed.first, bytes, std::chrono::milliseconds(may_wait ? 1000 : 5000));
      const grpc::StatusCode code = s.error_code();
      ++codes[code];
      EXPECT_NE(code, grpc::StatusCode::INTERNAL) << method << ": " << s.error_message();
      EXPECT_NE(code, grpc::StatusCode::UNKNOWN) << method << ": " << s.error_message();
      if (!may_wait) {
        EXPECT_NE(code, grpc::StatusCode::DEADLINE_EXCEEDED) << method << " hung";
      }
    }
    // The coordinator still answers a valid call.
    const grpc::Status after = call("/fp8.v1.JobService/GetJob", admin_, get.SerializeAsString(),
                                    std::chrono::milliseconds(5000));
    ASSERT_TRUE(after.ok()) << "after " << method << ": " << after.error_message();
  }
  for (const auto& [code, n] : codes) std::printf("status %d: %d calls\n", static_cast<int>(code), n);
}

}  // namespace
}  // namespace fp8::server
