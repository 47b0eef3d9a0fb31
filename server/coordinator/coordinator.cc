// The coordinator's core: loading state, tokens, the job API and the attempt lifecycle.
// Worker calls are in coordinator_workers.cc, trainer calls in coordinator_trainers.cc.
#include "server/coordinator/coordinator.h"

#include <algorithm>
#include <filesystem>
#include <tuple>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "common/jobspec/model_flops.h"
#include "common/log/log.h"
#include "common/jobspec/model_shapes.h"
#include "common/jobspec/validate.h"
#include "common/rpc/request_limits.h"
#include "common/status_macros.h"
#include "google/protobuf/util/message_differencer.h"
#include "server/coordinator/job_events.h"
#include "server/coordinator/rank_amax_record.h"
#include "server/coordinator/rank_memory.h"
#include "server/scheduler/scheduler.h"

namespace fp8::server {
namespace {

scheduler::DeviceKind kind_of(int device) {
  return device == v1::ResourceSpec::CUDA ? scheduler::DeviceKind::kCuda : scheduler::DeviceKind::kCpu;
}

// The most bytes of jobs one ListJobs page holds (a spec is at most 64 KiB), or of log
// lines one GetJobLogs answer does.
constexpr size_t kListPageBytes = size_t{1} << 20;

absl::Status unavailable() { return absl::UnavailableError("the coordinator is shutting down"); }

// Whether `admitted` (a spec as AdmitJobSpec returns it) is what `first` was submitted
// with: the stored spec differs only by the job folder the coordinator added.
bool same_submission(const v1::Job& first, const v1::JobSpec& admitted) {
  v1::JobSpec stored = first.spec();
  stored.mutable_checkpoint()->set_dir(std::filesystem::path(stored.checkpoint().dir()).parent_path().string());
  return google::protobuf::util::MessageDifferencer::Equivalent(stored, admitted);
}

}  // namespace

std::string rendezvous_namespace(const std::string& job_id, int attempt) {
  return absl::StrCat(job_id, "/attempt-", attempt, "/");
}

Coordinator::Coordinator(std::unique_ptr<store::CoordinatorStore> store, RendezvousStore& rendezvous,
                         CoordinatorOptions options)
    : store_(std::move(store)), rendezvous_(rendezvous), options_(std::move(options)),
      advertise_address_(options_.advertise_address) {}

void Coordinator::set_advertise_address(const std::string& address) {
  absl::MutexLock lock(&mu_);
  advertise_address_ = address;
}

Coordinator::~Coordinator() { shutdown(); }

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::create(std::unique_ptr<store::CoordinatorStore> store,
                                                                  RendezvousStore& rendezvous,
                                                                  CoordinatorOptions options) {
  // Paths are admitted with their links resolved: the roots must be too to compare.
  options.roots.data = resolve_roots(options.roots.data);
  options.roots.checkpoint = resolve_roots(options.roots.checkpoint);
  FP8_ASSIGN_OR_RETURN(std::unique_ptr<store::CoordinatorStore> progress_store, store->connect());
  std::unique_ptr<Coordinator> c(new Coordinator(std::move(store), rendezvous, std::move(options)));
  {
    absl::MutexLock flush_lock(&c->flush_mu_);
    c->progress_store_ = std::move(progress_store);
  }
  absl::MutexLock lock(&c->mu_);
  FP8_RETURN_IF_ERROR(c->load());
  return c;
}

absl::Status Coordinator::load() {
  FP8_ASSIGN_OR_RETURN(auto jobs, store_->active_jobs());
  for (auto& [submitted_seq, job] : jobs) {
    ActiveJob active;
    int64_t number = 0;
    absl::string_view id = job.id();
    if (!absl::ConsumePrefix(&id, "job-") || !absl::SimpleAtoi(id, &number)) {
      return absl::DataLossError(absl::StrCat("state database: job id '", job.id(), "' is malformed"));
    }
    active.number = number;
    active.submitted_seq = submitted_seq;
    // A restarting job waits out its backoff afresh: the moment it was due is not stored.
    active.restart_at = Clock::now();
    if (job.state() == v1::Job::RUNNING && job.attempt_history_size() > 0) {
      const v1::Attempt& last = job.attempt_history(job.attempt_history_size() - 1);
      AttemptRuntime runtime;
      runtime.number = last.number();
      for (const v1::RankPlacement& p : last.ranks()) {
        // They were started before the restart.
        runtime.ranks.push_back(RankRuntime{p.worker_id(), p.device_name(), false, true, std::nullopt});
      }
      active.attempt = std::move(runtime);
    }
    // Jobs from before job folders were recorded keep theirs from being nested into.
    FP8_RETURN_IF_ERROR(store_->add_job_folder(job.spec().checkpoint().dir(), job.id()));
    active.rank_memory_gb = rank_memory_need_gb(job.spec());
    active.flops_per_token = jobspec::training_flops_per_token(job.spec());
    FP8_ASSIGN_OR_RETURN(std::vector<v1::RankAmaxes> ranks, store_->rank_amaxes(job.id()));
    for (const v1::RankAmaxes& r : ranks) active.rank_amax[{r.layer(), r.operand()}] = rank_amax_from_record(r);
    active.job = std::move(job);
    active_.emplace(active.job.id(), std::move(active));
  }
  // Known workers get twice lost_after from now to heartbeat again: they first notice the
  // outage, back off, reconnect and maybe re-register, and a restart should not cost the
  // running jobs an attempt.
  FP8_ASSIGN_OR_RETURN(auto workers, store_->workers());
  for (store::WorkerRecord& record : workers) {
    Worker w;
    w.record = std::move(record);
    w.last_heartbeat = Clock::now() + absl::ToChronoNanoseconds(options_.lost_after);
    workers_.emplace(w.record.id, std::move(w));
  }
  for (const auto& [id, active] : active_) {
    if (!active.attempt.has_value()) continue;
    for (size_t r = 0; r < active.attempt->ranks.size(); ++r) {
      auto w = workers_.find(active.attempt->ranks[r].worker_id);
      if (w != workers_.end()) w->second.assigned.insert({id, active.attempt->number, static_cast<int>(r)});
    }
  }
  return absl::OkStatus();
}

void Coordinator::set_metrics(CoordinatorMetrics* metrics) {
  absl::MutexLock lock(&mu_);
  metrics_ = metrics;
  if (metrics_ == nullptr) return;
  for (const auto& [id, active] : active_) metrics_->on_job(active.job);
}

ClusterCounts Coordinator::cluster() {
  absl::MutexLock lock(&mu_);
  ClusterCounts counts;
  for (const auto& [id, w] : workers_) {
    const char* state = w.last_heartbeat_unix_ms == 0 ? "unconfirmed" : worker_busy(w) ? "busy" : "idle";
    ++counts.workers[{device_kind_label(w.record.device_kind), state}];
  }
  for (const auto& [id, active] : active_) {
    const v1::Job& job = active.job;
    if (is_final(job.state())) continue;
    ++counts.active_jobs[v1::Job::State_Name(job.state())];
    if (job.state() == v1::Job::QUEUED) ++counts.queued[device_kind_label(job.spec().resources().device())];
  }
  return counts;
}

absl::Status Coordinator::health() {
  absl::MutexLock lock(&mu_);
  if (shutting_down_) return unavailable();
  return store_->count_tokens().status();
}

void Coordinator::start_ticking() {
  ticker_ = std::thread([this] {
    const absl::Duration tick_period = std::max(options_.heartbeat_interval / 4, absl::Milliseconds(20));
    absl::Time next_tick = absl::Now() + tick_period;
    absl::MutexLock lock(&mu_);
    while (!shutting_down_) {
      mu_.AwaitWithTimeout(absl::Condition(&shutting_down_), std::min(tick_period, kProgressFlushInterval));
      if (shutting_down_) break;
      flush_progress_in_background();
      if (absl::Now() < next_tick) continue;
      next_tick = absl::Now() + tick_period;
      mu_.Unlock();
      tick();
      mu_.Lock();
    }
  });
}

void Coordinator::shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (!shutting_down_) flush_progress().IgnoreError();  // best effort: a kill loses at most a flush interval
    shutting_down_ = true;
    events_changed_.SignalAll();
  }
  if (ticker_.joinable()) ticker_.join();
}

