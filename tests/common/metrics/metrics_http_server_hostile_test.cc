// The metrics HTTP server under clients that would starve a thread-per-connection server:
// drip-feeders and a flood of idle connections. /healthz must still answer, with the
// server's default options (what the daemons run with).
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>

#include <gtest/gtest.h>

#include "common/metrics/metrics_http_server.h"
#include "tests/common/metrics/loopback_client.h"

namespace fp8::metrics {
namespace {

using Clock = std::chrono::steady_clock;
using testing::closed_by_peer;
using testing::connect_loopback;

// GET /healthz's status with a client that gives up after 3 s (connecting, sending or
// waiting for the answer); 0 when it gave up or failed.
int healthz_status(int port) {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(std::chrono::seconds(3));
  client.set_read_timeout(std::chrono::seconds(3));
  client.set_write_timeout(std::chrono::seconds(3));
  auto res = client.Get("/healthz");
  return res ? res->status : 0;
}

// A client that sends a request head one byte a second and never finishes it, until the
// server closes the connection or stop(). Bounded: it gives up after a minute anyway.
class Dripper {
 public:
  explicit Dripper(int port) : fd_(connect_loopback(port)) {
    thread_ = std::thread([this] { drip(); });
  }
  ~Dripper() {
    stop();
    if (fd_ >= 0) close(fd_);
  }

  bool connected() const { return fd_ >= 0; }
  bool closed_by_server() const { return closed_.load(); }

  void stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void drip() {
    if (fd_ < 0) return;
    const std::string head = "GET /metrics HTTP/1.1\r\n";
    const std::string filler = "X-Drip: a\r\n";  // never the blank line that ends a head
    for (size_t i = 0; i < 60; ++i) {
      const char byte = i < head.size() ? head[i] : filler[(i - head.size()) % filler.size()];
      if (closed_by_peer(fd_) || send(fd_, &byte, 1, MSG_NOSIGNAL) != 1) {
        closed_ = true;
        return;
      }
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, std::chrono::seconds(1), [this] { return stop_; })) return;
    }
  }

  const int fd_;
  std::atomic<bool> closed_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

TEST(MetricsHttpServerHostile, DripFeedersDoNotStarveHealthz) {
  Registry registry;
  auto server = MetricsHttpServer::start("127.0.0.1:0", registry);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();

  std::vector<std::unique_ptr<Dripper>> drippers;
  for (int i = 0; i < 16; ++i) {
    drippers.push_back(std::make_unique<Dripper>(port));
    ASSERT_TRUE(drippers.back()->connected()) << i;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // each mid-request
  for (int i = 0; i < 5; ++i) EXPECT_EQ(healthz_status(port), 200) << "probe " << i;

  // The server cuts them off: a request head has a deadline, however steadily it drips.
  const Clock::time_point give_up = Clock::now() + std::chrono::seconds(30);
  auto all_closed = [&] {
    for (const auto& d : drippers) {
      if (!d->closed_by_server()) return false;
    }
    return true;
  };
  while (!all_closed() && Clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  for (size_t i = 0; i < drippers.size(); ++i) {
    EXPECT_TRUE(drippers[i]->closed_by_server()) << "dripper " << i << " still connected";
  }
  for (auto& d : drippers) d->stop();
  EXPECT_EQ(healthz_status(port), 200);
}

TEST(MetricsHttpServerHostile, IdleConnectionFloodDoesNotStarveHealthz) {
  Registry registry;
  auto server = MetricsHttpServer::start("127.0.0.1:0", registry);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();

  // More than the server keeps open (HttpServerOptions::max_connections), sending nothing.
  std::vector<int> idle;
  for (int i = 0; i < 200; ++i) {
    const int fd = connect_loopback(port);
    if (fd >= 0) idle.push_back(fd);
  }
  EXPECT_EQ(idle.size(), 200u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(healthz_status(port), 200) << "probe " << i;
  // The probes came after the flood, so the server had accepted all of it by then, and
  // closed the oldest idle ones beyond its cap to make room.
  const size_t cap = static_cast<size_t>(HttpServerOptions().max_connections);
  size_t closed = 0;
  for (int wait = 0; wait < 30 && closed < idle.size() - cap; ++wait) {
    closed = 0;
    for (int fd : idle) closed += closed_by_peer(fd) ? 1 : 0;
    if (closed < idle.size() - cap) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_GE(closed, idle.size() - cap);
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(std::chrono::seconds(3));
  auto res = client.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  for (int fd : idle) close(fd);
}

}  // namespace
}  // namespace fp8::metrics
