// The HTTP endpoint of a daemon's metrics port (deploy/METRICS.md):
//   GET /metrics  the registry's exposition, Content-Type text/plain; version=0.0.4
//   GET /healthz  liveness: 200 "ok\n" while health() is OK, else 503 with its message
//   GET /readyz   readiness: 200 "ok\n" while ready() is OK, else 503 with its message
//   anything else 404 (any method but GET: 405)
// Liveness says the process works (a failing one gets restarted); readiness says it can
// take work yet (a coordinator's gRPC port is serving, say), so that it is not sent any
// before. Served by one poll() thread of its own (http_loop.h, which says why), so that
// neither the daemon's gRPC threads nor slow or idle clients can keep a probe waiting.
//
//   auto server = fp8::metrics::MetricsHttpServer::start(flags.metrics_address, registry,
//                                                       [&] { return coordinator.health(); },
//                                                       [&] { return Ready(); });
//   if (!server.ok()) return fail(server.status());   // bad address, port in use
//   LOG << "metrics on port " << (*server)->port();
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/metrics/http_loop.h"
#include "common/metrics/registry.h"

namespace fp8::metrics {

class MetricsHttpServer {
 public:
  // /healthz's and /readyz's checks; called on the server's thread, so they must be
  // thread-safe, and quick (every request waits on them). A null function means OK.
  using HealthCheck = std::function<absl::Status()>;
  using ReadinessCheck = std::function<absl::Status()>;

  // Listens on `address` ("127.0.0.1:9400"; port 0 picks a free one, see port()) and
  // returns once connections are accepted. `registry` (and whatever the checks use) must
  // outlive the server. Errors: InvalidArgument for an address that does not parse or
  // resolve ("metrics address 127.0.0.1:99999: port out of range"), Unavailable when the
  // port cannot be bound ("cannot listen on 127.0.0.1:9400: address in use").
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> start(
      const std::string& address, Registry& registry, HealthCheck health = nullptr,
      ReadinessCheck ready = nullptr, const HttpServerOptions& options = {});

  ~MetricsHttpServer();  // stop()s
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  // The bound port (the picked one when the address said 0).
  int port() const { return loop_->port(); }

  // Closes the listening socket and every connection, and joins the thread; idempotent.
  void stop();

 private:
  MetricsHttpServer() = default;

  std::unique_ptr<HttpLoop> loop_;
};

}  // namespace fp8::metrics
