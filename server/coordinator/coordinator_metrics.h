// The coordinator's Prometheus metrics (deploy/METRICS.md): per job (state, progress,
// communication, restarts, numerics events), per fp8 cast of a job's layers, and the
// scheduler's and workers' counts. The Coordinator calls the On* methods as things happen
// (under its own lock); SetCluster is called by a registry collector at scrape time.
//
// Cardinality: a job's series live while it is active and for the `keep_finished` most
// recently finished jobs after it; its per-cast series (layers x tensors, the many) only
// until the next job finishes: a job that ends between two scrapes still leaves its last
// numerics report to be scraped.
#pragma once

#include <deque>
#include <map>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/metrics/registry.h"
#include "fp8/v1/job_service.pb.h"
#include "fp8/v1/trainer_service.pb.h"

namespace fp8::server {

// What the scheduler holds at one moment, by device kind ("cpu", "cuda").
struct ClusterCounts {
  std::map<std::pair<std::string, std::string>, int> workers;  // (device kind, state) -> workers
  std::map<std::string, int> queued;                           // device kind -> QUEUED jobs
  std::map<std::string, int> active_jobs;                      // state -> QUEUED/RUNNING/RESTARTING jobs
};

// "cpu" / "cuda" for the API's device enum.
std::string device_kind_label(int device_kind);

class CoordinatorMetrics {
 public:
  explicit CoordinatorMetrics(metrics::Registry& registry, size_t keep_finished = 20);

  // A job was submitted, loaded or changed: its info, state and latest progress.
  void on_job(const v1::Job& job);
  // Any rank's progress report: the job's counters (tokens, model FLOPs at
  // `flops_per_token`, communication bytes) add up every rank's share (a tensor-parallel
  // rank's share of tokens and FLOPs is 1/parallel.tensor of its batch's).
  void on_rank_progress(const v1::Job& job, int rank, const v1::TrainingProgress& p, double flops_per_token);
  void on_cast_numerics(const std::string& job_id, const v1::ReportCastNumericsRequest& request);
  void on_numerics_event(const std::string& job_id, const std::string& kind);
  // An attempt started `queue_wait_seconds` after the job was submitted (or its previous
  // attempt ended).
  void on_attempt_started(const v1::Job& job, double queue_wait_seconds);
  // Why a QUEUED or RESTARTING job waits: "workers", "behind" or "backoff" (OnJob clears
  // it once the job no longer waits).
  void on_pending(const std::string& job_id, const std::string& reason);
  void on_heartbeat();
  void on_worker_lost(int device_kind);
  void set_cluster(const ClusterCounts& counts);

 private:
  // Drops the job's series (all of them, or only the per-cast ones).
  void forget_job(const std::string& job_id);
  void forget_casts(const std::string& job_id);

  const size_t keep_finished_;
  absl::Mutex mu_;
  std::deque<std::string> finished_ ABSL_GUARDED_BY(mu_);  // oldest first
  std::string casts_kept_ ABSL_GUARDED_BY(mu_);           // the finished job whose casts stay

  // ---- jobs
  metrics::GaugeFamily& job_info_;
  metrics::GaugeFamily& job_state_;
  metrics::GaugeFamily& job_pending_reason_;
  metrics::GaugeFamily& job_step_;
  metrics::GaugeFamily& job_total_steps_;
  metrics::GaugeFamily& job_tokens_per_second_;
  metrics::GaugeFamily& job_loss_;
  metrics::GaugeFamily& job_validation_loss_;
  metrics::GaugeFamily& job_grad_norm_;
  metrics::GaugeFamily& job_learning_rate_;
  metrics::GaugeFamily& job_step_seconds_;
  metrics::GaugeFamily& job_peak_memory_;
  metrics::GaugeFamily& job_step_part_seconds_;
  metrics::GaugeFamily& job_mfu_;
  metrics::GaugeFamily& rank_mfu_;
  metrics::GaugeFamily& job_tensor_parallel_exposed_seconds_;
  metrics::CounterFamily& job_communication_bytes_;
  metrics::CounterFamily& job_tokens_;
  metrics::CounterFamily& rank_tokens_;
  metrics::CounterFamily& job_model_flops_;
  metrics::CounterFamily& job_restarts_;
  metrics::CounterFamily& job_numerics_events_;
  metrics::CounterFamily& jobs_finished_;
  // ---- casts
  metrics::GaugeFamily& cast_amax_;
  metrics::GaugeFamily& cast_scale_;
  metrics::GaugeFamily& cast_range_use_;
  metrics::GaugeFamily& cast_saturated_;
  metrics::GaugeFamily& cast_underflow_;
  // ---- scheduler and workers
  metrics::GaugeFamily& queue_depth_;
  metrics::GaugeFamily& scheduler_jobs_;
  metrics::HistogramFamily& queue_wait_;
  metrics::GaugeFamily& workers_;
  metrics::CounterFamily& workers_lost_;
  metrics::CounterFamily& heartbeats_;
};

}  // namespace fp8::server
