// The gRPC server interceptor against a real server on loopback, with the repo's own
// services: unary calls ending OK, INVALID_ARGUMENT and UNIMPLEMENTED, and a
// server-streaming call.
#include "common/metrics/grpc_server_metrics.h"

#include <chrono>
#include <thread>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "fp8/v1/job_service.grpc.pb.h"
#include "fp8/v1/rendezvous_service.grpc.pb.h"

namespace fp8::metrics {
namespace {

using ::testing::HasSubstr;

// Set succeeds after 30 ms; Get always rejects; Wait is left unimplemented.
class FakeRendezvous final : public fp8::v1::RendezvousService::Service {
  grpc::Status Set(grpc::ServerContext*, const fp8::v1::RendezvousSetRequest*,
                   fp8::v1::RendezvousSetResponse*) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    return grpc::Status::OK;
  }
  grpc::Status Get(grpc::ServerContext*, const fp8::v1::RendezvousGetRequest*,
                   fp8::v1::RendezvousGetResponse*) override {
    return {grpc::StatusCode::INVALID_ARGUMENT, "no key"};
  }
};

// WatchJob streams three events, 20 ms apart, then ends OK.
class FakeJobs final : public fp8::v1::JobService::Service {
  grpc::Status WatchJob(grpc::ServerContext*, const fp8::v1::WatchJobRequest*,
                        grpc::ServerWriter<fp8::v1::JobEvent>* writer) override {
    for (int i = 0; i < 3; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      writer->Write(fp8::v1::JobEvent());
    }
    return grpc::Status::OK;
  }
};

class GrpcServerMetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> f;
    f.push_back(make_grpc_server_metrics_interceptor_factory(registry_));
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&rendezvous_);
    builder.RegisterService(&jobs_);
    builder.experimental().SetInterceptorCreators(std::move(f));
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(port_),
                                   grpc::InsecureChannelCredentials());
  }
  void TearDown() override {
    if (server_) server_->Shutdown();
  }

  // `call` is {grpc_type, grpc_service, grpc_method}.
  using Call = std::vector<std::string>;
  double started(const Call& call) {
    return registry_.counter("grpc_server_started_total", "", {"grpc_type", "grpc_service", "grpc_method"})
        .with(call)
        .value();
  }
  double handled(Call call, const std::string& code) {
    call.push_back(code);
    return registry_
        .counter("grpc_server_handled_total", "", {"grpc_type", "grpc_service", "grpc_method", "grpc_code"})
        .with(call)
        .value();
  }
  Histogram::Snapshot handling(const Call& call) {
    return registry_
        .histogram("grpc_server_handling_seconds", "", {"grpc_type", "grpc_service", "grpc_method"},
                   default_latency_buckets())
        .with(call)
        .snapshot();
  }
  const Call kSet{"unary", "fp8.v1.RendezvousService", "Set"};
  const Call kGet{"unary", "fp8.v1.RendezvousService", "Get"};
  const Call kWait{"unary", "fp8.v1.RendezvousService", "Wait"};

  Registry registry_;
  FakeRendezvous rendezvous_;
  FakeJobs jobs_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(GrpcServerMetricsTest, UnaryCallsByMethodAndCode) {
  auto stub = fp8::v1::RendezvousService::NewStub(channel_);
  for (int i = 0; i < 2; ++i) {
    grpc::ClientContext ctx;
    fp8::v1::RendezvousSetResponse response;
    ASSERT_TRUE(stub->Set(&ctx, {}, &response).ok());
  }
  {
    grpc::ClientContext ctx;
    fp8::v1::RendezvousGetResponse response;
    EXPECT_EQ(stub->Get(&ctx, {}, &response).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  {
    grpc::ClientContext ctx;
    fp8::v1::RendezvousWaitResponse response;
    EXPECT_EQ(stub->Wait(&ctx, {}, &response).error_code(), grpc::StatusCode::UNIMPLEMENTED);
  }
  // Recorded before the status goes out, so visible as soon as the client has it.
  EXPECT_EQ(handled(kSet, "OK"), 2);
  EXPECT_EQ(handled(kGet, "INVALID_ARGUMENT"), 1);
  EXPECT_EQ(handled(kWait, "UNIMPLEMENTED"), 1);
  EXPECT_EQ(started(kSet), 2);
  EXPECT_EQ(started(kGet), 1);

  const Histogram::Snapshot set = handling(kSet);
  EXPECT_EQ(set.count, 2u);
  EXPECT_GE(set.sum, 0.06);  // two calls that slept 30 ms
  EXPECT_LT(set.sum, 5.0);
  EXPECT_EQ(set.cumulative[3], 0u);  // le=0.01: none
  EXPECT_EQ(handling(kGet).count, 1u);

  // The names and labels the Go and Java gRPC Prometheus interceptors use.
  const std::string text = registry_.expose();
  EXPECT_THAT(text, HasSubstr("grpc_server_handled_total{grpc_type=\"unary\",grpc_service=\"fp8.v1."
                              "RendezvousService\",grpc_method=\"Get\",grpc_code=\"INVALID_ARGUMENT\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("grpc_server_started_total{grpc_type=\"unary\",grpc_service=\"fp8.v1."
                              "RendezvousService\",grpc_method=\"Set\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("grpc_server_handling_seconds_count{grpc_type=\"unary\",grpc_service=\"fp8.v1."
                              "RendezvousService\",grpc_method=\"Set\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE grpc_server_handling_seconds histogram\n"));
}

TEST_F(GrpcServerMetricsTest, ServerStreamingCallTimedToItsStatus) {
  auto stub = fp8::v1::JobService::NewStub(channel_);
  grpc::ClientContext ctx;
  auto reader = stub->WatchJob(&ctx, {});
  fp8::v1::JobEvent event;
  int events = 0;
  while (reader->Read(&event)) ++events;
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_EQ(events, 3);
  const Call watch_job{"server_stream", "fp8.v1.JobService", "WatchJob"};
  EXPECT_EQ(handled(watch_job, "OK"), 1);
  const Histogram::Snapshot watch = handling(watch_job);
  EXPECT_EQ(watch.count, 1u);
  EXPECT_GE(watch.sum, 0.06);  // the whole stream, not just its first message
}

TEST_F(GrpcServerMetricsTest, ConcurrentCalls) {
  auto stub = fp8::v1::RendezvousService::NewStub(channel_);
  std::vector<std::thread> clients;
  for (int t = 0; t < 4; ++t) {
    clients.emplace_back([&] {
      for (int i = 0; i < 10; ++i) {
        grpc::ClientContext ctx;
        fp8::v1::RendezvousGetResponse response;
        stub->Get(&ctx, {}, &response).IgnoreError();
      }
    });
  }
  for (auto& c : clients) c.join();
  EXPECT_EQ(handled(kGet, "INVALID_ARGUMENT"), 40);
  EXPECT_EQ(started(kGet), 40);
  EXPECT_EQ(handling(kGet).count, 40u);
}

// A method the server does not serve: gRPC names it "unknown", so a client cannot mint
// series by inventing method names.
TEST_F(GrpcServerMetricsTest, UnknownMethodIsLabelledUnknown) {
  grpc::GenericStub stub(channel_);
  grpc::CompletionQueue cq;
  grpc::ClientContext ctx;
  grpc::ByteBuffer request;
  grpc::ByteBuffer response;
  grpc::Status status;
  auto call = stub.PrepareUnaryCall(&ctx, "/fp8.v1.NoSuchService/Nope", request, &cq);
  call->StartCall();
  call->Finish(&response, &status, reinterpret_cast<void*>(1));
  void* tag = nullptr;
  bool ok = false;
  ASSERT_TRUE(cq.Next(&tag, &ok));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED);
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  const std::string text = registry_.expose();
  EXPECT_EQ(text.find("NoSuchService"), std::string::npos) << text;
  // gRPC serves an unknown method as a bidirectional stream.
  const Call unknown{"bidi_stream", "unknown", "unknown"};
  EXPECT_EQ(handled(unknown, "UNIMPLEMENTED"), 1);
  EXPECT_EQ(handling(unknown).count, 1u);
}

TEST(StatusCodeName, CanonicalNames) {
  EXPECT_STREQ(status_code_name(grpc::StatusCode::OK), "OK");
  EXPECT_STREQ(status_code_name(grpc::StatusCode::DEADLINE_EXCEEDED), "DEADLINE_EXCEEDED");
  EXPECT_STREQ(status_code_name(grpc::StatusCode::UNAUTHENTICATED), "UNAUTHENTICATED");
  EXPECT_STREQ(status_code_name(static_cast<grpc::StatusCode>(99)), "UNKNOWN");
}

}  // namespace
}  // namespace fp8::metrics
