// The worker API of the coordinator: registration, heartbeats (which carry the ranks'
// status one way and the commands the other), rank exits, and lost workers.
#include <algorithm>
#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/log/log.h"
#include "common/rpc/request_limits.h"
#include "common/status_macros.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/job_events.h"

namespace fp8::server {
namespace {

std::string rank_key(const std::string& job_id, int attempt, int rank) {
  return absl::StrCat(job_id, "/", attempt, "/", rank);
}

absl::Status check_device_name(const v1::RegisterWorkerRequest& r) {
  const std::string& name = r.device_name();
  if (r.device_kind() == v1::ResourceSpec::CPU) {
    if (name != "cpu") return absl::InvalidArgumentError("device_name: a cpu worker's device is 'cpu'");
    return absl::OkStatus();
  }
  if (r.device_kind() == v1::ResourceSpec::CUDA) {
    int index = 0;
    if (!absl::StartsWith(name, "cuda:") || !absl::SimpleAtoi(name.substr(5), &index) || index < 0) {
      return absl::InvalidArgumentError("device_name: a cuda worker's device is 'cuda:<N>'");
    }
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError("device_kind: must be CPU or CUDA");
}

}  // namespace

absl::StatusOr<Coordinator::Worker*> Coordinator::calling_worker(const Principal& who, const std::string& worker_id) {
  if (who.role != Role::kWorker) {
    return absl::PermissionDeniedError(absl::StrCat("a ", role_name(who.role), " token may not use the worker API"));
  }
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) {
    return absl::NotFoundError(absl::StrCat("worker_id: no worker '", rpc::quote_for_error(worker_id), "' (lost, or unknown): register again"));
  }
  // The worker registered with another worker token: nobody may speak for it.
  if (!it->second.token_name.empty() && who.name != it->second.token_name) {
    return absl::PermissionDeniedError(absl::StrCat("worker_id: '", rpc::quote_for_error(worker_id), "' registered with another token"));
  }
  return &it->second;
}

absl::StatusOr<v1::RegisterWorkerResponse> Coordinator::register_worker(const Principal& who,
                                                                      const v1::RegisterWorkerRequest& request) {
  if (who.role != Role::kWorker) {
    return absl::PermissionDeniedError(absl::StrCat("a ", role_name(who.role), " token may not register workers"));
  }
  FP8_RETURN_IF_ERROR(check_device_name(request));
  if (request.slots() < 1) return absl::InvalidArgumentError(absl::StrCat("slots: ", request.slots(), " is not >= 1"));
  if (request.cpus() < 0) return absl::InvalidArgumentError(absl::StrCat("cpus: ", request.cpus(), " is negative"));
  if (!(request.memory_gb() >= 0) || !std::isfinite(request.memory_gb())) {
    return absl::InvalidArgumentError("memory_gb: must be finite and >= 0");
  }

  absl::MutexLock lock(&mu_);
  if (shutting_down_) return absl::UnavailableError("the coordinator is shutting down");
  Worker* worker = nullptr;
  auto known = workers_.find(request.previous_worker_id());
  if (!request.previous_worker_id().empty() && known != workers_.end() &&
      (known->second.token_name.empty() || known->second.token_name == who.name)) {
    worker = &known->second;  // the same worker, back (reconnected, or this coordinator restarted)
  } else {
    Worker fresh;
    absl::Status s = store_->transaction([&]() -> absl::Status {
      FP8_ASSIGN_OR_RETURN(int64_t n, store_->next("worker"));
      FP8_ASSIGN_OR_RETURN(fresh.record.registered_seq, store_->next("registration"));
      fresh.record.id = absl::StrCat("w-", n);
      return absl::OkStatus();
    });
    if (!s.ok()) return s;
    worker = &workers_.emplace(fresh.record.id, std::move(fresh)).first->second;
  }
  worker->record.device_kind = request.device_kind();
  worker->record.device_name = request.device_name();
  worker->record.address = request.address();
  worker->record.cpus = request.cpus();
  worker->record.memory_gb = request.memory_gb();
  worker->token_name = who.name;
  worker->last_heartbeat = Clock::now();
  worker->last_heartbeat_unix_ms = now_unix_ms();
  if (absl::Status s = store_->put_worker(worker->record); !s.ok()) return s;

  // The ranks it still runs are treated like a heartbeat's; the commands that causes wait
  // for its first heartbeat.
  if (absl::Status s = observe_ranks(*worker, request.running()); !s.ok()) return s;

  v1::RegisterWorkerResponse response;
  response.set_worker_id(worker->record.id);
  response.set_heartbeat_interval_ms(absl::ToInt64Milliseconds(options_.heartbeat_interval));
  response.set_lost_after_ms(absl::ToInt64Milliseconds(options_.lost_after));
  schedule_locked();
  return response;
}

absl::StatusOr<v1::HeartbeatResponse> Coordinator::heartbeat(const Principal& who,
                                                            const v1::HeartbeatRequest& request) {
  absl::MutexLock lock(&mu_);
  if (shutting_down_) return absl::UnavailableError("the coordinator is shutting down");
  FP8_ASSIGN_OR_RETURN(Worker * worker, calling_worker(who, request.worker_id()));
  worker->last_heartbeat = Clock::now();
  worker->last_heartbeat_unix_ms = now_unix_ms();
  if (metrics_ != nullptr) metrics_->on_heartbeat();
  FP8_RETURN_IF_ERROR(observe_ranks(*worker, request.ranks()));

  v1::HeartbeatResponse response;
  for (v1::WorkerCommand& c : worker->pending) {
    if (c.has_start_rank()) {
      auto it = active_.find(c.start_rank().job_id());
      if (it != active_.end() && it->second.attempt.has_value() &&
          it->second.attempt->number == c.start_rank().attempt()) {
        it->second.attempt->ranks[c.start_rank().rank()].start_delivered = true;
      } else {
        continue;  // its attempt ended before the worker heard of it
      }
    }
    *response.add_commands() = std::move(c);
  }
  worker->pending.clear();
  return response;
}

absl::Status Coordinator::observe_ranks(Worker& worker,
                                      const google::protobuf::RepeatedPtrField<v1::RankStatus>& ranks) {
  worker.listed.clear();
  for (const v1::RankStatus& status : ranks) {
    worker.listed.insert(rank_key(status.job_id(), status.attempt(), status.rank()));
    auto it = active_.find(status.job_id());
    const bool live = it != active_.end() && it->second.attempt.has_value() &&
                      it->second.attempt->number == status.attempt() && status.rank() >= 0 &&
                      status.rank() < static_cast<int>(it->second.attempt->ranks.size()) &&
                      it->second.attempt->ranks[status.rank()].worker_id == worker.record.id;
    if (!live) {
      // A rank of an attempt that ended (or that this worker does not hold): stop it.
      queue_stop(worker, status.job_id(), status.attempt(), "its attempt has ended");
      continue;
    }
    it->second.attempt->ranks[status.rank()].seen = true;
  }
  resend_missing_starts(worker);

  // An attempt is RUNNING once every rank was seen on its worker; only the attempts this
  // worker holds can have changed.
  std::set<std::string> jobs;
  for (const auto& [job_id, attempt, rank] : worker.assigned) jobs.insert(job_id);
  for (const std::string& id : jobs) {
    auto it = active_.find(id);
    if (it == active_.end() || !it->second.attempt.has_value()) continue;
    ActiveJob& active = it->second;
    const v1::Attempt& last = active.job.attempt_history(active.job.attempt_history_size() - 1);
    if (last.state() != v1::Attempt::STARTING) continue;
    const auto& placed = active.attempt->ranks;
    if (std::all_of(placed.begin(), placed.end(), [](const RankRuntime& r) { return r.seen || r.exit_code; })) {
      v1::Job next = active.job;
      next.mutable_attempt_history(next.attempt_history_size() - 1)->set_state(v1::Attempt::RUNNING);
      FP8_RETURN_IF_ERROR(commit(active, next, {}));
    }
  }

  return absl::OkStatus();
}

void Coordinator::resend_missing_starts(Worker& worker) {
  // A copy: ending an attempt below unassigns its ranks.
  const auto assigned = worker.assigned;
  for (const auto& [id, number, r] : assigned) {
    auto it = active_.find(id);
    if (it == active_.end() || !it->second.attempt.has_value() || it->second.attempt->number != number) continue;
    ActiveJob& active = it->second;
    AttemptRuntime& attempt = *active.attempt;
    RankRuntime& rank = attempt.ranks[static_cast<size_t>(r)];
    if (rank.exit_code.has_value() || !rank.start_delivered) continue;
    if (worker.listed.count(rank_key(id, number, r))) continue;
    // The worker does not run a rank it was told to start: the command was lost, or the
    // worker restarted. Start it again when the token is known; otherwise (coordinator
    // restarted since) the attempt cannot be completed and ends.
    if (attempt.trainer_token.empty()) {
      const std::string reason = absl::StrCat("rank ", r, " is no longer running on worker ", worker.record.id);
      if (absl::Status s = fail_attempt(active, reason, scheduler::FailureClass::kWorkerLost); !s.ok()) {
        log::error(s.message());
      }
      continue;
    }
    rank.start_delivered = false;
    *worker.pending.emplace_back().mutable_start_rank() =
        make_start_rank(active.job, number, r, static_cast<int>(attempt.ranks.size()),
                      active.job.attempt_history(active.job.attempt_history_size() - 1).resumed_from_step(),
                      attempt.trainer_token);
  }
}

absl::Status Coordinator::report_rank_exit(const Principal& who, const v1::ReportRankExitRequest& request) {
  if (request.has_exit_code() == request.has_signal()) {
    return absl::InvalidArgumentError("exactly one of exit_code and signal must be set");
  }
  absl::MutexLock lock(&mu_);
  if (shutting_down_) return absl::UnavailableError("the coordinator is shutting down");
  FP8_ASSIGN_OR_RETURN(Worker * worker, calling_worker(who, request.worker_id()));
  worker->listed.erase(rank_key(request.job_id(), request.attempt(), request.rank()));
  auto it = active_.find(request.job_id());
  if (it == active_.end() || !it->second.attempt.has_value() || it->second.attempt->number != request.attempt() ||
      request.rank() < 0 || request.rank() >= static_cast<int>(it->second.attempt->ranks.size()) ||
      it->second.attempt->ranks[request.rank()].worker_id != worker->record.id) {
    schedule_locked();  // an old attempt's rank: its worker may be free now
    return absl::OkStatus();
  }
  ActiveJob& active = it->second;
  const int code = request.has_exit_code() ? request.exit_code() : -request.signal();
  active.attempt->ranks[request.rank()].exit_code = code;
  worker->assigned.erase({request.job_id(), request.attempt(), request.rank()});
  if (code != 0) {
    std::string reason = scheduler::describe_failure(scheduler::RankExited{request.rank(), worker->record.id, code});
    if (!request.message().empty()) absl::StrAppend(&reason, ": ", request.message());
    FP8_RETURN_IF_ERROR(fail_attempt(active, reason, scheduler::classify_exit_code(code)));
  } else {
    const auto& ranks = active.attempt->ranks;
    if (std::all_of(ranks.begin(), ranks.end(), [](const RankRuntime& r) { return r.exit_code == 0; })) {
      FP8_RETURN_IF_ERROR(end_attempt(active, v1::Attempt::SUCCEEDED, ""));
    }
  }
  forget_final_job(request.job_id());
  schedule_locked();
  return absl::OkStatus();
}

void Coordinator::check_liveness() {
  std::vector<scheduler::WorkerHeartbeat> beats;
  for (const auto& [id, w] : workers_) beats.push_back(scheduler::WorkerHeartbeat{id, w.last_heartbeat});
  for (const std::string& lost :
       scheduler::lost_workers(beats, Clock::now(), absl::ToChronoNanoseconds(options_.lost_after))) {
    const std::string reason = absl::StrCat(scheduler::describe_failure(scheduler::WorkerLost{lost}), ": no heartbeat for ",
                                            absl::FormatDuration(options_.lost_after));
    log::warn(reason);
    if (metrics_ != nullptr) metrics_->on_worker_lost(workers_.at(lost).record.device_kind);
    for (auto& [id, active] : active_) {
      if (!active.attempt.has_value()) continue;
      const auto& ranks = active.attempt->ranks;
      if (std::none_of(ranks.begin(), ranks.end(), [&](const RankRuntime& r) { return r.worker_id == lost; })) continue;
      if (absl::Status s = fail_attempt(active, reason, scheduler::FailureClass::kWorkerLost); !s.ok()) {
        log::error(s.message());
      }
    }
    if (absl::Status s = store_->delete_worker(lost); !s.ok()) {
      log::error(s.message());
    }
    workers_.erase(lost);
  }
}

void Coordinator::check_progress() {
  const Clock::time_point now = Clock::now();
  std::vector<std::pair<ActiveJob*, scheduler::RankHung>> hung;
  for (auto& [id, active] : active_) {
    if (!active.attempt.has_value()) continue;
    const v1::Attempt& last = active.job.attempt_history(active.job.attempt_history_size() - 1);
    if (last.state() != v1::Attempt::RUNNING) continue;  // still starting: the workers' liveness covers it
    const int64_t configured = active.job.spec().train().progress_timeout_seconds();
    const auto& ranks = active.attempt->ranks;
    for (size_t r = 0; r < ranks.size(); ++r) {
      const RankRuntime& rank = ranks[r];
      if (rank.exit_code.has_value()) continue;
      const Clock::time_point since = rank.last_progress.value_or(rank.since);
      if (now - since > scheduler::progress_timeout(configured, rank.last_progress.has_value(), rank.longest_gap)) {
        hung.emplace_back(&active, scheduler::RankHung{static_cast<int>(r), rank.worker_id, now - since});
        break;  // one hung rank ends the attempt
      }
    }
  }
  for (auto& [active, rank] : hung) {
    const std::string reason = scheduler::describe_failure(rank);
    log::warn(absl::StrCat(active->job.id(), ": ", reason));
    if (absl::Status s = fail_attempt(*active, reason, scheduler::FailureClass::kHung); !s.ok()) {
      log::error(s.message());
    }
  }
}

}  // namespace fp8::server
