// fp8-worker's Prometheus metrics (deploy/METRICS.md, "Worker"): whether it is connected,
// its ranks, and the heartbeat round trip. The session calls these from its one thread;
// the families are thread-safe, so a scrape may read them at any time.
#pragma once

#include <string>

#include "common/metrics/registry.h"
#include "worker/fp8_worker/rank_supervisor.h"

namespace fp8::worker {

class WorkerMetrics {
 public:
  WorkerMetrics(metrics::Registry& registry, const std::string& device);

  void OnRegistered(const std::string& worker_id);
  void OnDisconnected();  // an outage, or forgotten by the coordinator
  void OnHeartbeat(double round_trip_seconds);
  void OnRankStarted();
  void OnRankExit(const RankExit& exit);
  void SetRanksRunning(size_t ranks);

  // "success", "failure", "signal" or "stopped" (deploy/METRICS.md).
  static const char* Outcome(const RankExit& exit);

 private:
  const std::string device_;
  std::string worker_id_;
  metrics::GaugeFamily& info_;
  metrics::GaugeFamily& connected_;
  metrics::GaugeFamily& ranks_running_;
  metrics::CounterFamily& rank_starts_;
  metrics::CounterFamily& rank_exits_;
  metrics::HistogramFamily& heartbeat_;
};

}  // namespace fp8::worker
