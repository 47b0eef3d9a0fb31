#include "common/metrics/process_metrics.h"

#include <unistd.h>

#include <exception>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace fp8::metrics {
namespace {

std::optional<std::string> read_file(const char* path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// System boot time in seconds since the epoch: the "btime" line of /proc/stat.
std::optional<double> boot_time() {
  std::ifstream in("/proc/stat");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("btime ", 0) == 0) return std::stod(line.substr(6));
  }
  return std::nullopt;
}

}  // namespace

std::optional<ProcessStats> read_process_stats() try {
  const std::optional<std::string> stat = read_file("/proc/self/stat");
  const std::optional<double> boot = boot_time();
  if (!stat || !boot) return std::nullopt;
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so the fields are
  // counted from the last ')'. fields[0] is field 3 (state) of proc(5).
  const size_t paren = stat->rfind(')');
  if (paren == std::string::npos) return std::nullopt;
  std::istringstream rest(stat->substr(paren + 1));
  std::vector<std::string> fields;
  for (std::string f; rest >> f;) fields.push_back(f);
  auto field = [&](int number) { return std::stod(fields[static_cast<size_t>(number - 3)]); };
  if (fields.size() < 22) return std::nullopt;

  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  ProcessStats s;
  s.cpu_seconds = (field(14) + field(15)) / ticks;            // utime + stime
  s.start_time_seconds = *boot + field(22) / ticks;           // starttime, ticks after boot
  s.virtual_bytes = field(23);                                // vsize, bytes
  s.resident_bytes = field(24) * page;                        // rss, pages
  return s;
} catch (const std::exception&) {  // std::stod on a field that is not a number
  return std::nullopt;
}

std::optional<double> count_open_fds() {
  std::error_code error;
  std::filesystem::directory_iterator it("/proc/self/fd", error);
  if (error) return std::nullopt;
  // Includes the descriptor this listing holds open, as other clients' readings do.
  double count = 0;
  for (; it != std::filesystem::directory_iterator(); it.increment(error)) {
    if (error) return std::nullopt;
    ++count;
  }
  return count;
}

void register_process_metrics(Registry& registry) {
  Counter& cpu = registry
                     .counter("process_cpu_seconds_total",
                              "Total user and system CPU time spent in seconds.", {})
                     .with();
  Gauge& resident = registry
                        .gauge("process_resident_memory_bytes",
                               "Resident memory size in bytes.", {})
                        .with();
  Gauge& virt = registry
                    .gauge("process_virtual_memory_bytes", "Virtual memory size in bytes.", {})
                    .with();
  Gauge& fds = registry.gauge("process_open_fds", "Number of open file descriptors.", {}).with();
  Gauge& start = registry
                     .gauge("process_start_time_seconds",
                            "Start time of the process since unix epoch in seconds.", {})
                     .with();
  registry.add_collector([&cpu, &resident, &virt, &fds, &start] {
    if (const std::optional<ProcessStats> s = read_process_stats()) {
      cpu.set_total(s->cpu_seconds);
      resident.set(s->resident_bytes);
      virt.set(s->virtual_bytes);
      start.set(s->start_time_seconds);
    }
    if (const std::optional<double> n = count_open_fds()) fds.set(*n);
  });
}

}  // namespace fp8::metrics