// ---- tokens -----------------------------------------------------------------------------

absl::StatusOr<Principal> Coordinator::authenticate(const std::string& token) {
  const std::string hash = hash_token(token);
  absl::MutexLock lock(&mu_);
  if (shutting_down_) return unavailable();
  if (auto cached = principals_.find(hash); cached != principals_.end()) return cached->second;
  std::optional<Principal> who;
  FP8_ASSIGN_OR_RETURN(std::optional<store::TokenRecord> record, store_->token(hash));
  if (record.has_value()) who = Principal{record->role, record->name, "", 0};
  if (!who.has_value()) {
    FP8_ASSIGN_OR_RETURN(std::optional<store::TrainerTokenRecord> trainer, store_->trainer_token(hash));
    if (trainer.has_value()) {
      who = Principal{Role::kTrainer, absl::StrCat(trainer->job_id, "/attempt-", trainer->attempt), trainer->job_id,
                      trainer->attempt};
    }
  }
  if (!who.has_value()) return absl::UnauthenticatedError("unknown or revoked token");
  principals_.emplace(hash, *who);
  return *who;
}

absl::StatusOr<std::string> Coordinator::create_token(Role role, const std::string& name) {
  if (role == Role::kTrainer) return absl::InvalidArgumentError("trainer tokens are made per attempt");
  // A user's name is the owner of its jobs, and names its folders (spec_admission.h).
  FP8_RETURN_IF_ERROR(check_owner_name(name, "token name"));
  std::string token = new_token(role);
  absl::MutexLock lock(&mu_);
  FP8_RETURN_IF_ERROR(store_->add_token(hash_token(token), store::TokenRecord{name, role}));
  return token;
}

// ---- the job API ------------------------------------------------------------------------

absl::StatusOr<v1::Job> Coordinator::visible_job(const Principal& who, const std::string& job_id) {
  if (who.role != Role::kAdmin && who.role != Role::kUser) {
    return absl::PermissionDeniedError(absl::StrCat("a ", role_name(who.role), " token may not use the job API"));
  }
  auto it = active_.find(job_id);
  std::optional<v1::Job> job;
  if (it != active_.end()) {
    job = it->second.job;
    show_pending(it->second, *job);
  } else {
    FP8_ASSIGN_OR_RETURN(job, store_->job(job_id));
  }
  if (!job.has_value() || (!who.is_admin() && job->spec().owner() != who.name)) {
    return absl::NotFoundError(absl::StrCat("job_id: no job '", rpc::quote_for_error(job_id), "'"));
  }
  return *job;
}

