#include "server/coordinator/coordinator_metrics.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/ascii.h"
#include "common/jobspec/model_shapes.h"
#include "fp8/v1/job.pb.h"
#include "fp8/v1/worker_service.pb.h"

namespace fp8::server {
namespace {

// The job's labels as one label value: "key=value" pairs sorted by key and joined by
// commas; a comma or backslash inside a value gets a backslash before it (keys hold
// neither).
std::string labels_value(const v1::JobSpec& spec) {
  std::map<std::string, std::string> sorted(spec.labels().begin(), spec.labels().end());
  std::string out;
  for (const auto& [key, value] : sorted) {
    if (!out.empty()) out += ',';
    out += key;
    out += '=';
    for (char ch : value) {
      if (ch == ',' || ch == '\\') out += '\\';
      out += ch;
    }
  }
  return out;
}

constexpr size_t kCastSeriesLimit = 4096;

bool is_final_state(v1::Job::State s) {
  return s == v1::Job::SUCCEEDED || s == v1::Job::FAILED || s == v1::Job::CANCELLED;
}

std::string lower(const std::string& s) { return absl::AsciiStrToLower(s); }

std::string operand_label(v1::AmaxHistory::Operand o) { return lower(v1::AmaxHistory::Operand_Name(o)); }

// Communication bytes per step of one report, by (collective, dtype).
struct Traffic {
  const char* collective;
  const char* dtype;
  int64_t bytes;
};

}  // namespace

std::string device_kind_label(int device_kind) {
  switch (device_kind) {
    case v1::ResourceSpec::CPU:
      return "cpu";
    case v1::ResourceSpec::CUDA:
      return "cuda";
    default:
      return "unspecified";
  }
}

CoordinatorMetrics::CoordinatorMetrics(metrics::Registry& r, size_t keep_finished)
    : keep_finished_(keep_finished),
      job_info_(r.gauge("fp8_job_info", "One series per job: its name, owner, fp8 recipe, shape and labels.",
                        {"job_id", "job_name", "user", "recipe", "device_kind", "world_size", "labels"})),
      job_state_(r.gauge("fp8_job_state", "1 for the job's current state, 0 for the others.", {"job_id", "state"})),
      job_pending_reason_(r.gauge("fp8_job_pending_reason",
                                  "1 for why a queued or restarting job waits (workers, behind, backoff), 0 for the "
                                  "others and once it runs.",
                                  {"job_id", "reason"})),
      job_step_(r.gauge("fp8_job_step", "Optimizer steps completed at the last report.", {"job_id"})),
      job_total_steps_(r.gauge("fp8_job_total_steps", "The job's train.steps.", {"job_id"})),
      job_tokens_per_second_(r.gauge("fp8_job_tokens_per_second",
                                     "Tokens per second of the whole job over the last report window (wps).",
                                     {"job_id"})),
      job_loss_(r.gauge("fp8_job_loss", "Training loss at the last report (nats per token).", {"job_id"})),
      job_validation_loss_(r.gauge("fp8_job_validation_loss", "The last validation loss.", {"job_id"})),
      job_grad_norm_(r.gauge("fp8_job_grad_norm", "Gradient norm before clipping at the last report.", {"job_id"})),
      job_learning_rate_(r.gauge("fp8_job_learning_rate", "Learning rate at the last report.", {"job_id"})),
      job_step_seconds_(r.gauge("fp8_job_step_seconds", "Mean step time over the last report window.", {"job_id"})),
      job_peak_memory_(r.gauge("fp8_job_peak_memory_bytes",
                               "Rank 0's peak device memory in a step over the last report window.", {"job_id"})),
      job_step_part_seconds_(r.gauge("fp8_job_step_part_seconds",
                                     "Mean step time split into compute, exposed_communication and data.",
                                     {"job_id", "part"})),
      job_mfu_(r.gauge("fp8_job_mfu_ratio",
                       "Model FLOPs utilisation at the last report: rank 0's model FLOP/s over its device's peak.",
                       {"job_id"})),
      rank_mfu_(r.gauge("fp8_rank_mfu_ratio", "Each rank's model FLOPs utilisation at its last report.",
                        {"job_id", "rank"})),
      job_tensor_parallel_exposed_seconds_(r.gauge(
          "fp8_job_tensor_parallel_exposed_seconds",
          "Rank 0's mean time a step in tensor-parallel all-reduces (all exposed; part of exposed_communication).",
          {"job_id"})),
      job_communication_bytes_(r.counter("fp8_job_communication_bytes_total",
                                         "Bytes the job's ranks sent in collectives, by collective (the "
                                         "tensor-parallel axis's: tensor_all_reduce) and dtype.",
                                         {"job_id", "collective", "dtype"})),
      job_tokens_(r.counter("fp8_job_tokens_total", "Tokens trained, from the progress reports.", {"job_id"})),
      rank_tokens_(r.counter("fp8_rank_tokens_total", "Tokens each rank trained, from its progress reports.",
                             {"job_id", "rank"})),
      job_model_flops_(r.counter("fp8_job_model_flops_total",
                                 "Model training FLOPs done: tokens times 6 per linear weight plus attention's "
                                 "12 x n_layers x dim x seq_len (deploy/METRICS.md).",
                                 {"job_id"})),
      job_restarts_(r.counter("fp8_job_restarts_total", "Attempts started again after a failure.", {"job_id"})),
      job_numerics_events_(r.counter("fp8_job_numerics_events_total",
                                     "Numerics events: non_finite_loss, amax_jump, saturation.", {"job_id", "kind"})),
      jobs_finished_(r.counter("fp8_jobs_finished_total", "Jobs that reached a final state since the coordinator started.",
                               {"state"})),
      cast_amax_(r.gauge("fp8_cast_amax", "Largest magnitude at the layer's last reported fp8 cast.",
                         {"job_id", "layer", "tensor"}, kCastSeriesLimit)),
      cast_scale_(r.gauge("fp8_cast_scale", "The scale of the layer's last reported fp8 cast.",
                          {"job_id", "layer", "tensor"}, kCastSeriesLimit)),
      cast_range_use_(r.gauge("fp8_cast_range_use", "amax times scale over the fp8 max: above 1 the cast clipped.",
                              {"job_id", "layer", "tensor"}, kCastSeriesLimit)),
      cast_saturated_(r.gauge("fp8_cast_saturated_ratio", "Fraction of the cast's values clipped to the fp8 max.",
                              {"job_id", "layer", "tensor"}, kCastSeriesLimit)),
      cast_underflow_(r.gauge("fp8_cast_underflow_ratio", "Fraction of the cast's nonzero values flushed to zero.",
                              {"job_id", "layer", "tensor"}, kCastSeriesLimit)),
      queue_depth_(r.gauge("fp8_scheduler_queue_depth", "Jobs waiting for workers.", {"device_kind"})),
      scheduler_jobs_(r.gauge("fp8_scheduler_jobs", "Active jobs by state.", {"state"})),
      queue_wait_(r.histogram("fp8_scheduler_queue_wait_seconds",
                              "From submit (or the previous attempt's end) to an attempt's start.", {"device_kind"},
                              {0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600})),
      workers_(r.gauge("fp8_workers", "Registered workers by device kind and state.", {"device_kind", "state"})),
      workers_lost_(r.counter("fp8_workers_lost_total", "Workers declared lost after missing heartbeats.",
                              {"device_kind"})),
      heartbeats_(r.counter("fp8_coordinator_heartbeats_total", "Worker heartbeats received.", {})) {}

void CoordinatorMetrics::on_job(const v1::Job& job) {
  const std::string& id = job.id();
  const v1::JobSpec& spec = job.spec();
  job_info_.with({id, spec.name(), spec.owner(), lower(v1::Fp8Spec::Recipe_Name(spec.fp8().recipe())),
                  device_kind_label(spec.resources().device()), std::to_string(spec.resources().world_size()),
                  labels_value(spec)})
      .set(1);
  for (v1::Job::State s : {v1::Job::QUEUED, v1::Job::RUNNING, v1::Job::RESTARTING, v1::Job::SUCCEEDED,
                           v1::Job::FAILED, v1::Job::CANCELLED}) {
    job_state_.with({id, v1::Job::State_Name(s)}).set(s == job.state() ? 1 : 0);
  }
  if (job.state() != v1::Job::QUEUED && job.state() != v1::Job::RESTARTING) on_pending(id, "");
  job_total_steps_.with({id}).set(static_cast<double>(spec.train().steps()));
  job_restarts_.with({id}).set_total(std::max(0, job.attempts() - 1));
  if (job.has_latest_progress()) {
    const v1::TrainingProgress& p = job.latest_progress();
    job_step_.with({id}).set(static_cast<double>(p.step()));
    job_tokens_per_second_.with({id}).set(p.tokens_per_second() * jobspec::data_parallel_ranks(spec));
    job_loss_.with({id}).set(p.loss());
    if (p.has_val_loss()) job_validation_loss_.with({id}).set(p.val_loss());
    job_grad_norm_.with({id}).set(p.grad_norm());
    job_learning_rate_.with({id}).set(p.lr());
    const v1::StepTime& t = p.step_time();
    job_step_seconds_.with({id}).set(t.step_ms() / 1e3);
    if (p.has_memory()) job_peak_memory_.with({id}).set(static_cast<double>(p.memory().peak_bytes()));
    if (p.has_mfu()) job_mfu_.with({id}).set(p.mfu());
    job_step_part_seconds_.with({id, "compute"}).set(t.compute_ms() / 1e3);
    job_step_part_seconds_.with({id, "exposed_communication"}).set(t.exposed_comm_ms() / 1e3);
    // Whatever the step spent neither computing nor waiting on collectives: fetching data
    // and host work.
    job_step_part_seconds_.with({id, "data"})
        .set(std::max(0.0, t.step_ms() - t.compute_ms() - t.exposed_comm_ms()) / 1e3);
    // Only tensor-parallel jobs get the series: the rest would carry a zero each.
    if (spec.parallel().tensor() > 1) job_tensor_parallel_exposed_seconds_.with({id}).set(t.tensor_comm_ms() / 1e3);
  }
  if (!is_final_state(job.state())) return;

  absl::MutexLock lock(&mu_);
  if (std::find(finished_.begin(), finished_.end(), id) != finished_.end()) return;
  jobs_finished_.with({v1::Job::State_Name(job.state())}).inc();
  if (!casts_kept_.empty()) forget_casts(casts_kept_);
  casts_kept_ = id;
  finished_.push_back(id);
  while (finished_.size() > keep_finished_) {
    forget_job(finished_.front());
    finished_.pop_front();
  }
}

void CoordinatorMetrics::on_rank_progress(const v1::Job& job, int rank, const v1::TrainingProgress& p,
                                          double flops_per_token) {
  const std::string& id = job.id();
  const double steps = std::max(1, p.window_steps());
  const v1::CommunicationBytes& c = p.communication();
  for (const Traffic& t : {Traffic{"all_gather", "fp8", c.all_gather_fp8_bytes()},
                           Traffic{"all_gather", "fp32", c.all_gather_fp32_bytes()},
                           Traffic{"all_gather", "bf16", c.all_gather_bf16_bytes()},
                           Traffic{"reduce_scatter", "fp32", c.reduce_scatter_bytes()},
                           Traffic{"reduce_scatter", "bf16", c.reduce_scatter_bf16_bytes()},
                           Traffic{"all_reduce", "fp32", c.all_reduce_bytes()},
                           Traffic{"tensor_all_reduce", "fp32", c.tensor_all_reduce_bytes()}}) {
    if (t.bytes > 0) job_communication_bytes_.with({id, t.collective, t.dtype}).inc(static_cast<double>(t.bytes) * steps);
  }
  const v1::JobSpec& spec = job.spec();
  // Each rank trains batch_size sequences of seq_len tokens a step. Tensor-parallel ranks
  // train one batch together: each adds its 1/tensor share of it (and of the model FLOPs
  // it took) to the job's, so the job counts the batch once.
  const double tokens = steps * static_cast<double>(spec.train().batch_size()) * static_cast<double>(spec.data().seq_len());
  const double share = tokens / std::max(1, spec.parallel().tensor());
  job_tokens_.with({id}).inc(share);
  rank_tokens_.with({id, std::to_string(rank)}).inc(tokens);
  job_model_flops_.with({id}).inc(share * flops_per_token);
  if (p.has_mfu()) rank_mfu_.with({id, std::to_string(rank)}).set(p.mfu());
}

void CoordinatorMetrics::on_cast_numerics(const std::string& job_id, const v1::ReportCastNumericsRequest& request) {
  for (const v1::CastNumerics& c : request.casts()) {
    const std::vector<std::string> labels = {job_id, c.layer(), operand_label(c.operand())};
    cast_amax_.with(labels).set(c.amax());
    cast_scale_.with(labels).set(c.scale());
    cast_range_use_.with(labels).set(c.range_use());
    cast_saturated_.with(labels).set(c.saturated_ratio());
    cast_underflow_.with(labels).set(c.underflow_ratio());
  }
}

void CoordinatorMetrics::on_numerics_event(const std::string& job_id, const std::string& kind) {
  job_numerics_events_.with({job_id, kind}).inc();
}

void CoordinatorMetrics::on_attempt_started(const v1::Job& job, double queue_wait_seconds) {
  queue_wait_.with({device_kind_label(job.spec().resources().device())}).observe(std::max(0.0, queue_wait_seconds));
}

void CoordinatorMetrics::on_heartbeat() { heartbeats_.with({}).inc(); }

void CoordinatorMetrics::on_worker_lost(int device_kind) { workers_lost_.with({device_kind_label(device_kind)}).inc(); }

void CoordinatorMetrics::set_cluster(const ClusterCounts& counts) {
  // Every combination is written, zeros included, so a state that emptied reads 0 rather
  // than keeping its last count.
  for (const char* kind : {"cpu", "cuda"}) {
    for (const char* state : {"unconfirmed", "idle", "busy"}) {
      auto it = counts.workers.find({kind, state});
      workers_.with({kind, state}).set(it == counts.workers.end() ? 0 : it->second);
    }
    auto q = counts.queued.find(kind);
    queue_depth_.with({kind}).set(q == counts.queued.end() ? 0 : q->second);
  }
  for (const char* state : {"QUEUED", "RUNNING", "RESTARTING"}) {
    auto it = counts.active_jobs.find(state);
    scheduler_jobs_.with({state}).set(it == counts.active_jobs.end() ? 0 : it->second);
  }
}

void CoordinatorMetrics::forget_casts(const std::string& job_id) {
  for (metrics::GaugeFamily* f : {&cast_amax_, &cast_scale_, &cast_range_use_, &cast_saturated_, &cast_underflow_}) {
    f->remove_if("job_id", job_id);
  }
}

void CoordinatorMetrics::on_pending(const std::string& job_id, const std::string& reason) {
  for (const char* r : {"workers", "behind", "backoff"}) job_pending_reason_.with({job_id, r}).set(reason == r ? 1 : 0);
}

void CoordinatorMetrics::forget_job(const std::string& job_id) {
  forget_casts(job_id);
  for (metrics::GaugeFamily* f : {&job_info_, &job_state_, &job_pending_reason_, &job_step_, &job_total_steps_, &job_tokens_per_second_,
                                  &job_loss_, &job_validation_loss_, &job_grad_norm_, &job_learning_rate_,
                                  &job_step_seconds_, &job_step_part_seconds_, &job_peak_memory_, &job_mfu_,
                                  &rank_mfu_, &job_tensor_parallel_exposed_seconds_}) {
    f->remove_if("job_id", job_id);
  }
  for (metrics::CounterFamily* f :
       {&job_communication_bytes_, &job_tokens_, &rank_tokens_, &job_model_flops_, &job_restarts_,
        &job_numerics_events_}) {
    f->remove_if("job_id", job_id);
  }
}

}  // namespace fp8::server
