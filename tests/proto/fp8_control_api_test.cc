// The control-plane API (proto/fp8/v1/*_service.proto): (a) one request of each service
// round-trips through the wire format unchanged; (b) the generated gRPC code serves and
// calls for real: a minimal in-process RendezvousService on 127.0.0.1 (an ephemeral port)
// driven through the generated stub, blocking Get included.

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include <google/protobuf/util/message_differencer.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "fp8/v1/job_service.grpc.pb.h"
#include "fp8/v1/job_service.pb.h"
#include "fp8/v1/rendezvous_service.grpc.pb.h"
#include "fp8/v1/rendezvous_service.pb.h"
#include "fp8/v1/trainer_service.grpc.pb.h"
#include "fp8/v1/trainer_service.pb.h"
#include "fp8/v1/worker_service.grpc.pb.h"
#include "fp8/v1/worker_service.pb.h"

namespace {

using google::protobuf::Message;
using google::protobuf::util::MessageDifferencer;

// Serializes `in`, parses the bytes into a fresh message of the same type, and checks
// that nothing was lost or changed.
template <typename M>
void expect_round_trip(const M& in) {
  std::string wire;
  ASSERT_TRUE(in.SerializeToString(&wire)) << in.GetTypeName();
  ASSERT_FALSE(wire.empty()) << in.GetTypeName();
  M out;
  ASSERT_TRUE(out.ParseFromString(wire)) << in.GetTypeName();
  EXPECT_TRUE(MessageDifferencer::Equals(in, out))
      << in.GetTypeName() << "\nin:  " << in.ShortDebugString()
      << "\nout: " << out.ShortDebugString();
}

fp8::v1::JobSpec small_spec() {
  fp8::v1::JobSpec spec;
  spec.set_name("tiny");
  spec.set_owner("alice");
  spec.mutable_model()->set_dim(64);
  spec.mutable_train()->set_steps(20);
  spec.mutable_resources()->set_world_size(2);
  spec.mutable_fp8()->set_recipe(fp8::v1::Fp8Spec::DELAYED);
  return spec;
}

TEST(ControlApiMessages, JobServiceRoundTrips) {
  fp8::v1::SubmitJobRequest submit;
  *submit.mutable_spec() = small_spec();
  submit.set_idempotency_key("retry-1");
  expect_round_trip(submit);

  fp8::v1::Job job;
  job.set_id("job-7");
  *job.mutable_spec() = small_spec();
  job.set_state(fp8::v1::Job::RESTARTING);
  job.set_attempts(2);
  job.set_restarts_left(3);
  job.set_created_unix_ms(1'700'000'000'000);
  job.mutable_latest_progress()->set_step(10);
  job.mutable_latest_progress()->set_val_loss(2.5);
  auto* attempt = job.add_attempt_history();
  attempt->set_number(1);
  attempt->set_state(fp8::v1::Attempt::FAILED);
  attempt->set_end_reason("rank 1 on worker w-3 exited with signal 9");
  expect_round_trip(job);

  fp8::v1::JobEvent event;
  event.set_sequence(42);
  event.set_job_id("job-7");
  auto* numerics = event.mutable_numerics();
  numerics->set_kind(fp8::v1::NumericsEvent::AMAX_JUMP);
  numerics->set_layer("layers.0.attention.wq");
  numerics->set_operand(fp8::v1::AmaxHistory::WEIGHT);
  expect_round_trip(event);
  EXPECT_EQ(event.event_case(), fp8::v1::JobEvent::kNumerics);

  fp8::v1::GetJobLogsRequest logs;
  logs.set_job_id("job-7");
  logs.set_rank(0);  // optional: rank 0 is distinguishable from "every rank"
  logs.set_tail_lines(50);
  fp8::v1::GetJobLogsRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(logs.SerializeAsString()));
  EXPECT_TRUE(parsed.has_rank());
}

TEST(ControlApiMessages, WorkerServiceRoundTrips) {
  fp8::v1::RegisterWorkerRequest reg;
  reg.set_device_kind(fp8::v1::ResourceSpec::CUDA);
  reg.set_device_name("cuda:0");
  reg.set_address("10.0.0.5:9100");
  reg.set_slots(1);
  reg.set_version("0.1.0");
  expect_round_trip(reg);

  fp8::v1::HeartbeatResponse beat;
  auto* start = beat.add_commands()->mutable_start_rank();
  start->set_job_id("job-7");
  start->set_attempt(2);
  start->set_rank(1);
  start->set_world_size(2);
  *start->mutable_spec() = small_spec();
  start->set_rendezvous_namespace("job-7/attempt-2/");
  start->set_coordinator_address("127.0.0.1:7070");
  start->set_trainer_token("secret");
  auto* stop = beat.add_commands()->mutable_stop_rank();
  stop->set_job_id("job-7");
  stop->set_attempt(1);
  stop->set_grace_seconds(10);
  expect_round_trip(beat);

  fp8::v1::ReportRankExitRequest exit;
  exit.set_worker_id("w-3");
  exit.set_job_id("job-7");
  exit.set_attempt(2);
  exit.set_rank(1);
  exit.set_signal(9);
  expect_round_trip(exit);
}

