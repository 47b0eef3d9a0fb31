#include "worker/fp8_worker/coordinator_session.h"

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/log/log.h"
#include "worker/fp8_worker/grpc_clients.h"

namespace fp8::worker {
namespace {

constexpr std::chrono::milliseconds kDefaultHeartbeat{1000};

std::string describe(const grpc::Status& s) {
  return absl::StrCat(absl::StatusCodeToString(static_cast<absl::StatusCode>(s.error_code())),
                      s.error_message().empty() ? "" : ": " + s.error_message());
}

bool is_fatal_at_registration(const grpc::Status& s) {
  switch (s.error_code()) {
    case grpc::StatusCode::UNAUTHENTICATED:
    case grpc::StatusCode::PERMISSION_DENIED:
    case grpc::StatusCode::FAILED_PRECONDITION:  // version refused
    case grpc::StatusCode::INVALID_ARGUMENT:     // what we offer is malformed: retrying cannot help
      return true;
    default:
      return false;
  }
}

}  // namespace

CoordinatorSession::CoordinatorSession(WorkerConfig config, std::shared_ptr<grpc::ChannelInterface> channel,
                                       RankSupervisor& ranks, SessionOptions options)
    : config_(std::move(config)),
      target_(config_.coordinator),
      stub_(v1::WorkerService::NewStub(std::move(channel))),
      ranks_(ranks),
      options_(options),
      backoff_(options.backoff_initial) {}

std::unique_ptr<grpc::ClientContext> CoordinatorSession::context() const {
  return make_call_context(config_.token, options_.rpc_deadline);
}

bool CoordinatorSession::is_outage(const grpc::Status& s) {
  return s.error_code() == grpc::StatusCode::UNAVAILABLE || s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
}

void CoordinatorSession::succeeded() {
  if (in_outage_) {
    const auto secs = std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - outage_since_).count();
    log::info(absl::StrCat("coordinator ", target_, " reachable again after ", secs, " s"));
  }
  in_outage_ = false;
  last_error_.clear();
  backoff_ = options_.backoff_initial;
  next_tick_ = Clock::now() + heartbeat_interval_;
}

void CoordinatorSession::failed(const char* call, const grpc::Status& s) {
  if (options_.metrics != nullptr) options_.metrics->on_disconnected();
  if (is_outage(s)) {
    if (!in_outage_) {
      in_outage_ = true;
      outage_since_ = Clock::now();
      log::warn(absl::StrCat("coordinator ", target_, " unreachable (", call, ": ", describe(s), "); ",
                             ranks_.size(), " rank(s) keep running; retrying"));
    }
  } else {
    const std::string text = absl::StrCat(call, " refused by ", target_, ": ", describe(s));
    if (text != last_error_) log::warn(text + "; retrying");
    last_error_ = text;
  }
  next_tick_ = Clock::now() + backoff_;
  backoff_ = std::min(backoff_ * 2, options_.backoff_max);
}

absl::Status CoordinatorSession::register_self() {
  v1::RegisterWorkerRequest req;
  req.set_device_kind(config_.device_kind);
  req.set_device_name(config_.device_name);
  req.set_slots(1);
  req.set_cpus(config_.cpus);
  req.set_memory_gb(config_.memory_gb);
  req.set_address(config_.address);
  req.set_version(kWorkerVersion);
  req.set_previous_worker_id(previous_id_);
  for (v1::RankStatus& s : ranks_.statuses()) *req.add_running() = std::move(s);
  v1::RegisterWorkerResponse resp;
  std::unique_ptr<grpc::ClientContext> ctx = context();
  const grpc::Status s = stub_->RegisterWorker(ctx.get(), req, &resp);
  if (!s.ok()) {
    if (is_fatal_at_registration(s)) {
      const bool token = s.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
                         s.error_code() == grpc::StatusCode::PERMISSION_DENIED;
      return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                          absl::StrCat("coordinator ", target_, " refused the registration: ", describe(s),
                                       token ? absl::StrCat(" (check the worker token from ", config_.token_source, ")")
                                             : ""));
    }
    failed("RegisterWorker", s);
    return absl::OkStatus();
  }
  worker_id_ = resp.worker_id();
  previous_id_ = worker_id_;
  if (options_.metrics != nullptr) options_.metrics->on_registered(worker_id_);
  registered_ = true;
  heartbeat_interval_ = resp.heartbeat_interval_ms() > 0 ? std::chrono::milliseconds(resp.heartbeat_interval_ms())
                                                         : kDefaultHeartbeat;
  log::info(absl::StrCat(req.previous_worker_id().empty() ? "registered" : "re-registered", " with ", target_, " as ",
                         worker_id_, " (", config_.device_name, ", heartbeat every ", heartbeat_interval_.count(), " ms, ",
                         req.running_size(), " rank(s) running)"));
  succeeded();
  next_tick_ = Clock::now();  // first heartbeat (and any pending exit report) right away
  return absl::OkStatus();
}

