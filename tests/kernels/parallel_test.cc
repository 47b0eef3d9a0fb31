#include "cpu/parallel.h"

#include <atomic>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace fp8::cpu {
namespace {

TEST(ParallelFor, CoversEveryIndexOnceInOrderedChunks) {
  for (int64_t n : {0, 1, 7, 1000, 100003}) {
    for (int64_t grain : {1, 16, 4096}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      const int64_t chunks = plan_chunks(n, grain);
      std::vector<std::pair<int64_t, int64_t>> ranges(static_cast<size_t>(chunks), {-1, -1});
      parallel_for(n, grain, [&](int64_t c, int64_t b, int64_t e) {
        ranges[static_cast<size_t>(c)] = {b, e};
        for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << n << " " << i;
      int64_t prev_end = 0;
      for (auto [b, e] : ranges) {
        if (b < 0) continue;
        EXPECT_EQ(b, prev_end);
        prev_end = e;
      }
      if (n > 0) {
        EXPECT_EQ(prev_end, n);
      }
    }
  }
}

TEST(ParallelFor, NestedCallsRunInline) {
  std::atomic<int64_t> total{0};
  parallel_for(64, 1, [&](int64_t, int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      parallel_for(100, 1, [&](int64_t, int64_t b2, int64_t e2) { total += e2 - b2; });
    }
  });
  EXPECT_EQ(total.load(), 6400);
}

TEST(ParallelFor, ConcurrentCallersFromManyThreads) {
  std::atomic<int64_t> total{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 4; ++t) {
    callers.emplace_back([&] {
      for (int rep = 0; rep < 50; ++rep) {
        parallel_for(1000, 10, [&](int64_t, int64_t b, int64_t e) { total += e - b; });
      }
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(total.load(), 4 * 50 * 1000);
}

}  // namespace
}  // namespace fp8::cpu
