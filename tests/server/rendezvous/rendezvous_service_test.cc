// RendezvousServiceImpl over real gRPC on loopback: validation naming the field, the
// authorizer (one namespace denied), blocking Get and Wait across clients, the call's
// deadline winning over a longer timeout_ms, and ABORTED when the namespace is deleted.
#include "server/rendezvous/rendezvous_service.h"

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "absl/time/clock.h"

namespace fp8::server {
namespace {

constexpr char kAttempt[] = "job-7/attempt-2/";
constexpr char kDenied[] = "job-9/attempt-1/";

class RendezvousServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    service_ = std::make_unique<RendezvousServiceImpl>(store_, [](grpc::ServerContext&, std::string_view ns) {
      if (ns == kDenied) return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "not your attempt");
      return grpc::Status::OK;
    });
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port_, 0);
    stub_ = fp8::v1::RendezvousService::NewStub(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(port_), grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    store_.shutdown();
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  }

  static std::unique_ptr<grpc::ClientContext> context(std::chrono::milliseconds deadline = std::chrono::seconds(30)) {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + deadline);
    return ctx;
  }

  grpc::Status set(const std::string& ns, const std::string& key, const std::string& value) {
    fp8::v1::RendezvousSetRequest req;
    req.set_rendezvous_namespace(ns);
    req.set_key(key);
    req.set_value(value);
    fp8::v1::RendezvousSetResponse resp;
    return stub_->Set(context().get(), req, &resp);
  }

  std::pair<grpc::Status, std::string> get(const std::string& ns, const std::string& key, int64_t timeout_ms,
                                           std::chrono::milliseconds deadline = std::chrono::seconds(30)) {
    fp8::v1::RendezvousGetRequest req;
    req.set_rendezvous_namespace(ns);
    req.set_key(key);
    req.set_timeout_ms(timeout_ms);
    fp8::v1::RendezvousGetResponse resp;
    grpc::Status status = stub_->Get(context(deadline).get(), req, &resp);
    return {status, resp.value()};
  }

  grpc::Status wait(const std::string& ns, const std::vector<std::string>& keys, int64_t timeout_ms) {
    fp8::v1::RendezvousWaitRequest req;
    req.set_rendezvous_namespace(ns);
    for (const std::string& k : keys) req.add_keys(k);
    req.set_timeout_ms(timeout_ms);
    fp8::v1::RendezvousWaitResponse resp;
    return stub_->Wait(context().get(), req, &resp);
  }

  RendezvousStore store_;
  std::unique_ptr<RendezvousServiceImpl> service_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<fp8::v1::RendezvousService::Stub> stub_;
};

TEST_F(RendezvousServiceTest, SetThenGet) {
  const std::string id("\x01\x00\x7f\xff", 4);
  ASSERT_TRUE(set(kAttempt, "nccl_unique_id", id).ok());
  auto [status, value] = get(kAttempt, "nccl_unique_id", 0);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(value, id);
}

TEST_F(RendezvousServiceTest, GetAndWaitBlockUntilAnotherClientSets) {
  std::pair<grpc::Status, std::string> got;
  grpc::Status waited;
  std::thread getter([&] { got = get(kAttempt, "rank0_addr", 20'000); });
  std::thread waiter([&] { waited = wait(kAttempt, {"rank0_addr", "rank1_addr"}, 20'000); });
  absl::SleepFor(absl::Milliseconds(50));
  ASSERT_TRUE(set(kAttempt, "rank0_addr", "127.0.0.1:29500").ok());
  ASSERT_TRUE(set(kAttempt, "rank1_addr", "127.0.0.1:29501").ok());
  getter.join();
  waiter.join();
  ASSERT_TRUE(got.first.ok()) << got.first.error_message();
  EXPECT_EQ(got.second, "127.0.0.1:29500");
  EXPECT_TRUE(waited.ok()) << waited.error_message();
}

TEST_F(RendezvousServiceTest, TimeoutNamesTheMissingKeys) {
  ASSERT_TRUE(set(kAttempt, "rank/0", "x").ok());
  const grpc::Status waited = wait(kAttempt, {"rank/0", "rank/1"}, 30);
  EXPECT_EQ(waited.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_NE(waited.error_message().find("rank/1"), std::string::npos) << waited.error_message();
}

TEST_F(RendezvousServiceTest, CallDeadlineShorterThanTimeoutWins) {
  // timeout_ms asks for ten minutes; the call's deadline of 300 ms must end it, as the
  // server's DEADLINE_EXCEEDED or the client's own.
  auto [status, value] = get(kAttempt, "never_set", 600'000, std::chrono::milliseconds(300));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << status.error_message();
}

TEST_F(RendezvousServiceTest, InvalidRequestsNameTheField) {
  const grpc::Status long_key = set(kAttempt, std::string(257, 'k'), "v");
  EXPECT_EQ(long_key.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(long_key.error_message(), "key: 257 bytes, more than the limit of 256");
  const grpc::Status no_ns = set("", "k", "v");
  EXPECT_EQ(no_ns.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(no_ns.error_message().find("rendezvous_namespace"), std::string::npos);
  auto [bad_timeout, v] = get(kAttempt, "k", 600'001);
  EXPECT_EQ(bad_timeout.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(bad_timeout.error_message().find("timeout_ms"), std::string::npos);
  EXPECT_EQ(wait(kAttempt, {}, 0).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(RendezvousServiceTest, AuthorizerDeniesANamespace) {
  EXPECT_EQ(set(kDenied, "k", "v").error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(get(kDenied, "k", 0).first.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(wait(kDenied, {"k"}, 0).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(store_.key_count(kDenied), 0u);
  EXPECT_TRUE(set(kAttempt, "k", "v").ok());
}

TEST_F(RendezvousServiceTest, DeletedNamespaceAbortsABlockedCall) {
  grpc::Status waited;
  std::thread waiter([&] { waited = wait(kAttempt, {"rank/1"}, 600'000); });
  absl::SleepFor(absl::Milliseconds(100));
  store_.delete_namespace(kAttempt);
  waiter.join();
  EXPECT_EQ(waited.error_code(), grpc::StatusCode::ABORTED) << waited.error_message();
  EXPECT_NE(waited.error_message().find("its attempt ended"), std::string::npos);
  EXPECT_EQ(set(kAttempt, "rank/1", "late").error_code(), grpc::StatusCode::ABORTED);
}

}  // namespace
}  // namespace fp8::server
