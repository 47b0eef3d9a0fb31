// A small HTTP server for endpoints that must answer under hostile load (the metrics
// port's /healthz): one thread, non-blocking sockets and poll(), GET only, one request per
// connection (Connection: close).
//
// Why not a thread per connection (cpp-httplib's pool, civetweb's num_threads): there a
// client that connects and sends nothing, or drips its request a byte at a time, holds a
// thread until its timeout, so a handful of them (or a flood of idle connections) leaves
// no thread for the probe. Here such a client costs one socket, and these bound it:
//   - each connection has request_timeout in all to send its request head, and
//     request_timeout again to take the response; past it, it is closed;
//   - at most max_connections are open: a new one beyond that closes the oldest one still
//     sending its request (the probe, being the newest, is served), or, when every one is
//     being answered, is itself closed at once;
//   - the kernel queues at most listen_backlog connections not yet accepted.
// The handler runs on the loop's thread: it must be quick (an expose(), a status check).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "common/metrics/http_wire.h"
#include "common/metrics/listen_address.h"

namespace fp8::metrics {

// Named after civetweb's options of the same meaning (request_timeout_ms, listen_backlog;
// num_threads + connection_queue for max_connections), which prometheus-cpp's exposer
// takes, so that the knobs carry over.
struct HttpServerOptions {
  std::chrono::milliseconds request_timeout{10'000};
  int max_connections = 128;
  int listen_backlog = 128;
};

class HttpLoop {
 public:
  // Called for each GET with the request's path (no query string).
  using Handler = std::function<HttpResponse(std::string_view path)>;

  // Binds and listens on `address`, then serves on a thread of its own until stop().
  // Errors: InvalidArgument "cannot resolve host 'h': ..."; Unavailable with why the port
  // could not be bound ("address in use").
  static absl::StatusOr<std::unique_ptr<HttpLoop>> start(const ListenAddress& address,
                                                         const HttpServerOptions& options,
                                                         Handler handler);

  ~HttpLoop();  // stop()s
  HttpLoop(const HttpLoop&) = delete;
  HttpLoop& operator=(const HttpLoop&) = delete;

  int port() const { return port_; }

  // Closes every connection and the listening socket, and joins the thread; idempotent.
  void stop();

 private:
  struct Connection;

  HttpLoop(const HttpServerOptions& options, Handler handler);
  void run();
  void serve(Connection& c);
  void answer(Connection& c, std::string_view head);
  void send(Connection& c);
  void accept_all(std::vector<Connection>& connections,
                 std::chrono::steady_clock::time_point& paused_until);
  void close_fds();

  const HttpServerOptions options_;
  const Handler handler_;
  int listen_fd_ = -1;
  int wake_read_ = -1;  // a byte on this pipe tells the loop to stop
  int wake_write_ = -1;
  int port_ = 0;
  std::thread thread_;
};

}  // namespace fp8::metrics
