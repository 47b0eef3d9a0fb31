// The HTTP endpoint of a daemon's metrics port (deploy/METRICS.md):
//   GET /metrics  the registry's exposition, Content-Type text/plain; version=0.0.4
//   GET /healthz  200 "ok\n" while health() is OK, else 503 with its message
//   anything else 404
// Served by cpp-httplib on a thread of its own (and a small pool for connections), so
// scrapes never wait on the daemon's gRPC threads.
//
//   auto server = fp8::metrics::MetricsHttpServer::Start(flags.metrics_address, registry,
//                                                       [&] { return coordinator.Health(); });
//   if (!server.ok()) return Fail(server.status());   // bad address, port in use
//   LOG << "metrics on port " << (*server)->port();
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/metrics/registry.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace fp8::metrics {

class MetricsHttpServer {
 public:
  // /healthz's check; called on the server's threads, so it must be thread-safe. A null
  // function means "always healthy".
  using HealthCheck = std::function<absl::Status()>;

  // Listens on `address` ("127.0.0.1:9400"; port 0 picks a free one, see port()) and
  // returns once connections are accepted. `registry` (and whatever health() uses) must
  // outlive the server. Errors: InvalidArgument for an address that does not parse or
  // resolve ("metrics address 127.0.0.1:99999: port out of range"), Unavailable when the
  // port cannot be bound ("cannot listen on 127.0.0.1:9400: address in use").
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(const std::string& address,
                                                                   Registry& registry,
                                                                   HealthCheck health = nullptr);

  ~MetricsHttpServer();  // Stop()s
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  // The bound port (the picked one when the address said 0).
  int port() const { return port_; }

  // Closes the listening socket and joins the server's threads; idempotent.
  void Stop();

 private:
  MetricsHttpServer() = default;

  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace fp8::metrics