bool CoordinatorSession::report_pending_exits() {
  for (auto it = pending_.begin(); it != pending_.end();) {
    const RankExit& e = it->exit;
    if (!ranks_.logs_delivered(e.key) && Clock::now() < it->report_by) {
      ++it;  // its last lines are still on their way; heartbeats go on meanwhile
      continue;
    }
    v1::ReportRankExitRequest req;
    req.set_worker_id(worker_id_);
    req.set_job_id(e.key.job_id);
    req.set_attempt(e.key.attempt);
    req.set_rank(e.key.rank);
    if (e.signal) {
      req.set_signal(*e.signal);
    } else {
      req.set_exit_code(e.exit_code.value_or(0));
    }
    req.set_message(e.message);
    v1::ReportRankExitResponse resp;
    std::unique_ptr<grpc::ClientContext> ctx = context();
    const grpc::Status s = stub_->ReportRankExit(ctx.get(), req, &resp);
    if (s.ok()) {
      it = pending_.erase(it);
      continue;
    }
    if (is_outage(s)) {
      failed("ReportRankExit", s);
      return false;
    }
    // A refusal: the worker may be unknown (the heartbeat finds out and re-registers) or
    // the attempt long gone. A few tries, then it is not worth holding on to.
    if (++it->refusals >= options_.max_report_refusals) {
      log::warn(absl::StrCat(e.key.to_string(), ": exit report refused ", it->refusals, " times (", describe(s),
                             "); giving up on it"));
      it = pending_.erase(it);
      continue;
    }
    ++it;
  }
  return true;
}

void CoordinatorSession::heartbeat() {
  v1::HeartbeatRequest req;
  req.set_worker_id(worker_id_);
  for (v1::RankStatus& s : ranks_.statuses()) *req.add_ranks() = std::move(s);
  for (const PendingExit& p : pending_) *req.add_ranks() = p.exit.last_status;
  v1::HeartbeatResponse resp;
  std::unique_ptr<grpc::ClientContext> ctx = context();
  const Clock::time_point sent = Clock::now();
  const grpc::Status s = stub_->Heartbeat(ctx.get(), req, &resp);
  if (s.ok()) {
    if (options_.metrics != nullptr) {
      options_.metrics->on_heartbeat(std::chrono::duration<double>(Clock::now() - sent).count());
    }
    succeeded();
    for (const v1::WorkerCommand& c : resp.commands()) execute(c);
    return;
  }
  if (s.error_code() == grpc::StatusCode::NOT_FOUND ||
      s.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
      s.error_code() == grpc::StatusCode::PERMISSION_DENIED) {
    // Forgotten (coordinator restart) or declared lost: register again, keeping the ranks.
    // A token that stopped working shows up there as a fatal refusal.
    log::warn(absl::StrCat("heartbeat as ", worker_id_, " refused (", describe(s), "); registering again"));
    if (options_.metrics != nullptr) options_.metrics->on_disconnected();
    registered_ = false;
    next_tick_ = Clock::now();
    return;
  }
  failed("Heartbeat", s);
}