absl::StatusOr<v1::Job> Coordinator::submit(const Principal& who, const v1::SubmitJobRequest& request) {
  if (who.role != Role::kAdmin && who.role != Role::kUser) {
    return absl::PermissionDeniedError(absl::StrCat("a ", role_name(who.role), " token may not submit jobs"));
  }
  v1::JobSpec spec = request.spec();
  if (!spec.has_owner() || spec.owner().empty()) spec.set_owner(who.name);
  if (!who.is_admin() && spec.owner() != who.name) {
    return absl::PermissionDeniedError(absl::StrCat(
        "spec.owner: user '", who.name, "' may not submit jobs for '", rpc::quote_for_error(spec.owner()),
        "'; leave owner out of the job (it defaults to the token's user) or set it to '", who.name, "' (--set owner=",
        who.name, ")"));
  }
  FP8_ASSIGN_OR_RETURN(v1::JobSpec resolved, admit_job_spec(spec, options_.roots, who.is_admin()));

  const double rank_memory_gb = rank_memory_need_gb(resolved);
  absl::MutexLock lock(&mu_);
  if (shutting_down_) return unavailable();
  if (!request.idempotency_key().empty()) {
    FP8_ASSIGN_OR_RETURN(std::optional<std::string> earlier,
                         store_->job_by_idempotency_key(resolved.owner(), request.idempotency_key()));
    if (earlier.has_value()) {
      FP8_ASSIGN_OR_RETURN(v1::Job first, visible_job(who, *earlier));
      if (!same_submission(first, resolved)) {
        return absl::AlreadyExistsError(absl::StrCat("idempotency_key: already used by ", first.id(),
                                                     " with another spec; use a new key for a new job"));
      }
      return first;
    }
  }
  // After the idempotency check: a retry of an accepted job returns it whatever the fleet.
  if (!request.queue_anyway()) FP8_RETURN_IF_ERROR(check_some_worker_holds(resolved, rank_memory_gb));
  FP8_RETURN_IF_ERROR(check_amax_source(who, resolved));
  ActiveJob active;
  v1::Job job;
  absl::Status s = store_->transaction([&]() -> absl::Status {
    FP8_ASSIGN_OR_RETURN(active.number, store_->next("job"));
    FP8_ASSIGN_OR_RETURN(active.submitted_seq, store_->next("submission"));
    job.set_id(absl::StrCat("job-", active.number));
    *job.mutable_spec() = resolved;
    const std::string folder = job_folder(resolved.checkpoint().dir(), job.id());
    FP8_RETURN_IF_ERROR(claim_job_folder(folder, job.id()));
    job.mutable_spec()->mutable_checkpoint()->set_dir(folder);
    job.set_idempotency_key(request.idempotency_key());
    job.set_state(v1::Job::QUEUED);
    job.set_restarts_left(resolved.restarts().max_restarts());
    job.set_created_unix_ms(now_unix_ms());
    FP8_RETURN_IF_ERROR(store_->put_job(job, active.number, active.submitted_seq));
    v1::JobEvent queued = state_change_event(job.id(), v1::Job::STATE_UNSPECIFIED, v1::Job::QUEUED, "submitted");
    return store_->append_event(queued).status();
  });
  if (!s.ok()) return s;
  active.job = job;
  active.rank_memory_gb = rank_memory_gb;
  active.flops_per_token = jobspec::training_flops_per_token(resolved);
  active_.emplace(job.id(), std::move(active));
  ++event_generation_;
  events_changed_.SignalAll();
  schedule_locked();
  return visible_job(who, job.id());
}

absl::Status Coordinator::check_amax_source(const Principal& who, const v1::JobSpec& spec) {
  const std::string& source_id = spec.fp8().amax_init_from();
  if (source_id.empty()) return absl::OkStatus();
  absl::StatusOr<v1::Job> source = visible_job(who, source_id);
  if (!source.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("fp8.amax_init_from: no job '", rpc::quote_for_error(source_id),
                                                   "' of '", spec.owner(), "' to start from"));
  }
  // Histories are kept per layer and cast, so the layers must be the same ones.
  const auto layers = [](const v1::JobSpec& s) {
    std::vector<std::tuple<std::string, int64_t, int64_t>> out;
    for (const jobspec::LinearLayer& l : jobspec::list_linear_layers(s.model())) {
      out.emplace_back(l.name, l.in_features, l.out_features);
    }
    return out;
  };
  if (layers(source->spec()) != layers(spec)) {
    return absl::InvalidArgumentError(absl::StrCat("fp8.amax_init_from: ", source_id,
                                                   " trains another model (its linear layers differ from this job's); "
                                                   "amax histories are per layer, so a warm start needs the same model"));
  }
  FP8_ASSIGN_OR_RETURN(store::StoredAmax stored, store_->amax(source_id));
  if (stored.histories.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "fp8.amax_init_from: ", source_id,
        " has no amax histories to start from (a delayed-scaling job reports them at its report steps and "
        "checkpoints)"));
  }
  return absl::OkStatus();
}

absl::Status Coordinator::check_some_worker_holds(const v1::JobSpec& spec, double rank_memory_gb) const {
  if (rank_memory_gb <= 0) return absl::OkStatus();
  const scheduler::DeviceKind kind = kind_of(spec.resources().device());
  double largest = 0;
  bool any = false;
  for (const auto& [id, w] : workers_) {
    if (kind_of(w.record.device_kind) != kind) continue;
    // A worker that did not say what it offers may hold anything.
    if (w.record.memory_gb <= 0 || w.record.memory_gb >= rank_memory_gb) return absl::OkStatus();
    any = true;
    largest = std::max(largest, w.record.memory_gb);
  }
  // With no worker of the kind registered yet, nothing is known: the job waits for one.
  if (!any) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrFormat(
      "resources: a rank of this job needs %.2f GiB (%s), and the largest %s worker offers %.2f GiB "
      "(fp8-worker --memory-gb): no registered worker could hold it. Lower the job's memory (a smaller "
      "train.batch_size, train.activation_checkpointing: full, more ranks), or submit with --queue-anyway to "
      "wait for a larger worker",
      rank_memory_gb,
      spec.resources().has_memory_gb() ? "resources.memory_gb" : "its memory estimate: fp8ctl submit --dry-run",
      scheduler::device_kind_name(kind), largest));
}

