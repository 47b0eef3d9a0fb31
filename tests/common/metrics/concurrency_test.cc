// Many threads updating, creating, removing and scraping at once: totals must add up
// (and under TSan/ASan builds, nothing may race).
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/metrics/registry.h"

namespace fp8::metrics {
namespace {

constexpr int kThreads = 8;
constexpr int kPerThread = 20000;

TEST(Concurrency, CountersGaugesAndHistogramsAddUp) {
  Registry r;
  auto& requests = r.counter("req_total", "R.", {"shard"});
  auto& inflight = r.gauge("inflight", "I.", {});
  auto& latency = r.histogram("lat_seconds", "L.", {}, {0.5, 1.5});
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        requests.with({std::to_string(i % 4)}).inc();  // lookups and creation race too
        inflight.with().inc();
        inflight.with().dec(0.5);
        latency.with().observe(t % 2);  // 0 or 1
      }
    });
  }
  // Scrape meanwhile: exposition must never tear or deadlock with updates.
  std::thread scraper([&] {
    for (int i = 0; i < 50; ++i) (void)r.expose();
  });
  for (auto& th : threads) th.join();
  scraper.join();

  double total = 0;
  for (int shard = 0; shard < 4; ++shard) total += requests.with({std::to_string(shard)}).value();
  EXPECT_EQ(total, kThreads * kPerThread);
  EXPECT_EQ(inflight.with().value(), kThreads * kPerThread * 0.5);
  const Histogram::Snapshot s = latency.with().snapshot();
  EXPECT_EQ(s.count, static_cast<uint64_t>(kThreads * kPerThread));
  EXPECT_EQ(s.cumulative[0], static_cast<uint64_t>(kThreads / 2 * kPerThread));  // the zeros
  EXPECT_EQ(s.sum, kThreads / 2 * kPerThread);
}

// The coordinator's pattern: report threads do with({job, ...}).set() while the job-end
// path removes the job's series. Removed children are retired, not freed, so the race
// between another thread's with() and its set() is benign.
TEST(Concurrency, RemoveIfWhileOthersCreate) {
  Registry r;
  auto& g = r.gauge("g", "G.", {"job_id", "layer"}, /*max_series=*/100);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i) {
        const std::string job = "job-" + std::to_string((i + t) % 10);
        g.with({job, std::to_string(i % 30)}).set(i);
        if (i % 50 == 0) g.remove_if("job_id", job);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_LE(g.size(), 100u);
  (void)r.expose();
}

}  // namespace
}  // namespace fp8::metrics
