#include "worker/fp8_worker/worker_metrics.h"

namespace fp8::worker {

WorkerMetrics::WorkerMetrics(metrics::Registry& r, const std::string& device)
    : device_(device),
      info_(r.gauge("fp8_worker_info", "The worker's id (once registered) and device.", {"worker_id", "device"})),
      connected_(r.gauge("fp8_worker_connected", "1 while registered with the coordinator and heartbeating.", {})),
      ranks_running_(r.gauge("fp8_worker_ranks_running", "fp8-train children alive.", {})),
      rank_starts_(r.counter("fp8_worker_rank_starts_total", "Ranks started.", {})),
      rank_exits_(r.counter("fp8_worker_rank_exits_total",
                            "Rank exits: success, failure (non-zero exit), signal, stopped (asked to stop).",
                            {"outcome"})),
      heartbeat_(r.histogram("fp8_worker_heartbeat_seconds", "Heartbeat round trip to the coordinator.", {},
                             {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5})) {
  info_.with({"", device_}).set(1);
  connected_.with({}).set(0);
  ranks_running_.with({}).set(0);
  rank_starts_.with({});
  for (const char* outcome : {"success", "failure", "signal", "stopped"}) rank_exits_.with({outcome});
}

void WorkerMetrics::OnRegistered(const std::string& worker_id) {
  if (worker_id != worker_id_) {
    info_.remove({worker_id_, device_});
    worker_id_ = worker_id;
    info_.with({worker_id_, device_}).set(1);
  }
  connected_.with({}).set(1);
}

void WorkerMetrics::OnDisconnected() { connected_.with({}).set(0); }

void WorkerMetrics::OnHeartbeat(double round_trip_seconds) {
  connected_.with({}).set(1);
  heartbeat_.with({}).observe(round_trip_seconds);
}

void WorkerMetrics::OnRankStarted() { rank_starts_.with({}).inc(); }

void WorkerMetrics::OnRankExit(const RankExit& exit) { rank_exits_.with({Outcome(exit)}).inc(); }

void WorkerMetrics::SetRanksRunning(size_t ranks) { ranks_running_.with({}).set(static_cast<double>(ranks)); }

const char* WorkerMetrics::Outcome(const RankExit& exit) {
  if (exit.last_status.state() == v1::RankStatus::STOPPING) return "stopped";
  if (exit.signal.has_value()) return "signal";
  return exit.exit_code.value_or(0) == 0 ? "success" : "failure";
}

}  // namespace fp8::worker