void CoordinatorSession::execute(const v1::WorkerCommand& command) {
  switch (command.command_case()) {
    case v1::WorkerCommand::kStartRank:
      if (shutting_down_) {
        log::warn(absl::StrCat(command.start_rank().job_id(), " attempt ", command.start_rank().attempt(), " rank ",
                               command.start_rank().rank(), ": not started, fp8-worker is stopping"));
        return;
      }
    {
      const size_t before = ranks_.size();
      ranks_.start(command.start_rank());
      // A repeated command starts nothing; a failed spawn shows up as an exit.
      if (options_.metrics != nullptr && ranks_.size() > before) {
        options_.metrics->on_rank_started();
        options_.metrics->set_ranks_running(ranks_.size());
      }
      return;
    }
    case v1::WorkerCommand::kStopRank: {
      const v1::StopRank& stop = command.stop_rank();
      ranks_.stop(stop.job_id(), stop.attempt(), std::clamp(stop.grace_seconds(), 0, 3600), stop.reason());
      return;
    }
    case v1::WorkerCommand::COMMAND_NOT_SET:
      log::warn("heartbeat returned an empty command (a newer coordinator?); ignored");
      return;
  }
}

void CoordinatorSession::collect_exits() {
  ranks_.poll();
  std::vector<RankExit> exits = ranks_.take_exits();
  if (options_.metrics != nullptr) {
    options_.metrics->set_ranks_running(ranks_.size());
    for (const RankExit& e : exits) options_.metrics->on_rank_exit(e);
  }
  if (exits.empty()) return;
  for (RankExit& e : exits) pending_.push_back({std::move(e), 0, Clock::now() + options_.logs_before_exit});
  if (registered_ && !in_outage_) next_tick_ = Clock::now();  // tell the coordinator now
}

absl::Status CoordinatorSession::tick() {
  if (!registered_) return register_self();
  if (!report_pending_exits()) return absl::OkStatus();
  heartbeat();
  return absl::OkStatus();
}

absl::Status CoordinatorSession::run(const std::atomic<int>& stop_requests) {
  log::info(absl::StrCat("fp8-worker ", kWorkerVersion, " on ", config_.device_name, ": coordinator ", target_,
                         ", work dir ", config_.work_dir, ", trainer ", config_.trainer));
  next_tick_ = Clock::now();
  absl::Status fatal;
  while (stop_requests.load() == 0) {
    collect_exits();
    if (Clock::now() >= next_tick_) {
      fatal = tick();
      if (!fatal.ok()) break;
      collect_exits();  // e.g. a StartRank that could not spawn
    }
    const auto wait = std::clamp(std::chrono::duration_cast<std::chrono::milliseconds>(next_tick_ - Clock::now()),
                                 std::chrono::milliseconds(0), options_.poll_interval);
    std::this_thread::sleep_for(wait);
  }
  if (!fatal.ok()) {
    log::error(std::string(fatal.message()));
    registered_ = false;  // no point in reporting to a coordinator that refuses us
  }
  shut_down(stop_requests, /*may_report=*/fatal.ok());
  return fatal;
}

void CoordinatorSession::sleep_until_next_tick() const {
  const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next_tick_ - Clock::now());
  std::this_thread::sleep_for(std::clamp(wait, std::chrono::milliseconds(0), options_.backoff_max));
}

void CoordinatorSession::shut_down(const std::atomic<int>& stop_requests, bool may_report) {
  shutting_down_ = true;
  int grace = config_.stop_grace_default_s;
  ranks_.stop_all(grace, "fp8-worker stopping");
  bool killed_now = grace == 0;
  // Keep heartbeating while the ranks wind down, so that the coordinator does not count
  // this worker lost in the middle of it; the exits go out as they come.
  while (!ranks_.empty()) {
    if (!killed_now && stop_requests.load() > 1) {
      ranks_.stop_all(0, "second stop request");
      killed_now = true;
    }
    collect_exits();
    if (registered_ && Clock::now() >= next_tick_) {
      if (report_pending_exits()) heartbeat();
    }
    std::this_thread::sleep_for(options_.poll_interval);
  }
  collect_exits();
  if (pending_.empty() || !may_report) return;
  const Clock::time_point give_up = Clock::now() + options_.shutdown_report_budget;
  while (!pending_.empty() && Clock::now() < give_up) {
    if (!registered_) {
      if (!register_self().ok()) break;
      if (!registered_) {
        sleep_until_next_tick();
        continue;
      }
    }
    if (!report_pending_exits()) {
      sleep_until_next_tick();
    } else if (!pending_.empty()) {
      std::this_thread::sleep_for(options_.backoff_initial);
    }
  }
  if (!pending_.empty()) {
    log::warn(absl::StrCat(pending_.size(), " rank exit(s) could not be reported to ", target_, " before stopping"));
  }
}

}  // namespace fp8::worker