absl::Status Coordinator::claim_job_folder(const std::string& folder, const std::string& job_id) {
  // Inside another job's folder, this job's files would mix with that job's checkpoints
  // (and that job's retention could delete them): every folder above it must be no job's.
  for (std::filesystem::path p = std::filesystem::path(folder).parent_path(); p.has_relative_path();
       p = p.parent_path()) {
    FP8_ASSIGN_OR_RETURN(std::optional<std::string> owner, store_->job_of_folder(p.string()));
    if (owner.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat("spec.checkpoint.dir: '", rpc::quote_for_error(p.string(), 256),
                                                     "' is the checkpoint folder of ", *owner,
                                                     "; name a folder outside it"));
    }
  }
  return store_->add_job_folder(folder, job_id);
}

absl::StatusOr<v1::Job> Coordinator::get_job(const Principal& who, const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  if (shutting_down_) return unavailable();
  return visible_job(who, job_id);
}

absl::StatusOr<v1::ListJobsResponse> Coordinator::list_jobs(const Principal& who, const v1::ListJobsRequest& request) {
  if (who.role != Role::kAdmin && who.role != Role::kUser) {
    return absl::PermissionDeniedError(absl::StrCat("a ", role_name(who.role), " token may not use the job API"));
  }
  if (request.page_size() < 0 || request.page_size() > 1000) {
    return absl::InvalidArgumentError("page_size: must be in [0, 1000]");
  }
  store::ListFilter filter;
  filter.owner = request.owner();
  if (!who.is_admin()) {
    if (!filter.owner.empty() && filter.owner != who.name) {
      return absl::PermissionDeniedError(absl::StrCat("owner: user '", who.name, "' may list only its own jobs"));
    }
    filter.owner = who.name;
  }
  for (int s : request.states()) filter.states.push_back(static_cast<v1::Job::State>(s));
  filter.limit = request.page_size() == 0 ? 100 : request.page_size();
  if (!request.page_token().empty() && !absl::SimpleAtoi(request.page_token(), &filter.before_number)) {
    return absl::InvalidArgumentError("page_token: not a token this coordinator handed out");
  }
  absl::MutexLock lock(&mu_);
  if (shutting_down_) return unavailable();
  FP8_RETURN_IF_ERROR(flush_progress());  // the listed rows carry the latest progress
  FP8_ASSIGN_OR_RETURN(auto jobs, store_->list_jobs(filter));
  v1::ListJobsResponse response;
  size_t bytes = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    auto& [number, job] = jobs[i];
    job.clear_attempt_history();
    if (auto a = active_.find(job.id()); a != active_.end()) show_pending(a->second, job);
    // The page ends before a job that would take it past kListPageBytes, so that no set of
    // stored jobs can make a response too large for a client to receive.
    const size_t size = job.ByteSizeLong() + 8;
    if (i > 0 && bytes + size > kListPageBytes) {
      response.set_next_page_token(absl::StrCat(jobs[i - 1].first));
      return response;
    }
    bytes += size;
    *response.add_jobs() = std::move(job);
  }
  if (static_cast<int>(jobs.size()) == filter.limit) response.set_next_page_token(absl::StrCat(jobs.back().first));
  return response;
}

absl::StatusOr<v1::Job> Coordinator::cancel_job(const Principal& who, const v1::CancelJobRequest& request) {
  absl::MutexLock lock(&mu_);
  if (shutting_down_) return unavailable();
  FP8_ASSIGN_OR_RETURN(v1::Job job, visible_job(who, request.job_id()));
  if (job.state() == v1::Job::CANCELLED) return job;
  if (is_final(job.state())) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job.id(), " already ended ", v1::Job::State_Name(job.state())));
  }
  ActiveJob& active = active_.at(job.id());
  std::string reason = absl::StrCat("cancelled by ", who.name);
  if (!request.reason().empty()) absl::StrAppend(&reason, ": ", request.reason());
  if (active.attempt.has_value()) {
    FP8_RETURN_IF_ERROR(end_attempt(active, v1::Attempt::CANCELLED, reason, reason));
  } else {
    v1::Job next = active.job;
    next.set_state(v1::Job::CANCELLED);
    next.set_failure_reason(reason);
    next.set_finished_unix_ms(now_unix_ms());
    FP8_RETURN_IF_ERROR(
        commit(active, next, {state_change_event(job.id(), active.job.state(), v1::Job::CANCELLED, reason)}));
  }
  v1::Job out = active.job;
  forget_final_job(job.id());
  return out;
}

