#include "common/metrics/process_metrics.h"

#include <unistd.h>

#include <chrono>
#include <ctime>

#include <gtest/gtest.h>

namespace fp8::metrics {
namespace {

double sample(const std::string& text, const std::string& name) {
  const size_t at = text.find("\n" + name + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + name.size() + 2));
}

TEST(ProcessMetrics, Sane) {
  const std::optional<ProcessStats> s = read_process_stats();
  ASSERT_TRUE(s.has_value());
  EXPECT_GT(s->resident_bytes, 1 << 20);
  EXPECT_GT(s->virtual_bytes, s->resident_bytes);
  const double now = static_cast<double>(std::time(nullptr));
  EXPECT_LE(s->start_time_seconds, now + 1);
  EXPECT_GT(s->start_time_seconds, now - 3600);  // this test started within the hour
  const std::optional<double> fds = count_open_fds();
  ASSERT_TRUE(fds.has_value());
  EXPECT_GE(*fds, 3);  // stdin, stdout, stderr
}

TEST(ProcessMetrics, ExposedAndCpuGrowsWithWork) {
  Registry r;
  register_process_metrics(r);
  const std::string before = r.expose();
  for (const char* name :
       {"process_cpu_seconds_total", "process_resident_memory_bytes",
        "process_virtual_memory_bytes", "process_open_fds", "process_start_time_seconds"}) {
    EXPECT_NE(before.find(std::string("# TYPE ") + name), std::string::npos) << name;
    // CPU time may still read 0 this early (it counts in 10 ms ticks).
    const double floor = std::string(name) == "process_cpu_seconds_total" ? -0.5 : 0;
    EXPECT_GT(sample(before, name), floor) << name << " in\n" << before;
  }
  // Burn 300 ms of this process's CPU time (clock ticks are 10 ms), however long a loaded
  // machine takes to give it, up to a minute.
  auto cpu_seconds = [] {
    timespec t{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
  };
  const double start = cpu_seconds();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(1);
  volatile double sink = 0;
  while (cpu_seconds() < start + 0.3 && std::chrono::steady_clock::now() < deadline) {
    for (int i = 0; i < 10000; ++i) sink = sink + i * 0.5;
  }
  const std::string after = r.expose();
  EXPECT_GT(sample(after, "process_cpu_seconds_total"),
            sample(before, "process_cpu_seconds_total") + 0.1);
}

}  // namespace
}  // namespace fp8::metrics
