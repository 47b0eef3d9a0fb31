// The metrics HTTP server over real loopback sockets.
#include "common/metrics/metrics_http_server.h"

#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/metrics/http_wire.h"
#include "tests/common/metrics/loopback_client.h"

namespace fp8::metrics {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using testing::connect_loopback;
using testing::read_to_eof;
using testing::send_all;

std::unique_ptr<MetricsHttpServer> start_or_die(Registry& registry,
                                              MetricsHttpServer::HealthCheck health = nullptr) {
  auto server = MetricsHttpServer::start("127.0.0.1:0", registry, std::move(health));
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? std::move(*server) : nullptr;
}

TEST(MetricsHttpServer, ServesMetrics) {
  Registry registry;
  registry.counter("fp8_coordinator_heartbeats_total", "Heartbeats.", {}).with().inc(3);
  auto server = start_or_die(registry);
  ASSERT_NE(server, nullptr);
  EXPECT_GT(server->port(), 0);

  httplib::Client client("127.0.0.1", server->port());
  auto res = client.Get("/metrics");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_EQ(res->body, registry.expose());
  EXPECT_THAT(res->body, HasSubstr("\nfp8_coordinator_heartbeats_total 3\n"));

  // A second scrape sees updates.
  registry.counter("fp8_coordinator_heartbeats_total", "Heartbeats.", {}).with().inc();
  res = client.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_THAT(res->body, HasSubstr("\nfp8_coordinator_heartbeats_total 4\n"));
}

TEST(MetricsHttpServer, HealthzFollowsTheCheck) {
  Registry registry;
  std::atomic<bool> healthy{true};
  auto server = start_or_die(registry, [&]() -> absl::Status {
    if (healthy) return absl::OkStatus();
    return absl::UnavailableError("store not open");
  });
  ASSERT_NE(server, nullptr);
  httplib::Client client("127.0.0.1", server->port());
  auto res = client.Get("/healthz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body, "ok\n");

  healthy = false;
  res = client.Get("/healthz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 503);
  EXPECT_EQ(res->body, "store not open\n");
}

TEST(MetricsHttpServer, NullHealthCheckIsHealthy) {
  Registry registry;
  auto server = start_or_die(registry);
  ASSERT_NE(server, nullptr);
  auto res = httplib::Client("127.0.0.1", server->port()).Get("/healthz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
}

TEST(MetricsHttpServer, ReadyzFollowsItsOwnCheck) {
  Registry registry;
  std::atomic<bool> ready{false};
  auto server = MetricsHttpServer::start("127.0.0.1:0", registry, nullptr, [&]() -> absl::Status {
    if (ready) return absl::OkStatus();
    return absl::UnavailableError("gRPC not serving yet");
  });
  ASSERT_TRUE(server.ok()) << server.status();
  httplib::Client client("127.0.0.1", (*server)->port());
  auto res = client.Get("/readyz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 503);
  EXPECT_EQ(res->body, "gRPC not serving yet\n");
  res = client.Get("/healthz");  // liveness does not wait for readiness
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body, "ok\n");

  ready = true;
  res = client.Get("/readyz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body, "ok\n");
  res = client.Get("/healthz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
}

TEST(MetricsHttpServer, HealthzFailingLeavesReadyzToItsCheck) {
  Registry registry;
  auto server = MetricsHttpServer::start(
      "127.0.0.1:0", registry, [] { return absl::UnavailableError("stuck"); }, nullptr);
  ASSERT_TRUE(server.ok()) << server.status();
  httplib::Client client("127.0.0.1", (*server)->port());
  auto res = client.Get("/healthz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 503);
  res = client.Get("/readyz");  // null: ready
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
}

TEST(MetricsHttpServer, OnlyGet) {
  Registry registry;
  auto server = start_or_die(registry);
  ASSERT_NE(server, nullptr);
  httplib::Client client("127.0.0.1", server->port());
  auto res = client.Post("/metrics", "x", "text/plain");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 405);
  EXPECT_EQ(res->get_header_value("Allow"), "GET");
  res = client.Get("/metrics?debug=1");  // a query string is ignored
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
}

TEST(MetricsHttpServer, RequestHeadInPieces) {
  Registry registry;
  auto server = start_or_die(registry);
  ASSERT_NE(server, nullptr);
  const int fd = connect_loopback(server->port());
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(send_all(fd, "GET /heal"));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(send_all(fd, "thz HTTP/1.0\r\nHost: x\r\n"));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(send_all(fd, "\r\n"));
  shutdown(fd, SHUT_WR);  // a half-closed client still gets its answer
  const std::string response = read_to_eof(fd, std::chrono::seconds(5));
  close(fd);
  EXPECT_THAT(response, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(response, HasSubstr("\r\nConnection: close\r\n"));
  EXPECT_THAT(response, HasSubstr("\r\n\r\nok\n"));
}

TEST(MetricsHttpServer, BadAndOversizedRequests) {
  Registry registry;
  auto server = start_or_die(registry);
  ASSERT_NE(server, nullptr);
  struct Case {
    std::string request;
    std::string status_line;
  };
  for (const Case& c : std::vector<Case>{
           {"nonsense\r\n\r\n", "HTTP/1.1 400 Bad Request\r\n"},
           {"GET metrics HTTP/1.1\r\n\r\n", "HTTP/1.1 400 Bad Request\r\n"},
           {"GET /metrics HTTP/1.1\r\nX: " + std::string(20000, 'a') + "\r\n\r\n",
            "HTTP/1.1 431 Request Header Fields Too Large\r\n"},
       }) {
    const int fd = connect_loopback(server->port());
    ASSERT_GE(fd, 0);
    send_all(fd, c.request);  // the server may answer (and close) before taking it all
    EXPECT_THAT(read_to_eof(fd, std::chrono::seconds(5)), StartsWith(c.status_line))
        << c.request.substr(0, 40);
    close(fd);
  }
}

TEST(HttpWire, RequestHeadAndLine) {
  EXPECT_EQ(request_head_length("GET / HTTP/1.1\r\nHost: x\r\n"), 0u);
  EXPECT_EQ(request_head_length("GET / HTTP/1.1\r\n\r\n"), 18u);
  EXPECT_EQ(request_head_length("GET / HTTP/1.1\n\nrest"), 16u);
  auto line = parse_request_line("GET /readyz?verbose HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_TRUE(line);
  EXPECT_EQ(line->method, "GET");
  EXPECT_EQ(line->path, "/readyz");
  EXPECT_FALSE(parse_request_line("GET /x\r\n\r\n"));
  EXPECT_FALSE(parse_request_line("GET  /x HTTP/1.1\r\n\r\n"));
  EXPECT_FALSE(parse_request_line("GET http://h/x HTTP/1.1\r\n\r\n"));
  EXPECT_FALSE(parse_request_line("GET /x FTP/1.10\r\n\r\n"));
}

TEST(MetricsHttpServer, UnknownPathIs404) {
  Registry registry;
  auto server = start_or_die(registry);
  ASSERT_NE(server, nullptr);
  httplib::Client client("127.0.0.1", server->port());
  for (const char* path : {"/", "/metricsx", "/favicon.ico"}) {
    auto res = client.Get(path);
    ASSERT_TRUE(res) << path;
    EXPECT_EQ(res->status, 404) << path;
    EXPECT_EQ(res->body, "not found\n") << path;
  }
}

TEST(MetricsHttpServer, StopClosesThePortAndIsIdempotent) {
  Registry registry;
  auto server = start_or_die(registry);
  ASSERT_NE(server, nullptr);
  const int port = server->port();
  server->stop();
  server->stop();
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(std::chrono::seconds(1));
  EXPECT_FALSE(client.Get("/metrics"));
  // The port is free again (SO_REUSEADDR), e.g. for a restarted daemon.
  auto again = MetricsHttpServer::start("127.0.0.1:" + std::to_string(port), registry);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)->port(), port);
}

TEST(MetricsHttpServer, StopRightAfterStartDoesNotHang) {
  Registry registry;
  for (int i = 0; i < 20; ++i) {
    auto server = start_or_die(registry);
    ASSERT_NE(server, nullptr);
  }  // destructors stop
}

TEST(MetricsHttpServer, AddressErrors) {
  Registry registry;
  struct Case {
    std::string address;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {"127.0.0.1:99999", "metrics address 127.0.0.1:99999: port out of range"},
           {"127.0.0.1:12345678901234", "metrics address 127.0.0.1:12345678901234: port out of range"},
           {"127.0.0.1", "metrics address 127.0.0.1: want host:port"},
           {"127.0.0.1:", "metrics address 127.0.0.1:: no port"},
           {"127.0.0.1:http", "metrics address 127.0.0.1:http: port 'http' is not a number"},
           {"::1:9400", "metrics address ::1:9400: an IPv6 host needs brackets"},
           {"no-such-host.invalid:9400",
            "metrics address no-such-host.invalid:9400: cannot resolve host "
            "'no-such-host.invalid'"},
       }) {
    auto server = MetricsHttpServer::start(c.address, registry);
    ASSERT_FALSE(server.ok()) << c.address;
    EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument) << c.address;
    EXPECT_THAT(std::string(server.status().message()), HasSubstr(c.message));
  }
}

TEST(MetricsHttpServer, AddressInUse) {
  Registry registry;
  auto first = start_or_die(registry);
  ASSERT_NE(first, nullptr);
  const std::string address = "127.0.0.1:" + std::to_string(first->port());
  auto second = MetricsHttpServer::start(address, registry);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(std::string(second.status().message()),
            "cannot listen on " + address + ": address in use");
  // The first one still serves.
  auto res = httplib::Client("127.0.0.1", first->port()).Get("/healthz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
}

TEST(MetricsHttpServer, BracketedIPv6Loopback) {
  Registry registry;
  auto server = MetricsHttpServer::start("[::1]:0", registry);
  if (!server.ok()) GTEST_SKIP() << "no IPv6 loopback here: " << server.status();
  auto res = httplib::Client("::1", (*server)->port()).Get("/healthz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
}

}  // namespace
}  // namespace fp8::metrics
