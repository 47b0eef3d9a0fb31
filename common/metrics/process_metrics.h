// The standard process_* metrics every Prometheus client exports, read from /proc at each
// scrape (Linux only): process_cpu_seconds_total, process_resident_memory_bytes,
// process_virtual_memory_bytes, process_open_fds, process_start_time_seconds.
#pragma once

#include <optional>

#include "common/metrics/registry.h"

namespace fp8::metrics {

// Declares the five families and adds a collector that refreshes them. A reading that
// fails (no /proc) leaves the previous values.
void register_process_metrics(Registry& registry);

// One reading of this process's statistics, for the collector and its tests.
struct ProcessStats {
  double cpu_seconds = 0;          // user + system
  double resident_bytes = 0;       // RSS
  double virtual_bytes = 0;        // VSZ
  double start_time_seconds = 0;   // since the Unix epoch
};
std::optional<ProcessStats> read_process_stats();
// Entries in /proc/self/fd, or nullopt when it cannot be listed.
std::optional<double> count_open_fds();

}  // namespace fp8::metrics
