#include "common/metrics/metrics_http_server.h"

#include <utility>

#include "common/metrics/listen_address.h"

namespace fp8::metrics {
namespace {

constexpr char kMetricsContentType[] = "text/plain; version=0.0.4; charset=utf-8";

HttpResponse check(const std::function<absl::Status()>& check) {
  const absl::Status status = check ? check() : absl::OkStatus();
  if (status.ok()) return {200, HttpResponse().content_type, "ok\n"};
  return {503, HttpResponse().content_type, std::string(status.message()) + "\n"};
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::start(
    const std::string& address, Registry& registry, HealthCheck health, ReadinessCheck ready,
    const HttpServerOptions& options) {
  const absl::StatusOr<ListenAddress> parsed = parse_listen_address(address);
  if (!parsed.ok()) return parsed.status();

  auto route = [&registry, health = std::move(health), ready = std::move(ready)](std::string_view path) {
    if (path == "/metrics") return HttpResponse{200, kMetricsContentType, registry.expose()};
    if (path == "/healthz") return check(health);
    if (path == "/readyz") return check(ready);
    return HttpResponse{404, HttpResponse().content_type, "not found\n"};
  };
  absl::StatusOr<std::unique_ptr<HttpLoop>> loop = HttpLoop::start(*parsed, options, std::move(route));
  if (!loop.ok()) {
    const std::string why(loop.status().message());
    if (absl::IsInvalidArgument(loop.status())) {
      return absl::InvalidArgumentError("metrics address " + address + ": " + why);
    }
    return absl::Status(loop.status().code(), "cannot listen on " + address + ": " + why);
  }
  std::unique_ptr<MetricsHttpServer> server(new MetricsHttpServer());
  server->loop_ = std::move(*loop);
  return server;
}

MetricsHttpServer::~MetricsHttpServer() { stop(); }

void MetricsHttpServer::stop() { loop_->stop(); }

}  // namespace fp8::metrics
