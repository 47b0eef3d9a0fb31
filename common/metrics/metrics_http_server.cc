#include "common/metrics/metrics_http_server.h"

#include <netdb.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>

#include <httplib.h>

#include "common/metrics/listen_address.h"

namespace fp8::metrics {
namespace {

constexpr char kMetricsContentType[] = "text/plain; version=0.0.4; charset=utf-8";
constexpr char kTextContentType[] = "text/plain; charset=utf-8";
// Prometheus scrapes one connection at a time; a few more serve curl and health probes.
constexpr size_t kConnectionThreads = 4;

std::string BindErrorReason(int error) {
  switch (error) {
    case EADDRINUSE:
      return "address in use";
    case EADDRNOTAVAIL:
      return "address not available on this host";
    case EACCES:
      return "permission denied";
    case 0:
      return "bind failed";
    default:
      return std::strerror(error);
  }
}

// Only SO_REUSEADDR (a restarted daemon may bind while old connections sit in TIME_WAIT).
// httplib's default adds SO_REUSEPORT, which would let a second daemon bind the same port
// silently and split the scrapes between the two.
void ReuseAddressOnly(socket_t sock) {
  int yes = 1;
  setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
}

// getaddrinfo's own message for a host that does not resolve; httplib would only say
// that binding failed.
absl::Status CheckResolves(const std::string& address, const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* result = nullptr;
  const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &result);
  if (rc != 0) {
    return absl::InvalidArgumentError("metrics address " + address + ": cannot resolve host '" +
                                      host + "': " + gai_strerror(rc));
  }
  freeaddrinfo(result);
  return absl::OkStatus();
}

void Route(httplib::Server& http, Registry& registry, MetricsHttpServer::HealthCheck health) {
  http.Get("/metrics", [&registry](const httplib::Request&, httplib::Response& res) {
    res.set_content(registry.expose(), kMetricsContentType);
  });
  http.Get("/healthz", [health = std::move(health)](const httplib::Request&,
                                                    httplib::Response& res) {
    const absl::Status status = health ? health() : absl::OkStatus();
    if (status.ok()) {
      res.set_content("ok\n", kTextContentType);
    } else {
      res.status = 503;
      res.set_content(std::string(status.message()) + "\n", kTextContentType);
    }
  });
  // Unknown paths get httplib's 404, with a body so that curl shows something.
  // (Named type: a lambda would match both of httplib's set_error_handler overloads.)
  http.set_error_handler(httplib::Server::HandlerWithResponse(
      [](const httplib::Request&, httplib::Response& res) {
        if (res.status != 404 || !res.body.empty()) {
          return httplib::Server::HandlerResponse::Unhandled;  // keep /healthz's 503 body
        }
        res.set_content("not found\n", kTextContentType);
        return httplib::Server::HandlerResponse::Handled;
      }));
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& address, Registry& registry, HealthCheck health) {
  const absl::StatusOr<ListenAddress> parsed = ParseListenAddress(address);
  if (!parsed.ok()) return parsed.status();
  if (absl::Status s = CheckResolves(address, parsed->host); !s.ok()) return s;

  std::unique_ptr<MetricsHttpServer> server(new MetricsHttpServer());
  server->server_ = std::make_unique<httplib::Server>();
  httplib::Server& http = *server->server_;
  http.set_socket_options(ReuseAddressOnly);
  http.new_task_queue = [] { return new httplib::ThreadPool(kConnectionThreads); };
  Route(http, registry, std::move(health));

  // Bind (and listen) here rather than on the thread, so that errors come back from
  // Start and connections queue from the moment it returns. httplib reports only
  // success or failure; the reason is the errno of its last bind() or listen().
  errno = 0;
  if (parsed->port == 0) {
    server->port_ = http.bind_to_any_port(parsed->host);
  } else {
    server->port_ = http.bind_to_port(parsed->host, parsed->port) ? parsed->port : -1;
  }
  const int bind_errno = errno;
  if (server->port_ < 0) {
    return absl::UnavailableError("cannot listen on " + address + ": " +
                                  BindErrorReason(bind_errno));
  }

  auto finished = std::make_shared<std::atomic<bool>>(false);
  server->thread_ = std::thread([&http, finished] {
    http.listen_after_bind();
    finished->store(true);
  });
  // httplib's stop() does nothing until its accept loop has started, so wait for that:
  // a Stop() right after Start() would otherwise leave the thread accepting forever.
  while (!http.is_running() && !finished->load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (!http.is_running()) {
    server->thread_.join();
    return absl::UnavailableError("cannot listen on " + address + ": the server stopped");
  }
  return server;
}

MetricsHttpServer::~MetricsHttpServer() { Stop(); }

void MetricsHttpServer::Stop() {
  if (!thread_.joinable()) return;
  server_->stop();
  thread_.join();
}

}  // namespace fp8::metrics