absl::StatusOr<v1::Job> Coordinator::resume_job(const Principal& who, const v1::ResumeJobRequest& request) {
  absl::MutexLock lock(&mu_);
  if (shutting_down_) return unavailable();
  FP8_ASSIGN_OR_RETURN(v1::Job job, visible_job(who, request.job_id()));
  if (job.state() != v1::Job::FAILED && job.state() != v1::Job::CANCELLED) {
    return absl::FailedPreconditionError(absl::StrCat("job ", job.id(), " is ", v1::Job::State_Name(job.state()),
                                                      ": only a FAILED or CANCELLED job resumes"));
  }
  if (request.has_world_size() && (request.world_size() < 1 || request.world_size() > jobspec::kMaxWorldSize)) {
    return absl::InvalidArgumentError(
        absl::StrCat("world_size: ", request.world_size(), " is outside [1, ", jobspec::kMaxWorldSize, "]"));
  }
  ActiveJob active;
  absl::string_view number = job.id();
  if (!absl::ConsumePrefix(&number, "job-") || !absl::SimpleAtoi(number, &active.number)) {
    return absl::InternalError(absl::StrCat("job id '", job.id(), "' is malformed"));
  }
  v1::Job next = job;
  if (request.has_world_size()) {
    next.mutable_spec()->mutable_resources()->set_world_size(request.world_size());
    // The spec's other fields ask things of the world size too (a tensor-parallel job's
    // ranks are whole tensor-parallel groups): refuse here what the ranks would refuse.
    for (const jobspec::Issue& issue : jobspec::find_spec_issues(next.spec())) {
      if (issue.field == "resources.world_size") {
        return absl::InvalidArgumentError(absl::StrCat("world_size: ", issue.message));
      }
    }
  }
  next.set_state(v1::Job::QUEUED);
  next.set_restarts_left(next.spec().restarts().max_restarts());
  next.clear_failure_reason();
  next.clear_finished_unix_ms();
  const std::string why = absl::StrCat(
      "resumed by ", who.name, " from step ", job.last_checkpoint_step(),
      request.has_world_size() ? absl::StrCat(" on ", request.world_size(), " ranks") : std::string());
  FP8_ASSIGN_OR_RETURN(active.submitted_seq, store_->next("submission"));  // behind the jobs waiting now
  active.rank_memory_gb = rank_memory_need_gb(next.spec());
  active.flops_per_token = jobspec::training_flops_per_token(next.spec());
  active.job = job;
  FP8_RETURN_IF_ERROR(commit(active, next, {state_change_event(job.id(), job.state(), v1::Job::QUEUED, why)}));
  active_.emplace(job.id(), std::move(active));
  schedule_locked();
  return visible_job(who, job.id());
}

absl::StatusOr<EventBatch> Coordinator::events_after(const Principal& who, const std::string& job_id,
                                                    int64_t after_sequence, bool include_progress) {
  absl::MutexLock lock(&mu_);
  if (shutting_down_) return unavailable();
  FP8_ASSIGN_OR_RETURN(v1::Job job, visible_job(who, job_id));
  FP8_RETURN_IF_ERROR(flush_progress());  // a reader sees every report acknowledged so far
  EventBatch batch;
  FP8_ASSIGN_OR_RETURN(batch.events, store_->events_after(job_id, after_sequence, include_progress, 500));
  batch.job_final = is_final(job.state());
  return batch;
}

void Coordinator::await_events(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  if (shutting_down_) return;
  const int64_t seen = event_generation_;
  const absl::Time deadline = absl::Now() + timeout;
  while (event_generation_ == seen && !shutting_down_) {
    if (events_changed_.WaitWithDeadline(&mu_, deadline)) break;
  }
}

absl::StatusOr<v1::GetJobLogsResponse> Coordinator::get_job_logs(const Principal& who,
                                                               const v1::GetJobLogsRequest& request) {
  if (request.tail_lines() < 0 || request.tail_lines() > 10000) {
    return absl::InvalidArgumentError("tail_lines: must be in [0, 10000]");
  }
  if (request.attempt() < 0) return absl::InvalidArgumentError("attempt: must be >= 0");
  if (request.has_after_sequence() && request.after_sequence() < 0) {
    return absl::InvalidArgumentError("after_sequence: must be >= 0");
  }
  absl::MutexLock lock(&mu_);
  if (shutting_down_) return unavailable();
  FP8_ASSIGN_OR_RETURN(v1::Job job, visible_job(who, request.job_id()));
  const int attempt = request.attempt() == 0 ? job.attempts() : request.attempt();
  std::optional<int> rank;
  if (request.has_rank()) rank = request.rank();
  FP8_ASSIGN_OR_RETURN(store::LogTail tail,
                       store_->tail_logs(job.id(), attempt, rank, request.tail_lines() == 0 ? 100 : request.tail_lines(),
                                         request.has_after_sequence() ? std::optional<int64_t>(request.after_sequence())
                                                                      : std::nullopt));
  // What fits in kListPageBytes (10000 lines of 4 KiB would not fit in a response a client
  // can receive): the newest lines of a tail, the oldest after a sequence (the client asks
  // again from the last); the rest count as truncated.
  const bool after = request.has_after_sequence();
  size_t first = 0, end = tail.lines.size(), bytes = 0;
  if (after) {
    end = 0;
    while (end < tail.lines.size() && bytes + tail.lines[end].ByteSizeLong() + 8 <= kListPageBytes) {
      bytes += tail.lines[end++].ByteSizeLong() + 8;
    }
  } else {
    first = end;
    while (first > 0 && bytes + tail.lines[first - 1].ByteSizeLong() + 8 <= kListPageBytes) {
      bytes += tail.lines[--first].ByteSizeLong() + 8;
    }
  }
  v1::GetJobLogsResponse response;
  for (size_t i = first; i < end; ++i) *response.add_lines() = std::move(tail.lines[i]);
  response.set_truncated(tail.truncated || first > 0 || end < tail.lines.size());
  return response;
}

