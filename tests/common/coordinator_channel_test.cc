// The coordinator channel against a coordinator slow to answer a new connection, as one is
// while it restarts on a loaded host: the connection it accepts late must still be used.
#include "common/rpc/coordinator_channel.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "fp8/v1/worker_service.grpc.pb.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "grpcpp/server_posix.h"
#include "gtest/gtest.h"

namespace fp8::rpc {
namespace {

// A bound, listening socket that nobody accepts on yet: the kernel completes the TCP
// handshake, but gRPC's own handshake waits until the test hands the connection to a
// server.
class SlowListener {
 public:
  SlowListener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    ok_ = fd_ >= 0 && ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 && ::listen(fd_, 16) == 0;
    socklen_t len = sizeof(addr);
    ok_ = ok_ && ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
    port_ = ntohs(addr.sin_port);
  }
  ~SlowListener() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool ok() const { return ok_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  int accept() { return ::accept(fd_, nullptr, nullptr); }

 private:
  int fd_ = -1;
  int port_ = 0;
  bool ok_ = false;
};

TEST(CoordinatorChannelTest, AConnectionAnsweredSecondsLateIsStillMade) {
  SlowListener listener;
  ASSERT_TRUE(listener.ok());
  grpc::ServerBuilder builder;  // no listening port: connections are handed to it below
  v1::WorkerService::Service unimplemented;  // a server needs a service; no call is made
  builder.RegisterService(&unimplemented);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);

  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = coordinator_channel(listener.address(), "");
  ASSERT_TRUE(channel.ok()) << channel.status();
  (*channel)->GetState(/*try_to_connect=*/true);
  // Longer than the reconnect backoff's cap: a connection attempt given only that long
  // would have been abandoned (and the next one left unanswered in the backlog).
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const int connection = listener.accept();
  ASSERT_GE(connection, 0);
  grpc::AddInsecureChannelFromFd(server.get(), connection);

  EXPECT_TRUE((*channel)->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10)))
      << "state " << (*channel)->GetState(false);
  server->Shutdown(std::chrono::system_clock::now());
}

TEST(CoordinatorChannelTest, AnUnreadableCaFileIsRefusedNamingTheFlag) {
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      coordinator_channel("127.0.0.1:1", "/nonexistent/ca.pem", "--coordinator-ca");
  ASSERT_FALSE(channel.ok());
  EXPECT_NE(channel.status().message().find("--coordinator-ca /nonexistent/ca.pem"), std::string::npos)
      << channel.status();
}

}  // namespace
}  // namespace fp8::rpc
