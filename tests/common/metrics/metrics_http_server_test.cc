// The metrics HTTP server over real loopback sockets.
#include "common/metrics/metrics_http_server.h"

#include <httplib.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace fp8::metrics {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<MetricsHttpServer> StartOrDie(Registry& registry,
                                              MetricsHttpServer::HealthCheck health = nullptr) {
  auto server = MetricsHttpServer::Start("127.0.0.1:0", registry, std::move(health));
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? std::move(*server) : nullptr;
}

TEST(MetricsHttpServer, ServesMetrics) {
  Registry registry;
  registry.counter("fp8_coordinator_heartbeats_total", "Heartbeats.", {}).with().inc(3);
  auto server = StartOrDie(registry);
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
  auto server = StartOrDie(registry, [&]() -> absl::Status {
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
  auto server = StartOrDie(registry);
  ASSERT_NE(server, nullptr);
  auto res = httplib::Client("127.0.0.1", server->port()).Get("/healthz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
}

TEST(MetricsHttpServer, UnknownPathIs404) {
  Registry registry;
  auto server = StartOrDie(registry);
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
  auto server = StartOrDie(registry);
  ASSERT_NE(server, nullptr);
  const int port = server->port();
  server->Stop();
  server->Stop();
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(std::chrono::seconds(1));
  EXPECT_FALSE(client.Get("/metrics"));
  // The port is free again (SO_REUSEADDR), e.g. for a restarted daemon.
  auto again = MetricsHttpServer::Start("127.0.0.1:" + std::to_string(port), registry);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)->port(), port);
}

TEST(MetricsHttpServer, StopRightAfterStartDoesNotHang) {
  Registry registry;
  for (int i = 0; i < 20; ++i) {
    auto server = StartOrDie(registry);
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
    auto server = MetricsHttpServer::Start(c.address, registry);
    ASSERT_FALSE(server.ok()) << c.address;
    EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument) << c.address;
    EXPECT_THAT(std::string(server.status().message()), HasSubstr(c.message));
  }
}

TEST(MetricsHttpServer, AddressInUse) {
  Registry registry;
  auto first = StartOrDie(registry);
  ASSERT_NE(first, nullptr);
  const std::string address = "127.0.0.1:" + std::to_string(first->port());
  auto second = MetricsHttpServer::Start(address, registry);
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
  auto server = MetricsHttpServer::Start("[::1]:0", registry);
  if (!server.ok()) GTEST_SKIP() << "no IPv6 loopback here: " << server.status();
  auto res = httplib::Client("::1", (*server)->port()).Get("/healthz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
}

}  // namespace
}  // namespace fp8::metrics
