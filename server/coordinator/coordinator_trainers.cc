// The trainer API of the coordinator: progress, amax histories, checkpoint commits and log
// lines from the ranks of live attempts, and who may use a rendezvous namespace.
#include <algorithm>
#include <cmath>
#include <filesystem>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/log/log.h"
#include "common/rpc/request_limits.h"
#include "common/status_macros.h"
#include "server/coordinator/amax_merge.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/job_events.h"
#include "server/coordinator/rank_amax_record.h"

namespace fp8::server {

absl::StatusOr<Coordinator::ActiveJob*> Coordinator::trainer_target(const Principal& who, const v1::RankRef& caller) {
  if (shutting_down_) return absl::UnavailableError("the coordinator is shutting down");
  if (who.role == Role::kTrainer) {
    if (who.job_id != caller.job_id() || who.attempt != caller.attempt()) {
      return absl::PermissionDeniedError(absl::StrCat("caller: this token belongs to ", who.name, ", not ",
                                                      rpc::quote_for_error(caller.job_id()), "/attempt-", caller.attempt()));
    }
  } else if (who.role != Role::kWorker) {
    return absl::PermissionDeniedError(absl::StrCat("a ", role_name(who.role), " token may not use the trainer API"));
  }
  auto it = active_.find(caller.job_id());
  if (it == active_.end() || !it->second.attempt.has_value() || it->second.attempt->number != caller.attempt()) {
    if (who.role == Role::kWorker) return absl::PermissionDeniedError("caller: not an attempt this worker hosts");
    return absl::FailedPreconditionError(
        absl::StrCat(rpc::quote_for_error(caller.job_id()), "/attempt-", caller.attempt(), " has ended: stop training"));
  }
  const AttemptRuntime& attempt = *it->second.attempt;
  if (caller.rank() < 0 || caller.rank() >= static_cast<int>(attempt.ranks.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("caller.rank: ", caller.rank(), " is not in [0, ", attempt.ranks.size(), ")"));
  }
  if (who.role == Role::kWorker) {
    // Any worker token may speak only for ranks placed on a worker registered with it.
    auto w = workers_.find(attempt.ranks[caller.rank()].worker_id);
    if (w == workers_.end() || (!w->second.token_name.empty() && w->second.token_name != who.name)) {
      return absl::PermissionDeniedError("caller: not a rank this worker hosts");
    }
  }
  return &it->second;
}

void Coordinator::record_numerics(ActiveJob& active, v1::NumericsEvent event) {
  event.set_attempt(active.attempt.has_value() ? active.attempt->number : 0);
  if (metrics_ != nullptr) {
    metrics_->on_numerics_event(active.job.id(), absl::AsciiStrToLower(v1::NumericsEvent::Kind_Name(event.kind())));
  }
  v1::JobEvent e = numerics_job_event(active.job.id(), event);
  absl::Status flushed = flush_progress();
  if (absl::Status s = flushed.ok() ? store_->append_event(e).status() : flushed; !s.ok()) {
    log::error(s.message());
    return;
  }
  ++event_generation_;
  events_changed_.SignalAll();
}

absl::Status Coordinator::report_progress(const Principal& who, const v1::ReportProgressRequest& request) {
  const v1::TrainingProgress& p = request.progress();
  if (p.step() < 1) return absl::InvalidArgumentError("progress.step: must be >= 1");
  if (p.window_steps() < 1) return absl::InvalidArgumentError("progress.window_steps: must be >= 1");
  if (p.window_steps() > p.step()) {
    return absl::InvalidArgumentError(
        absl::StrCat("progress.window_steps: ", p.window_steps(), " is more than the steps done (", p.step(), ")"));
  }
  if (request.has_resumed_from_step() && (request.resumed_from_step() < 0 || request.resumed_from_step() >= p.step())) {
    return absl::InvalidArgumentError(absl::StrCat("resumed_from_step: ", request.resumed_from_step(),
                                                   " is not in [0, progress.step ", p.step(), ")"));
  }
  absl::MutexLock lock(&mu_);
  FP8_ASSIGN_OR_RETURN(ActiveJob * active, trainer_target(who, request.caller()));
  if (p.step() > active->job.spec().train().steps()) {
    return absl::InvalidArgumentError(
        absl::StrCat("progress.step: ", p.step(), " is beyond train.steps (", active->job.spec().train().steps(), ")"));
  }
  RankRuntime& rank = active->attempt->ranks[static_cast<size_t>(request.caller().rank())];
  const Clock::time_point now = Clock::now();
  if (rank.last_progress.has_value()) rank.longest_gap = std::max(rank.longest_gap, now - *rank.last_progress);
  rank.last_progress = now;
  if (metrics_ != nullptr) metrics_->on_rank_progress(active->job, request.caller().rank(), p, active->flops_per_token);
  if (request.caller().rank() != 0) return absl::OkStatus();  // the job's progress is rank 0's
  // Progress is written in group commits (FlushProgress), not one transaction a report:
  // the job changes in memory now, and its row and event reach the store within
  // kProgressFlushInterval, or before any other change of the job.
  v1::Job& job = active->job;
  // Reports held back by an outage arrive late and in order; a step behind the newest
  // recorded one of this attempt adds to the history but does not move the job back.
  const bool newest = active->progress_attempt != request.caller().attempt() || job.latest_progress().step() <= p.step();
  if (newest) *job.mutable_latest_progress() = p;
  v1::Attempt* attempt = job.mutable_attempt_history(job.attempt_history_size() - 1);
  if (request.has_resumed_from_step()) attempt->set_resumed_from_step(request.resumed_from_step());
  active->progress_attempt = request.caller().attempt();
  pending_progress_.push_back(progress_job_event(job.id(), request.caller().attempt(), p));
  progress_dirty_.insert(job.id());
  if (metrics_ != nullptr) metrics_->on_job(job);
  if (!std::isfinite(p.loss()) || !std::isfinite(p.grad_norm())) {
    v1::NumericsEvent n;
    n.set_kind(v1::NumericsEvent::NON_FINITE_LOSS);
    n.set_step(p.step());
    n.set_value(std::isfinite(p.loss()) ? p.grad_norm() : p.loss());
    n.set_message(absl::StrCat("step ", p.step(), ": loss ", p.loss(), ", grad norm ", p.grad_norm()));
    record_numerics(*active, n);
  }
  return absl::OkStatus();
}

absl::Status Coordinator::report_amax_histories(const Principal& who, const v1::ReportAmaxHistoriesRequest& request) {
  if (request.step() < 1) return absl::InvalidArgumentError("step: must be >= 1");
  absl::MutexLock lock(&mu_);
  FP8_ASSIGN_OR_RETURN(ActiveJob * active, trainer_target(who, request.caller()));
  const int max_len = std::max(1, active->job.spec().fp8().amax_history_len());
  for (int i = 0; i < request.histories_size(); ++i) {
    if (std::string problem = amax_history_problem(request.histories(i), max_len); !problem.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("histories[", i, "].", problem));
    }
  }
  FP8_ASSIGN_OR_RETURN(store::StoredAmax stored, store_->amax(active->job.id()));
  std::map<std::pair<std::string, int>, StepHistory> by_key;
  for (size_t i = 0; i < stored.histories.size(); ++i) {
    v1::AmaxHistory& h = stored.histories[i];
    std::pair<std::string, int> key{h.layer(), h.operand()};
    by_key[std::move(key)] = StepHistory{stored.steps[i], std::move(h)};
  }
  std::vector<v1::NumericsEvent> jumps;  // and saturations
  FP8_RETURN_IF_ERROR(store_->transaction([&]() -> absl::Status {
    for (const v1::AmaxHistory& h : request.histories()) {
      auto found = by_key.find({h.layer(), h.operand()});
      std::optional<StepHistory> before;
      if (found != by_key.end()) before = found->second;
      StepHistory merged = merge_amax(before, request.step(), h);
      if (std::optional<double> baseline = amax_jump_baseline(h, options_.amax_jump_factor)) {
        v1::NumericsEvent n;
        n.set_kind(v1::NumericsEvent::AMAX_JUMP);
        n.set_step(request.step());
        n.set_layer(h.layer());
        n.set_operand(h.operand());
        n.set_value(h.history(h.history_size() - 1));
        n.set_threshold(options_.amax_jump_factor * *baseline);
        n.set_message(absl::StrCat(h.layer(), " ", v1::AmaxHistory::Operand_Name(h.operand()), ": amax ",
                                   n.value(), " is over ", options_.amax_jump_factor, "x its history's max ",
                                   *baseline, " (rank ", request.caller().rank(), ")"));
        jumps.push_back(std::move(n));
      }
      if (h.range_use() > 1 && active->saturated.insert({h.layer(), h.operand()}).second) {
        v1::NumericsEvent n;
        n.set_kind(v1::NumericsEvent::SATURATION);
        n.set_step(request.step());
        n.set_layer(h.layer());
        n.set_operand(h.operand());
        n.set_value(h.range_use());
        n.set_threshold(1);
        n.set_message(absl::StrCat(h.layer(), " ", v1::AmaxHistory::Operand_Name(h.operand()),
                                   ": the cast saturated, amax x scale = ", h.range_use(),
                                   " x fp8_max (values beyond the fp8 range clamped; reported once per attempt)"));
        jumps.push_back(std::move(n));
      }
      FP8_RETURN_IF_ERROR(store_->put_amax(active->job.id(), merged.step, merged.history));
    }
    return absl::OkStatus();
  }));
  for (v1::NumericsEvent& n : jumps) record_numerics(*active, std::move(n));
  return absl::OkStatus();
}