absl::StatusOr<v1::ListWorkersResponse> Coordinator::list_workers(const Principal& who) {
  if (who.role != Role::kAdmin && who.role != Role::kUser) {
    return absl::PermissionDeniedError(absl::StrCat("a ", role_name(who.role), " token may not use the job API"));
  }
  absl::MutexLock lock(&mu_);
  if (shutting_down_) return unavailable();
  std::vector<const Worker*> ordered;
  for (const auto& [id, w] : workers_) ordered.push_back(&w);
  std::sort(ordered.begin(), ordered.end(),
            [](const Worker* a, const Worker* b) { return a->record.registered_seq < b->record.registered_seq; });
  v1::ListWorkersResponse response;
  for (const Worker* w : ordered) {
    v1::WorkerInfo* info = response.add_workers();
    info->set_worker_id(w->record.id);
    info->set_device_kind(static_cast<v1::ResourceSpec::Device>(w->record.device_kind));
    info->set_device_name(w->record.device_name);
    info->set_address(w->record.address);
    info->set_last_heartbeat_unix_ms(w->last_heartbeat_unix_ms);
    info->set_cpus(w->record.cpus);
    info->set_memory_gb(w->record.memory_gb);
    info->set_state(w->last_heartbeat_unix_ms == 0 ? v1::WorkerInfo::UNCONFIRMED
                    : worker_busy(*w)               ? v1::WorkerInfo::BUSY
                                                   : v1::WorkerInfo::IDLE);
    for (const auto& [job_id, attempt, rank] : w->assigned) {
      v1::RankStatus* r = info->add_ranks();
      auto it = active_.find(job_id);
      const bool visible = who.is_admin() || (it != active_.end() && it->second.job.spec().owner() == who.name);
      r->set_job_id(visible ? job_id : "");
      r->set_attempt(attempt);
      r->set_rank(rank);
      const bool seen = it != active_.end() && it->second.attempt.has_value() &&
                        it->second.attempt->ranks[static_cast<size_t>(rank)].seen;
      r->set_state(seen ? v1::RankStatus::RUNNING : v1::RankStatus::STARTING);
    }
  }
  return response;
}

absl::StatusOr<v1::GetJobAmaxResponse> Coordinator::get_job_amax(const Principal& who, const std::string& job_id,
                                                               bool by_rank) {
  absl::MutexLock lock(&mu_);
  if (shutting_down_) return unavailable();
  FP8_ASSIGN_OR_RETURN(v1::Job job, visible_job(who, job_id));
  FP8_ASSIGN_OR_RETURN(store::StoredAmax stored, store_->amax(job.id()));
  v1::GetJobAmaxResponse response;
  response.set_step(stored.step);
  for (v1::AmaxHistory& h : stored.histories) *response.add_histories() = std::move(h);
  if (!by_rank) return response;
  // A running job's are in memory (and stored as each step completes); a finished job's
  // are in the store.
  std::map<std::pair<std::string, int>, RankAmax> stored_ranks;
  const std::map<std::pair<std::string, int>, RankAmax>* rank_amax = &stored_ranks;
  if (auto it = active_.find(job.id()); it != active_.end()) {
    rank_amax = &it->second.rank_amax;
  } else {
    FP8_ASSIGN_OR_RETURN(std::vector<v1::RankAmaxes> records, store_->rank_amaxes(job.id()));
    for (const v1::RankAmaxes& r : records) stored_ranks[{r.layer(), r.operand()}] = rank_amax_from_record(r);
  }
  for (const auto& [key, ranks] : *rank_amax) {
    *response.add_by_rank() = rank_amax_record(key.first, key.second, ranks, /*open_step=*/true);
  }
  return response;
}

// ---- the attempt lifecycle ------------------------------------------------------------------

absl::Status Coordinator::commit(ActiveJob& active, v1::Job next, std::vector<v1::JobEvent> events) {
  // The progress reported before this change comes before it in the store too.
  FP8_RETURN_IF_ERROR(flush_progress());
  FP8_RETURN_IF_ERROR(store_->transaction([&]() -> absl::Status {
    FP8_RETURN_IF_ERROR(store_->put_job(next, active.number, active.submitted_seq));
    for (v1::JobEvent& e : events) FP8_RETURN_IF_ERROR(store_->append_event(e).status());
    return absl::OkStatus();
  }));
  active.job = std::move(next);
  if (metrics_ != nullptr) metrics_->on_job(active.job);
  ++event_generation_;
  events_changed_.SignalAll();
  return absl::OkStatus();
}

void Coordinator::forget_final_job(const std::string& job_id) {
  auto it = active_.find(job_id);
  if (it == active_.end() || !is_final(it->second.job.state())) return;
  active_.erase(it);
}

bool Coordinator::worker_busy(const Worker& worker) const {
  // Still running (or stopping) some rank, or holding one of a live attempt.
  return !worker.listed.empty() || !worker.assigned.empty();
}

void Coordinator::unassign(const std::string& worker_id, const std::string& job_id, int attempt, int rank) {
  auto w = workers_.find(worker_id);
  if (w != workers_.end()) w->second.assigned.erase({job_id, attempt, rank});
}

void Coordinator::show_pending(const ActiveJob& active, v1::Job& job) const {
  if (job.state() == v1::Job::RESTARTING && Clock::now() < active.restart_at) {
    const auto left = std::chrono::duration_cast<std::chrono::seconds>(active.restart_at - Clock::now()).count() + 1;
    job.set_pending_reason(absl::StrCat("restart backoff: attempt ", job.attempts() + 1, " in ", left, " s"));
  } else if ((job.state() == v1::Job::QUEUED || job.state() == v1::Job::RESTARTING) && active.waiting.has_value()) {
    job.set_pending_reason(active.waiting->text);
  }
}

