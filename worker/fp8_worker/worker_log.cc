#include "worker/fp8_worker/worker_log.h"

#include <cstdio>
#include <mutex>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace fp8::worker {

void log(absl::string_view text) {
  // One mutex so that lines from the session loop and the log forwarder never interleave.
  static std::mutex mu;
  const std::string stamp = absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone());
  std::lock_guard<std::mutex> lock(mu);
  std::fprintf(stderr, "fp8-worker: %s %.*s\n", stamp.c_str(), static_cast<int>(text.size()), text.data());
  std::fflush(stderr);
}

}  // namespace fp8::worker