absl::StatusOr<v1::GetAmaxHistoriesResponse> Coordinator::get_amax_histories(const Principal& who,
                                                                           const v1::GetAmaxHistoriesRequest& request) {
  absl::MutexLock lock(&mu_);
  FP8_ASSIGN_OR_RETURN(ActiveJob * active, trainer_target(who, request.caller()));
  FP8_ASSIGN_OR_RETURN(store::StoredAmax stored, store_->amax(active->job.id()));
  v1::GetAmaxHistoriesResponse response;
  // A warm start (fp8.amax_init_from, checked at submit) until the job has its own.
  const std::string& source_id = active->job.spec().fp8().amax_init_from();
  if (stored.histories.empty() && !source_id.empty()) {
    FP8_ASSIGN_OR_RETURN(stored, store_->amax(source_id));
    response.set_from_job_id(source_id);
  }
  response.set_step(stored.step);
  for (v1::AmaxHistory& h : stored.histories) *response.add_histories() = std::move(h);
  return response;
}

absl::Status Coordinator::commit_checkpoint(const Principal& who, const v1::CommitCheckpointRequest& request) {
  if (request.caller().rank() != 0) return absl::InvalidArgumentError("caller.rank: only rank 0 commits checkpoints");
  if (request.step() < 1) return absl::InvalidArgumentError("step: must be >= 1");
  absl::MutexLock lock(&mu_);
  FP8_ASSIGN_OR_RETURN(ActiveJob * active, trainer_target(who, request.caller()));
  const v1::JobSpec& spec = active->job.spec();
  if (request.step() > spec.train().steps()) {
    return absl::InvalidArgumentError(
        absl::StrCat("step: ", request.step(), " is beyond train.steps (", spec.train().steps(), ")"));
  }
  // A checkpoint of this job lies in the job's own folder.
  FP8_RETURN_IF_ERROR(check_confined_path(request.dir(), {std::filesystem::path(spec.checkpoint().dir())}, "dir"));
  if (request.world_size() != static_cast<int>(active->attempt->ranks.size())) {
    return absl::InvalidArgumentError(absl::StrCat("world_size: ", request.world_size(), " is not the attempt's ",
                                                   active->attempt->ranks.size()));
  }
  if (request.step() <= active->job.last_checkpoint_step()) return absl::OkStatus();  // a retry
  v1::Job next = active->job;
  next.set_last_checkpoint_step(request.step());
  FP8_RETURN_IF_ERROR(store_->add_checkpoint(next.id(), request.caller().attempt(), request.step(), request.dir(),
                                             request.world_size()));
  return commit(*active, next, {});
}