void Coordinator::schedule_locked() {
  if (shutting_down_) return;
  const Clock::time_point now = Clock::now();
  std::vector<scheduler::JobView> queued;
  for (const auto& [id, active] : active_) {
    const v1::Job::State s = active.job.state();
    if (s == v1::Job::QUEUED || (s == v1::Job::RESTARTING && now >= active.restart_at)) {
      const v1::ResourceSpec& resources = active.job.spec().resources();
      queued.push_back(scheduler::JobView{id, active.job.spec().priority(), active.submitted_seq,
                                          resources.world_size(), kind_of(resources.device()),
                                          resources.cpus_per_rank(), active.rank_memory_gb});
    }
  }
  if (queued.empty()) return;
  std::vector<scheduler::WorkerView> views;
  for (const auto& [id, w] : workers_) {
    views.push_back(scheduler::WorkerView{id, kind_of(w.record.device_kind), w.record.registered_seq, worker_busy(w),
                                          now - w.last_heartbeat <= absl::ToChronoNanoseconds(options_.lost_after),
                                          w.record.cpus, w.record.memory_gb});
  }
  const scheduler::Plan plan = scheduler::schedule(queued, views);
  for (const scheduler::Waiting& w : plan.waiting) {
    active_.at(w.job_id).waiting = w;
    if (metrics_ != nullptr) metrics_->on_pending(w.job_id, scheduler::waiting_reason_name(w.reason));
  }
  for (const scheduler::Placement& p : plan.placements) {
    std::vector<std::string> worker_ids;
    for (const scheduler::RankSlot& slot : p.ranks) worker_ids.push_back(slot.worker_id);
    if (absl::Status s = start_attempt(active_.at(p.job_id), worker_ids); !s.ok()) {
      log::error(absl::StrCat("starting ", p.job_id, " failed: ", s.message()));
    }
  }
}

absl::Status Coordinator::start_attempt(ActiveJob& active, const std::vector<std::string>& worker_ids) {
  if (metrics_ != nullptr) {
    // Waiting since the submit, or since the previous attempt ended (backoff included).
    const int64_t since = active.job.attempt_history().empty()
                              ? active.job.created_unix_ms()
                              : active.job.attempt_history(active.job.attempt_history_size() - 1).ended_unix_ms();
    metrics_->on_attempt_started(active.job, static_cast<double>(now_unix_ms() - since) / 1e3);
  }
  active.waiting.reset();
  v1::Job next = active.job;
  const int number = next.attempts() + 1;
  next.set_attempts(number);
  next.set_state(v1::Job::RUNNING);
  if (next.started_unix_ms() == 0) next.set_started_unix_ms(now_unix_ms());
  v1::Attempt* attempt = next.add_attempt_history();
  attempt->set_number(number);
  attempt->set_state(v1::Attempt::STARTING);
  attempt->set_resumed_from_step(next.last_checkpoint_step());
  attempt->set_started_unix_ms(now_unix_ms());
  AttemptRuntime runtime;
  runtime.number = number;
  runtime.trainer_token = new_token(Role::kTrainer);
  for (size_t r = 0; r < worker_ids.size(); ++r) {
    const Worker& w = workers_.at(worker_ids[r]);
    v1::RankPlacement* p = attempt->add_ranks();
    p->set_rank(static_cast<int>(r));
    p->set_worker_id(w.record.id);
    p->set_device_name(w.record.device_name);
    runtime.ranks.push_back(RankRuntime{w.record.id, w.record.device_name, false, false, std::nullopt});
  }
  std::vector<v1::JobEvent> events = {
      state_change_event(next.id(), active.job.state(), v1::Job::RUNNING,
                       number == 1 ? "placed" : absl::StrCat("restart ", number - 1)),
      attempt_started_event(next.id(), *attempt)};
  FP8_RETURN_IF_ERROR(store_->add_trainer_token(hash_token(runtime.trainer_token),
                                                store::TrainerTokenRecord{next.id(), number}));
  FP8_RETURN_IF_ERROR(commit(active, next, std::move(events)));
  for (size_t r = 0; r < worker_ids.size(); ++r) {
    Worker& worker = workers_.at(worker_ids[r]);
    worker.assigned.insert({next.id(), number, static_cast<int>(r)});
    *worker.pending.emplace_back().mutable_start_rank() =
        make_start_rank(active.job, number, static_cast<int>(r), static_cast<int>(worker_ids.size()),
                      next.last_checkpoint_step(), runtime.trainer_token);
  }
  active.attempt = std::move(runtime);
  active.saturated.clear();
  active.outliers.clear();
  return absl::OkStatus();
}

v1::StartRank Coordinator::make_start_rank(const v1::Job& job, int attempt, int rank, int world_size,
                                         int64_t resume_step, const std::string& trainer_token) const {
  v1::StartRank start;
  start.set_job_id(job.id());
  start.set_attempt(attempt);
  start.set_rank(rank);
  start.set_world_size(world_size);
  *start.mutable_spec() = job.spec();
  start.set_resume_step(resume_step);
  start.set_data_root(root_of(job.spec().data().path(), options_.roots.data));
  start.set_checkpoint_root(root_of(job.spec().checkpoint().dir(), options_.roots.checkpoint));
  start.set_rendezvous_namespace(rendezvous_namespace(job.id(), attempt));
  start.set_coordinator_address(advertise_address_);
  start.set_trainer_token(trainer_token);
  return start;
}

void Coordinator::queue_stop(Worker& worker, const std::string& job_id, int attempt, const std::string& reason) {
  const std::string key = absl::StrCat(job_id, "/", attempt);
  const Clock::time_point now = Clock::now();
  // Entries older than a minute are only history; dropping them keeps the map small.
  std::erase_if(worker.stops_sent, [&](const auto& e) { return now - e.second > std::chrono::minutes(1); });
  auto it = worker.stops_sent.find(key);
  if (it != worker.stops_sent.end() && now - it->second < std::chrono::seconds(5)) return;
  worker.stops_sent[key] = now;
  v1::StopRank* stop = worker.pending.emplace_back().mutable_stop_rank();
  stop->set_job_id(job_id);
  stop->set_attempt(attempt);
  stop->set_grace_seconds(options_.stop_grace_seconds);
  stop->set_reason(reason);
}

