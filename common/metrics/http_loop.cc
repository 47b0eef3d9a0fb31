#include "common/metrics/http_loop.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

namespace fp8::metrics {
namespace {

using Clock = std::chrono::steady_clock;

// Longer heads are answered 431: what a scraper, a probe or a browser sends is far shorter.
constexpr size_t kMaxRequestHead = 8192;
// When accept() fails for want of file descriptors and no connection can be closed to
// free one, the listening socket stays readable: stop polling it a moment, not spin.
constexpr auto kAcceptPause = std::chrono::milliseconds(100);

std::string bind_error_reason(int error) {
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

// Only SO_REUSEADDR (a restarted daemon may bind while old connections sit in TIME_WAIT),
// never SO_REUSEPORT, which would let a second daemon bind the same port silently and
// split the scrapes between the two.
absl::StatusOr<int> listen_on(const ListenAddress& address, int backlog) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(address.port);
  if (const int rc = getaddrinfo(address.host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    return absl::InvalidArgumentError("cannot resolve host '" + address.host + "': " + gai_strerror(rc));
  }
  int error = 0;
  for (const addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    const int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      error = errno;
      continue;
    }
    int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, backlog) == 0) {
      freeaddrinfo(found);
      return fd;
    }
    error = errno;
    ::close(fd);
  }
  freeaddrinfo(found);
  return absl::UnavailableError(bind_error_reason(error));
}

int bound_port(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return -1;
  if (addr.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(addr).sin_port);
  return ntohs(reinterpret_cast<const sockaddr_in6&>(addr).sin6_port);
}

int milliseconds_until(Clock::time_point when, Clock::time_point now) {
  if (when <= now) return 0;
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(when - now).count();
  return static_cast<int>(std::min<decltype(ms)>(ms, INT_MAX));
}

}  // namespace

struct HttpLoop::Connection {
  int fd = -1;  // -1 once closed
  Clock::time_point deadline;
  std::string received;  // the request head so far
  std::string response;  // non-empty once answered
  size_t sent = 0;

  bool answering() const { return !response.empty(); }
  void close() {
    if (fd < 0) return;
    ::close(fd);
    fd = -1;
  }
};

HttpLoop::HttpLoop(const HttpServerOptions& options, Handler handler)
    : options_(options), handler_(std::move(handler)) {}

absl::StatusOr<std::unique_ptr<HttpLoop>> HttpLoop::start(const ListenAddress& address,
                                                          const HttpServerOptions& options,
                                                          Handler handler) {
  std::unique_ptr<HttpLoop> loop(new HttpLoop(options, std::move(handler)));
  absl::StatusOr<int> fd = listen_on(address, options.listen_backlog);
  if (!fd.ok()) return fd.status();
  loop->listen_fd_ = *fd;
  loop->port_ = bound_port(*fd);
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_NONBLOCK | O_CLOEXEC) != 0) {
    return absl::InternalError(std::string("pipe: ") + std::strerror(errno));
  }
  loop->wake_read_ = pipe_fds[0];
  loop->wake_write_ = pipe_fds[1];
  loop->thread_ = std::thread([raw = loop.get()] { raw->run(); });
  return loop;
}

HttpLoop::~HttpLoop() { stop(); }

void HttpLoop::stop() {
  if (thread_.joinable()) {
    const char byte = 0;
    while (write(wake_write_, &byte, 1) < 0 && errno == EINTR) {
    }
    thread_.join();
  }
  close_fds();
}