absl::Status Coordinator::append_logs(const Principal& who, const v1::AppendLogsRequest& request) {
  std::vector<v1::LogLine> lines(request.lines().begin(), request.lines().end());
  absl::MutexLock lock(&mu_);
  FP8_ASSIGN_OR_RETURN(ActiveJob * active, trainer_target(who, request.caller()));
  return store_->append_logs(active->job.id(), request.caller().attempt(), request.caller().rank(), lines,
                             options_.log_lines_per_job);
}

namespace {

// What is wrong with one cast's numerics, or "" (field path relative to the entry).
std::string cast_numerics_problem(const v1::CastNumerics& c) {
  if (c.layer().empty() || c.layer().size() > 256) return "layer: must have 1 to 256 characters";
  if (c.operand() == v1::AmaxHistory::OPERAND_UNSPECIFIED || !v1::AmaxHistory::Operand_IsValid(c.operand())) {
    return "operand: must be INPUT, WEIGHT or GRAD_OUTPUT";
  }
  if (!(c.scale() >= 0) || !std::isfinite(c.scale())) return "scale: must be finite and >= 0";
  if (!(c.saturated_ratio() >= 0 && c.saturated_ratio() <= 1)) return "saturated_ratio: must be in [0, 1]";
  if (!(c.underflow_ratio() >= 0 && c.underflow_ratio() <= 1)) return "underflow_ratio: must be in [0, 1]";
  return "";
}

}  // namespace

