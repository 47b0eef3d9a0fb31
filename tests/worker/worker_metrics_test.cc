// fp8-worker's metrics with several slots on one registry: the families are declared
// once, and each slot's series carry its device and move only with its own events.
#include "worker/fp8_worker/worker_metrics.h"

#include <gtest/gtest.h>

#include <string>

#include "common/metrics/registry.h"

namespace fp8::worker {
namespace {

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

bool has(const std::string& text, const std::string& line) { return count(text, line + "\n") > 0; }

TEST(WorkerMetrics, EachSlotHasItsOwnSeriesInOneSetOfFamilies) {
  metrics::Registry registry;
  WorkerMetricFamilies families(registry);
  WorkerMetrics gpu0(families, "cuda:0");
  WorkerMetrics gpu1(families, "cuda:1");

  gpu0.on_registered("w-1");
  gpu1.on_registered("w-2");
  gpu1.on_disconnected();
  gpu0.on_rank_started();
  gpu0.set_ranks_running(1);
  RankExit stopped;
  stopped.last_status.set_state(v1::RankStatus::STOPPING);
  stopped.signal = 15;
  gpu1.on_rank_exit(stopped);
  gpu0.on_heartbeat(0.01);

  const std::string text = registry.expose();
  for (const char* family : {"fp8_worker_info", "fp8_worker_connected", "fp8_worker_ranks_running",
                             "fp8_worker_rank_starts_total", "fp8_worker_rank_exits_total",
                             "fp8_worker_heartbeat_seconds"}) {
    EXPECT_EQ(count(text, std::string("# TYPE ") + family + " "), 1u) << family << "\n" << text;
  }
  EXPECT_TRUE(has(text, R"(fp8_worker_info{worker_id="w-1",device="cuda:0"} 1)")) << text;
  EXPECT_TRUE(has(text, R"(fp8_worker_info{worker_id="w-2",device="cuda:1"} 1)")) << text;
  EXPECT_EQ(count(text, "fp8_worker_info{"), 2u) << "the unregistered placeholders are gone\n" << text;
  EXPECT_TRUE(has(text, R"(fp8_worker_connected{device="cuda:0"} 1)")) << text;
  EXPECT_TRUE(has(text, R"(fp8_worker_connected{device="cuda:1"} 0)")) << text;
  EXPECT_TRUE(has(text, R"(fp8_worker_ranks_running{device="cuda:0"} 1)")) << text;
  EXPECT_TRUE(has(text, R"(fp8_worker_ranks_running{device="cuda:1"} 0)")) << text;
  EXPECT_TRUE(has(text, R"(fp8_worker_rank_starts_total{device="cuda:0"} 1)")) << text;
  EXPECT_TRUE(has(text, R"(fp8_worker_rank_starts_total{device="cuda:1"} 0)")) << text;
  EXPECT_TRUE(has(text, R"(fp8_worker_rank_exits_total{device="cuda:1",outcome="stopped"} 1)")) << text;
  EXPECT_TRUE(has(text, R"(fp8_worker_rank_exits_total{device="cuda:0",outcome="stopped"} 0)")) << text;
  EXPECT_TRUE(has(text, R"(fp8_worker_heartbeat_seconds_count{device="cuda:0"} 1)")) << text;
}

// A second declaration on the same registry is the same families, not a clash.
TEST(WorkerMetrics, FamiliesDeclaredTwiceAreTheSame) {
  metrics::Registry registry;
  WorkerMetricFamilies a(registry);
  WorkerMetricFamilies b(registry);
  EXPECT_EQ(&a.connected, &b.connected);
  EXPECT_EQ(&a.heartbeat, &b.heartbeat);
}

}  // namespace
}  // namespace fp8::worker
