// fp8-worker's Prometheus metrics (deploy/METRICS.md, "Worker"): whether each slot is
// connected, its ranks, and the heartbeat round trip. Every series carries the slot's
// device ("cpu", "cuda:1"), so that a daemon offering several GPUs exports one set per
// GPU from its one /metrics.
//
// The families are declared once per registry (WorkerMetricFamilies) and shared by the
// slots; each slot's session updates its own series (WorkerMetrics) from its own thread.
// The families are thread-safe, so a scrape may read them at any time.
#pragma once

#include <string>

#include "common/metrics/registry.h"
#include "worker/fp8_worker/rank_supervisor.h"

namespace fp8::worker {

struct WorkerMetricFamilies {
  explicit WorkerMetricFamilies(metrics::Registry& registry);

  metrics::GaugeFamily& info;            // {worker_id, device}
  metrics::GaugeFamily& connected;       // {device}
  metrics::GaugeFamily& ranks_running;   // {device}
  metrics::CounterFamily& rank_starts;   // {device}
  metrics::CounterFamily& rank_exits;    // {device, outcome}
  metrics::HistogramFamily& heartbeat;   // {device}
};

// One slot's series. Not thread-safe: the slot's session calls it from one thread.
class WorkerMetrics {
 public:
  // families outlives this.
  WorkerMetrics(WorkerMetricFamilies& families, std::string device);

  void on_registered(const std::string& worker_id);
  void on_disconnected();  // an outage, or forgotten by the coordinator
  void on_heartbeat(double round_trip_seconds);
  void on_rank_started();
  void on_rank_exit(const RankExit& exit);
  void set_ranks_running(size_t ranks);

  // "success", "failure", "signal" or "stopped" (deploy/METRICS.md).
  static const char* outcome(const RankExit& exit);

 private:
  WorkerMetricFamilies& f_;
  const std::string device_;
  std::string worker_id_;
};

}  // namespace fp8::worker