void HttpLoop::close_fds() {
  for (int* fd : {&listen_fd_, &wake_read_, &wake_write_}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
}

void HttpLoop::run() {
  std::vector<Connection> connections;  // in the order they were accepted
  std::vector<pollfd> fds;
  Clock::time_point accept_paused_until{};
  for (;;) {
    const Clock::time_point now = Clock::now();
    const bool accepting = now >= accept_paused_until;
    Clock::time_point wake_at = accepting ? Clock::time_point::max() : accept_paused_until;
    fds.clear();
    fds.push_back({wake_read_, POLLIN, 0});
    fds.push_back({accepting ? listen_fd_ : -1, POLLIN, 0});  // poll() skips a negative fd
    for (const Connection& c : connections) {
      fds.push_back({c.fd, static_cast<short>(c.answering() ? POLLOUT : POLLIN), 0});
      wake_at = std::min(wake_at, c.deadline);
    }
    const int timeout = wake_at == Clock::time_point::max() ? -1 : milliseconds_until(wake_at, now);
    if (poll(fds.data(), fds.size(), timeout) < 0) {
      for (pollfd& p : fds) p.revents = 0;  // EINTR, or ENOMEM: try again
    }
    if (fds[0].revents != 0) break;  // stop()

    for (size_t i = 0; i < connections.size(); ++i) {
      if (fds[i + 2].revents != 0) serve(connections[i]);
    }
    const Clock::time_point after = Clock::now();
    for (Connection& c : connections) {
      if (after >= c.deadline) c.close();
    }
    std::erase_if(connections, [](const Connection& c) { return c.fd < 0; });
    if (fds[1].revents != 0) accept_all(connections, accept_paused_until);
  }
  for (Connection& c : connections) c.close();
}

void HttpLoop::accept_all(std::vector<Connection>& connections, Clock::time_point& paused_until) {
  // The oldest connection still sending its request: the likeliest to be a slow or idle
  // client, and the one that has had the longest to finish.
  auto evict_oldest_reader = [&connections] {
    auto it = std::find_if(connections.begin(), connections.end(),
                           [](const Connection& c) { return !c.answering(); });
    if (it == connections.end()) return false;
    it->close();
    connections.erase(it);
    return true;
  };
  const size_t max_connections = static_cast<size_t>(std::max(options_.max_connections, 1));
  // A quarter of the cap per round: a new connection (a probe) then has a round to send
  // its request before enough newer ones can come to evict it, and the open ones get
  // their turn; the kernel's backlog holds the rest meanwhile.
  const size_t per_round = std::max<size_t>(max_connections / 4, 1);
  for (size_t accepted = 0; accepted < per_round; ++accepted) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        if (evict_oldest_reader()) continue;
        paused_until = Clock::now() + kAcceptPause;
      }
      return;  // EAGAIN: none left
    }
    if (connections.size() >= max_connections && !evict_oldest_reader()) {
      ::close(fd);
      continue;
    }
    Connection& c = connections.emplace_back();
    c.fd = fd;
    c.deadline = Clock::now() + options_.request_timeout;
  }
}

void HttpLoop::serve(Connection& c) {
  if (c.answering()) {
    send(c);
    return;
  }
  bool eof = false;
  char buffer[4096];
  while (c.received.size() <= kMaxRequestHead) {
    const size_t want = std::min(sizeof(buffer), kMaxRequestHead + 1 - c.received.size());
    const ssize_t n = recv(c.fd, buffer, want, 0);
    if (n > 0) {
      c.received.append(buffer, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n < 0) {
      c.close();
      return;
    }
    eof = true;  // the client may half-close after its request: still answer it
    break;
  }
  const size_t head = request_head_length(c.received);
  if (head == 0 && c.received.size() <= kMaxRequestHead) {
    if (eof) c.close();  // gone before finishing its request
    return;
  }
  answer(c, head == 0 ? std::string_view() : std::string_view(c.received).substr(0, head));
  send(c);
}

void HttpLoop::answer(Connection& c, std::string_view head) {
  HttpResponse response;
  if (head.empty() || head.size() > kMaxRequestHead) {
    response = {431, response.content_type, "request head too large\n"};
  } else if (std::optional<RequestLine> line = parse_request_line(head); !line) {
    response = {400, response.content_type, "bad request\n"};
  } else if (line->method != "GET") {
    response = {405, response.content_type, "only GET\n"};
  } else {
    response = handler_(line->path);
  }
  c.response = serialize_response(response);
  c.received.clear();
  c.received.shrink_to_fit();
  c.deadline = Clock::now() + options_.request_timeout;  // a fresh allowance to take it
}

void HttpLoop::send(Connection& c) {
  while (c.sent < c.response.size()) {
    const ssize_t n = ::send(c.fd, c.response.data() + c.sent, c.response.size() - c.sent, MSG_NOSIGNAL);
    if (n > 0) {
      c.sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;  // POLLOUT will say when
    c.close();
    return;
  }
  // All sent. Read what the client may still have sent (a body nobody asked for): closing
  // with unread bytes would reset the connection and could discard the response.
  shutdown(c.fd, SHUT_WR);
  char sink[4096];
  for (int i = 0; i < 16 && recv(c.fd, sink, sizeof(sink), 0) > 0; ++i) {
  }
  c.close();
}

}  // namespace fp8::metrics