// The most (layer, operand) casts whose per-rank amaxes one job keeps.
constexpr size_t kMaxRankAmaxCasts = 16384;

absl::Status Coordinator::report_cast_numerics(const Principal& who, const v1::ReportCastNumericsRequest& request) {
  if (request.step() < 1) return absl::InvalidArgumentError("step: must be >= 1");
  for (int i = 0; i < request.casts_size(); ++i) {
    if (std::string problem = cast_numerics_problem(request.casts(i)); !problem.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("casts[", i, "].", problem));
    }
  }
  absl::MutexLock lock(&mu_);
  FP8_ASSIGN_OR_RETURN(ActiveJob * active, trainer_target(who, request.caller()));
  // The metrics are rank 0's view; every rank's amax goes to the by-rank comparison.
  if (metrics_ != nullptr && request.caller().rank() == 0) metrics_->on_cast_numerics(active->job.id(), request);
  const int world_size = active->job.spec().resources().world_size();
  std::vector<v1::NumericsEvent> outliers;
  std::vector<v1::RankAmaxes> completed;  // casts whose step every rank has now reported
  for (const v1::CastNumerics& c : request.casts()) {
    const std::pair<std::string, int> key{c.layer(), c.operand()};
    // A job's casts are its layers x 3; a trainer naming ever new ones gets no more room.
    if (active->rank_amax.size() >= kMaxRankAmaxCasts && !active->rank_amax.contains(key)) continue;
    RankAmax& ranks = active->rank_amax[key];
    const std::optional<RankAmax::Outlier> o =
        ranks.report(request.step(), request.caller().rank(), world_size, c.amax(), options_.amax_outlier_factor);
    if (ranks.step() == request.step() && ranks.step_complete()) {
      completed.push_back(rank_amax_record(key.first, key.second, ranks, /*open_step=*/false));
    }
    if (!o || !active->outliers.insert(key).second) continue;
    v1::NumericsEvent n;
    n.set_kind(v1::NumericsEvent::AMAX_OUTLIER);
    n.set_step(request.step());
    n.set_layer(c.layer());
    n.set_operand(c.operand());
    n.set_rank(o->rank);
    n.set_value(o->amax);
    n.set_threshold(options_.amax_outlier_factor * o->others);
    n.set_message(absl::StrCat(c.layer(), " ", v1::AmaxHistory::Operand_Name(c.operand()), ": rank ", o->rank,
                               "'s amax ", o->amax, " is over ", options_.amax_outlier_factor,
                               "x every other rank's (largest ", o->others,
                               "): an outlier batch or a failing device? (reported once per attempt)"));
    outliers.push_back(std::move(n));
  }
  // Stored once a step is complete (one write per cast and report step, not per rank), so
  // that `fp8ctl amax --by-rank` answers the same after a restart or after the job ends.
  if (!completed.empty()) {
    FP8_RETURN_IF_ERROR(store_->transaction(
        [&]() -> absl::Status { return store_->put_rank_amaxes(active->job.id(), completed); }));
  }
  for (v1::NumericsEvent& n : outliers) record_numerics(*active, std::move(n));
  return absl::OkStatus();
}

absl::Status Coordinator::authorize_rendezvous(const Principal& who, std::string_view requested) {
  absl::MutexLock lock(&mu_);
  if (who.role == Role::kTrainer) {
    if (rendezvous_namespace(who.job_id, who.attempt) == requested) return absl::OkStatus();
  } else if (who.role == Role::kWorker) {
    for (const auto& [id, active] : active_) {
      if (!active.attempt.has_value() || rendezvous_namespace(id, active.attempt->number) != requested) {
        continue;
      }
      for (const RankRuntime& r : active.attempt->ranks) {
        auto w = workers_.find(r.worker_id);
        if (w != workers_.end() && (w->second.token_name.empty() || w->second.token_name == who.name)) {
          return absl::OkStatus();
        }
      }
    }
  }
  return absl::PermissionDeniedError(
      absl::StrCat("rendezvous_namespace: '", rpc::quote_for_error(requested), "' is not this token's attempt"));
}

}  // namespace fp8::server