namespace {

// The proto names the classes as the scheduler does, in capitals.
v1::RestartPolicy::FailureClass to_proto(scheduler::FailureClass c) {
  v1::RestartPolicy::FailureClass out = v1::RestartPolicy::UNKNOWN;
  v1::RestartPolicy::FailureClass_Parse(absl::AsciiStrToUpper(scheduler::failure_class_name(c)), &out);
  return out;
}

// restarts.on; the loader fills its default, a spec stored before the field existed has it
// empty and restarts everything, as it did.
std::vector<scheduler::FailureClass> restart_on(const v1::RestartPolicy& policy) {
  constexpr scheduler::FailureClass kAll[] = {
      scheduler::FailureClass::kWorkerLost,    scheduler::FailureClass::kPeerLost,
      scheduler::FailureClass::kSignal,        scheduler::FailureClass::kHung,
      scheduler::FailureClass::kConfiguration, scheduler::FailureClass::kDivergence,
      scheduler::FailureClass::kOutOfMemory,   scheduler::FailureClass::kUnknown};
  std::vector<scheduler::FailureClass> on;
  for (scheduler::FailureClass c : kAll) {
    const bool listed = std::find(policy.on().begin(), policy.on().end(), to_proto(c)) != policy.on().end();
    if (listed || policy.on().empty()) on.push_back(c);
  }
  return on;
}

}  // namespace

absl::Status Coordinator::end_attempt(ActiveJob& active, v1::Attempt::State attempt_state, const std::string& reason,
                                     const std::string& cancelled_by, scheduler::FailureClass failure) {
  AttemptRuntime& runtime = *active.attempt;
  v1::Job next = active.job;
  v1::Attempt* attempt = next.mutable_attempt_history(next.attempt_history_size() - 1);
  attempt->set_state(attempt_state);
  attempt->set_ended_unix_ms(now_unix_ms());
  if (attempt_state != v1::Attempt::SUCCEEDED) attempt->set_end_reason(reason);
  if (attempt_state == v1::Attempt::FAILED) attempt->set_failure_class(to_proto(failure));
  std::vector<v1::JobEvent> events = {attempt_ended_event(next.id(), *attempt)};

  v1::Job::State job_state = v1::Job::SUCCEEDED;
  std::string job_reason;
  int restart_number = 0;
  if (attempt_state == v1::Attempt::CANCELLED) {
    job_state = v1::Job::CANCELLED;
    job_reason = cancelled_by;
  } else if (attempt_state == v1::Attempt::FAILED) {
    const int max_restarts = next.spec().restarts().max_restarts();
    const scheduler::AttemptDecision decision =
        scheduler::decide_after_failure(reason, failure, max_restarts - next.restarts_left(), max_restarts,
                                      restart_on(next.spec().restarts()));
    if (const auto* restart = std::get_if<scheduler::Restart>(&decision)) {
      job_state = v1::Job::RESTARTING;
      job_reason = restart->reason;
      next.set_restarts_left(next.restarts_left() - 1);
      restart_number = restart->restart_number;
    } else {
      job_state = v1::Job::FAILED;
      job_reason = std::get<scheduler::Fail>(decision).reason;
    }
  }
  next.set_state(job_state);
  if (job_state != v1::Job::SUCCEEDED) next.set_failure_reason(job_state == v1::Job::RESTARTING ? "" : job_reason);
  if (is_final(job_state)) next.set_finished_unix_ms(now_unix_ms());
  events.push_back(state_change_event(next.id(), active.job.state(), job_state, job_reason));
  FP8_RETURN_IF_ERROR(store_->delete_trainer_tokens(next.id(), runtime.number));
  std::erase_if(principals_, [&](const auto& entry) {
    const Principal& p = entry.second;
    return p.role == Role::kTrainer && p.job_id == next.id() && p.attempt == runtime.number;
  });
  FP8_RETURN_IF_ERROR(commit(active, next, std::move(events)));

  // Every rank still running stops now, whatever its peers are doing: none may be left
  // waiting in a collective.
  std::set<std::string> told;
  for (const RankRuntime& r : runtime.ranks) {
    if (r.exit_code.has_value() || told.count(r.worker_id)) continue;
    auto w = workers_.find(r.worker_id);
    if (w == workers_.end()) continue;
    queue_stop(w->second, next.id(), runtime.number, reason.empty() ? "attempt ended" : reason);
    told.insert(r.worker_id);
  }
  for (size_t r = 0; r < runtime.ranks.size(); ++r) {
    unassign(runtime.ranks[r].worker_id, next.id(), runtime.number, static_cast<int>(r));
  }
  rendezvous_.delete_namespace(rendezvous_namespace(next.id(), runtime.number));
  active.attempt.reset();
  if (job_state == v1::Job::RESTARTING) {
    active.restart_at = Clock::now() + scheduler::restart_backoff(next.spec().restarts().backoff_seconds(), restart_number);
    active.waiting.reset();
    if (metrics_ != nullptr) metrics_->on_pending(next.id(), "backoff");
  }
  return absl::OkStatus();
}

void Coordinator::tick() {
  absl::MutexLock lock(&mu_);
  if (shutting_down_) return;
  check_liveness();
  check_progress();
  std::vector<std::string> done;
  for (const auto& [id, active] : active_) {
    if (is_final(active.job.state())) done.push_back(id);
  }
  for (const std::string& id : done) forget_final_job(id);
  schedule_locked();
}

}  // namespace fp8::server
