#include "worker/fp8_worker/worker_metrics.h"

#include <utility>

namespace fp8::worker {

WorkerMetricFamilies::WorkerMetricFamilies(metrics::Registry& r)
    : info(r.gauge("fp8_worker_info", "The worker's id (once registered) and device.", {"worker_id", "device"})),
      connected(r.gauge("fp8_worker_connected", "1 while registered with the coordinator and heartbeating.",
                        {"device"})),
      ranks_running(r.gauge("fp8_worker_ranks_running", "fp8-train children alive.", {"device"})),
      rank_starts(r.counter("fp8_worker_rank_starts_total", "Ranks started.", {"device"})),
      rank_exits(r.counter("fp8_worker_rank_exits_total",
                           "Rank exits: success, failure (non-zero exit), signal, stopped (asked to stop).",
                           {"device", "outcome"})),
      heartbeat(r.histogram("fp8_worker_heartbeat_seconds", "Heartbeat round trip to the coordinator.", {"device"},
                            {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5})) {}

WorkerMetrics::WorkerMetrics(WorkerMetricFamilies& families, std::string device)
    : f_(families), device_(std::move(device)) {
  // Every series from the start, so that a scrape before the first event shows zeros.
  f_.info.with({"", device_}).set(1);
  f_.connected.with({device_}).set(0);
  f_.ranks_running.with({device_}).set(0);
  f_.rank_starts.with({device_});
  for (const char* outcome : {"success", "failure", "signal", "stopped"}) f_.rank_exits.with({device_, outcome});
}

void WorkerMetrics::on_registered(const std::string& worker_id) {
  if (worker_id != worker_id_) {
    f_.info.remove({worker_id_, device_});
    worker_id_ = worker_id;
    f_.info.with({worker_id_, device_}).set(1);
  }
  f_.connected.with({device_}).set(1);
}

void WorkerMetrics::on_disconnected() { f_.connected.with({device_}).set(0); }

void WorkerMetrics::on_heartbeat(double round_trip_seconds) {
  f_.connected.with({device_}).set(1);
  f_.heartbeat.with({device_}).observe(round_trip_seconds);
}

void WorkerMetrics::on_rank_started() { f_.rank_starts.with({device_}).inc(); }

void WorkerMetrics::on_rank_exit(const RankExit& exit) { f_.rank_exits.with({device_, outcome(exit)}).inc(); }

void WorkerMetrics::set_ranks_running(size_t ranks) {
  f_.ranks_running.with({device_}).set(static_cast<double>(ranks));
}

const char* WorkerMetrics::outcome(const RankExit& exit) {
  if (exit.last_status.state() == v1::RankStatus::STOPPING) return "stopped";
  if (exit.signal.has_value()) return "signal";
  return exit.exit_code.value_or(0) == 0 ? "success" : "failure";
}

}  // namespace fp8::worker