TEST(ControlApiMessages, TrainerServiceRoundTrips) {
  fp8::v1::ReportProgressRequest progress;
  progress.mutable_caller()->set_job_id("job-7");
  progress.mutable_caller()->set_attempt(2);
  auto* p = progress.mutable_progress();
  p->set_step(100);
  p->set_loss(3.25);
  p->set_tokens_per_second(12345.5);
  p->mutable_step_time()->set_compute_ms(80);
  p->mutable_step_time()->set_exposed_comm_ms(5);
  p->mutable_communication()->set_all_gather_fp8_bytes(1 << 20);
  p->mutable_communication()->set_all_reduces(2);
  expect_round_trip(progress);

  fp8::v1::ReportAmaxHistoriesRequest amax;
  amax.set_step(100);
  auto* h = amax.add_histories();
  h->set_layer("layers.1.feed_forward.w2");
  h->set_operand(fp8::v1::AmaxHistory::GRAD_OUTPUT);
  h->add_history(0.5f);
  h->add_history(0.75f);
  h->set_scale(597.33f);
  expect_round_trip(amax);

  fp8::v1::CommitCheckpointRequest commit;
  commit.set_step(100);
  commit.set_dir("/ckpt/tiny/step-100");
  commit.set_world_size(2);
  expect_round_trip(commit);
}

TEST(ControlApiMessages, RendezvousServiceRoundTrips) {
  fp8::v1::RendezvousSetRequest set;
  set.set_rendezvous_namespace("job-7/attempt-2/");
  set.set_key("nccl_unique_id");
  set.set_value(std::string("\0\1\2\xff", 4));  // bytes, embedded NUL included
  expect_round_trip(set);

  fp8::v1::RendezvousWaitRequest wait;
  wait.set_rendezvous_namespace("job-7/attempt-2/");
  wait.add_keys("rank/0");
  wait.add_keys("rank/1");
  wait.set_timeout_ms(1000);
  expect_round_trip(wait);
}

// A minimal rendezvous store: Set and Get only, Get blocking until the key is set or the
// timeout passes (DEADLINE_EXCEEDED), as rendezvous_service.proto describes.
class TestRendezvous final : public fp8::v1::RendezvousService::Service {
 public:
  grpc::Status Set(grpc::ServerContext*, const fp8::v1::RendezvousSetRequest* req,
                   fp8::v1::RendezvousSetResponse*) override {
    {
      std::lock_guard lock(mu_);
      values_[{req->rendezvous_namespace(), req->key()}] = req->value();
    }
    cv_.notify_all();
    return grpc::Status::OK;
  }

  grpc::Status Get(grpc::ServerContext*, const fp8::v1::RendezvousGetRequest* req,
                   fp8::v1::RendezvousGetResponse* resp) override {
    const std::pair<std::string, std::string> full{req->rendezvous_namespace(), req->key()};
    std::unique_lock lock(mu_);
    const bool found = cv_.wait_for(lock, std::chrono::milliseconds(req->timeout_ms()),
                                    [&] { return values_.count(full) > 0; });
    if (!found) {
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                          "rendezvous key " + full.first + full.second + " not set within " +
                              std::to_string(req->timeout_ms()) + " ms");
    }
    resp->set_value(values_[full]);
    return grpc::Status::OK;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::pair<std::string, std::string>, std::string> values_;  // (namespace, key)
};

class RendezvousOverGrpc : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port_, 0);
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(port_),
                                   grpc::InsecureChannelCredentials());
    stub_ = fp8::v1::RendezvousService::NewStub(channel_);
  }
  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now());
  }

  // A client context with a deadline well beyond any timeout used here, so that a broken
  // server fails the test instead of hanging it.
  static std::unique_ptr<grpc::ClientContext> context() {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return ctx;
  }

  grpc::Status set_key(const std::string& ns, const std::string& key,
                      const std::string& value) {
    fp8::v1::RendezvousSetRequest req;
    req.set_rendezvous_namespace(ns);
    req.set_key(key);
    req.set_value(value);
    fp8::v1::RendezvousSetResponse resp;
    return stub_->Set(context().get(), req, &resp);
  }

  std::pair<grpc::Status, std::string> get_key(const std::string& ns, const std::string& key,
                                              int64_t timeout_ms) {
    fp8::v1::RendezvousGetRequest req;
    req.set_rendezvous_namespace(ns);
    req.set_key(key);
    req.set_timeout_ms(timeout_ms);
    fp8::v1::RendezvousGetResponse resp;
    grpc::Status status = stub_->Get(context().get(), req, &resp);
    return {status, resp.value()};
  }

  TestRendezvous service_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<fp8::v1::RendezvousService::Stub> stub_;
};

TEST_F(RendezvousOverGrpc, SetThenGet) {
  const std::string id("\x01\x00\x7f\xff", 4);
  ASSERT_TRUE(set_key("job-7/attempt-2/", "nccl_unique_id", id).ok());
  auto [status, value] = get_key("job-7/attempt-2/", "nccl_unique_id", 1000);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(value, id);
}

TEST_F(RendezvousOverGrpc, GetOfMissingKeyTimesOut) {
  auto [status, value] = get_key("job-7/attempt-2/", "never_set", 50);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_NE(status.error_message().find("never_set"), std::string::npos);
}

TEST_F(RendezvousOverGrpc, NamespacesAreSeparate) {
  ASSERT_TRUE(set_key("job-7/attempt-1/", "addr", "old").ok());
  auto [status, value] = get_key("job-7/attempt-2/", "addr", 0);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
}

TEST_F(RendezvousOverGrpc, GetBlocksUntilAnotherClientSets) {
  // Rank 1 asks before rank 0 has published; the Get must return once the Set lands.
  std::pair<grpc::Status, std::string> got;
  std::thread waiter([&] { got = get_key("job-7/attempt-2/", "rank0_addr", 5000); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(set_key("job-7/attempt-2/", "rank0_addr", "127.0.0.1:29500").ok());
  waiter.join();
  ASSERT_TRUE(got.first.ok()) << got.first.error_message();
  EXPECT_EQ(got.second, "127.0.0.1:29500");
}

}  // namespace
