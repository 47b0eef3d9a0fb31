// The coordinator's state machine: jobs, their attempts, the workers and what each must
// do next. The gRPC services are thin adapters over it (services/), so everything here is
// plain C++ over proto messages, driven directly by tests.
//
// One mutex guards it all, the store included: every call is short (no call blocks on
// the network; rendezvous waits live in RendezvousStore, outside this lock). Each change
// is committed to the store, together with the events it causes, before it takes effect
// in memory, so a coordinator killed at any instant restarts into a state it reported.
//
// Workers pull: their heartbeats carry their ranks' status and return the commands queued
// for them (StartRank, StopRank). A job's life:
//   Submit -> QUEUED -> (gang placed by Tick) RUNNING, StartRank to each worker
//   -> every rank exits 0 -> SUCCEEDED
//   -> a rank exits non-zero / its worker is lost -> the attempt ends on every rank
//      (StopRank, rendezvous closed, trainer token revoked) -> RESTARTING (backoff, then
//      queued again, resuming from the last committed checkpoint) or FAILED
//   -> CancelJob -> CANCELLED (ranks stopped).
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "fp8/v1/job_service.pb.h"
#include "fp8/v1/rendezvous_service.pb.h"
#include "fp8/v1/trainer_service.pb.h"
#include "fp8/v1/worker_service.pb.h"
#include "server/auth/token.h"
#include "server/coordinator/coordinator_metrics.h"
#include "server/coordinator/coordinator_options.h"
#include "server/coordinator/rank_amax.h"
#include "server/rendezvous/rendezvous_store.h"
#include "server/scheduler/liveness.h"
#include "server/scheduler/scheduler.h"
#include "server/store/coordinator_store.h"

namespace fp8::server {

// A page of events for WatchJob.
struct EventBatch {
  std::vector<v1::JobEvent> events;
  bool job_final = false;  // the job is in a final state (its last event is in the store)
};

class Coordinator {
 public:
  using Clock = scheduler::LivenessClock;

  // Loads the state left by an earlier run: active jobs carry on; the workers it knew get
  // lost_after to heartbeat again before their attempts fail.
  static absl::StatusOr<std::unique_ptr<Coordinator>> create(std::unique_ptr<store::CoordinatorStore> store,
                                                             RendezvousStore& rendezvous, CoordinatorOptions options);
  ~Coordinator();

  // The host:port handed to trainers (StartRank.coordinator_address), once the server's
  // port is known.
  void set_advertise_address(const std::string& address);

  // Starts the background thread that runs tick() every heartbeat_interval / 4.
  void start_ticking();

  // From now on, keeps `metrics` (which must outlive this) up to date; publishes the
  // active jobs at once.
  void set_metrics(CoordinatorMetrics* metrics);
  // The scheduler's counts, for the metrics collector.
  ClusterCounts cluster();
  // OK while serving (for /healthz): the state lock is free to take and the store answers.
  absl::Status health();

  // Who a bearer token belongs to; UNAUTHENTICATED when nobody.
  absl::StatusOr<Principal> authenticate(const std::string& token);
  // Creates a token (admin CLI, first start).
  absl::StatusOr<std::string> create_token(Role role, const std::string& name);

  // ---- JobService -----------------------------------------------------------------------
  absl::StatusOr<v1::Job> submit(const Principal& who, const v1::SubmitJobRequest& request);
  absl::StatusOr<v1::Job> get_job(const Principal& who, const std::string& job_id);
  absl::StatusOr<v1::ListJobsResponse> list_jobs(const Principal& who, const v1::ListJobsRequest& request);
  absl::StatusOr<v1::Job> cancel_job(const Principal& who, const v1::CancelJobRequest& request);
  absl::StatusOr<v1::Job> resume_job(const Principal& who, const v1::ResumeJobRequest& request);
  absl::StatusOr<EventBatch> events_after(const Principal& who, const std::string& job_id, int64_t after_sequence,
                                         bool include_progress);
  // Blocks until some job records an event, or `timeout`, or shutdown.
  void await_events(absl::Duration timeout);
  absl::StatusOr<v1::GetJobLogsResponse> get_job_logs(const Principal& who, const v1::GetJobLogsRequest& request);
  absl::StatusOr<v1::ListWorkersResponse> list_workers(const Principal& who);
  absl::StatusOr<v1::GetJobAmaxResponse> get_job_amax(const Principal& who, const std::string& job_id,
                                                    bool by_rank = false);

  // ---- WorkerService --------------------------------------------------------------------
  absl::StatusOr<v1::RegisterWorkerResponse> register_worker(const Principal& who,
                                                           const v1::RegisterWorkerRequest& request);
  absl::StatusOr<v1::HeartbeatResponse> heartbeat(const Principal& who, const v1::HeartbeatRequest& request);
  absl::Status report_rank_exit(const Principal& who, const v1::ReportRankExitRequest& request);

  // ---- TrainerService -------------------------------------------------------------------
  absl::Status report_progress(const Principal& who, const v1::ReportProgressRequest& request);
  absl::Status report_amax_histories(const Principal& who, const v1::ReportAmaxHistoriesRequest& request);
  absl::StatusOr<v1::GetAmaxHistoriesResponse> get_amax_histories(const Principal& who,
                                                                const v1::GetAmaxHistoriesRequest& request);
  absl::Status commit_checkpoint(const Principal& who, const v1::CommitCheckpointRequest& request);
  absl::Status append_logs(const Principal& who, const v1::AppendLogsRequest& request);
  absl::Status report_cast_numerics(const Principal& who, const v1::ReportCastNumericsRequest& request);

  // ---- RendezvousService ----------------------------------------------------------------
  // OK when `who` may use the namespace: the trainer token of that attempt, or a worker
  // hosting one of its ranks.
  absl::Status authorize_rendezvous(const Principal& who, std::string_view requested);

  // Liveness (lost workers end their attempts), restarts whose backoff is over, and gang
  // scheduling. Also run after every call that can free or add capacity.
  void tick();

  // Wakes watchers and stops the ticking thread; later calls answer UNAVAILABLE.
  void shutdown();

 private:
  struct RankRuntime {
    std::string worker_id;
    std::string device_name;
    bool seen = false;            // listed by its worker's heartbeat since the start
    bool start_delivered = false;  // its StartRank went out in a heartbeat reply
    std::optional<int> exit_code;  // 0: done; set only for exits of the live attempt
    // Progress watchdog: when the attempt started (or this coordinator did), the rank's
    // last progress report, and the longest gap between its reports so far.
    Clock::time_point since = Clock::now();
    std::optional<Clock::time_point> last_progress;
    Clock::duration longest_gap{};
  };
  // The live attempt of an active job. The trainer token's plain text lives only here:
  // after a coordinator restart it is unknown, and a rank that must be started again
  // ends the attempt instead.
  struct AttemptRuntime {
    int number = 0;
    std::string trainer_token;
    std::vector<RankRuntime> ranks;
  };
  struct ActiveJob {
    v1::Job job;
    int64_t number = 0;
    int64_t submitted_seq = 0;
    double rank_memory_gb = 0;              // RankMemoryNeedGb of the spec (rank_memory.h)
    double flops_per_token = 0;             // the spec's model (common/jobspec/model_flops.h)
    std::optional<AttemptRuntime> attempt;  // set while RUNNING
    Clock::time_point restart_at{};         // RESTARTING: queued again from then on
    std::optional<scheduler::Waiting> waiting;  // why the last scheduling pass left it queued
    int progress_events = 0;                // since the last thinning
    int progress_attempt = 0;               // the attempt latest_progress came from (0: unknown)
    // (layer, operand) casts whose saturation this attempt already reported: one event
    // each, not one per report.
    std::set<std::pair<std::string, int>> saturated;
    // Every rank's amax per (layer, operand), and the casts with an outlier event this
    // attempt (one each).
    std::map<std::pair<std::string, int>, RankAmax> rank_amax;
    std::set<std::pair<std::string, int>> outliers;
  };
  struct Worker {
    store::WorkerRecord record;
    std::string token_name;  // name of the token that registered it; empty after a restart (any worker token)
    Clock::time_point last_heartbeat;
    int64_t last_heartbeat_unix_ms = 0;  // 0: not heard from since this coordinator started
    std::vector<v1::WorkerCommand> pending;
    // Ranks its last heartbeat listed, "job/attempt/rank".
    std::set<std::string> listed;
    // Ranks of live attempts placed on it and not yet exited (job id, attempt, rank): kept
    // up to date so that heartbeats and scheduling never walk every job.
    std::set<std::tuple<std::string, int, int>> assigned;
    // Attempts a StopRank went out for, and when (not repeated more than every few s).
    std::map<std::string, Clock::time_point> stops_sent;
  };

  Coordinator(std::unique_ptr<store::CoordinatorStore> store, RendezvousStore& rendezvous, CoordinatorOptions options);
  absl::Status load() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Progress reported and not yet written: the rows of the jobs it changed (copies), its
  // events in order, and the jobs whose progress history is due for thinning.
  struct ProgressBatch {
    struct Row {
      v1::Job job;
      int64_t number = 0;
      int64_t submitted_seq = 0;
    };
    std::vector<Row> rows;
    std::vector<v1::JobEvent> events;
    std::vector<std::string> thin;
  };
  // Writes the progress reported since the last flush (the jobs' rows and their events)
  // in one transaction. Progress is acknowledged before it is written: a coordinator
  // killed outright loses at most kProgressFlushInterval of it, and the trainers' next
  // reports carry on; submits, cancels, state changes and checkpoint commits are written
  // before they are acknowledged. Called before any other write of a job or its events,
  // it also waits for a flush the ticker is writing, so the store keeps their order.
  absl::Status flush_progress() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The ticker's flush: takes the batch under mu_ and writes it without mu_, so calls
  // are not held up by the group commit.
  void flush_progress_in_background() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  ProgressBatch take_progress() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status write_progress(const ProgressBatch& batch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(flush_mu_);
  // A batch that could not be written is pending again (its events ahead of newer ones).
  void return_progress(ProgressBatch batch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes `next` (the job after a change) and `events` in one transaction (after the
  // progress pending), then makes `next` the job in memory and wakes watchers.
  absl::Status commit(ActiveJob& active, v1::Job next, std::vector<v1::JobEvent> events)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job of a request, checked against the caller (NOT_FOUND for another user's job).
  absl::StatusOr<v1::Job> visible_job(const Principal& who, const std::string& job_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Records `folder` as job_id's checkpoint folder, unless it lies inside another job's.
  // Refuses a job whose ranks need more memory than any registered worker of its kind
  // offers, with the numbers (SubmitJobRequest.queue_anyway skips this).
  // fp8.amax_init_from names a job the submitter may see, with the same linear layers and
  // amax histories to start from.
  absl::Status check_amax_source(const Principal& who, const v1::JobSpec& spec) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status check_some_worker_holds(const v1::JobSpec& spec, double rank_memory_gb) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status claim_job_folder(const std::string& folder, const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  void schedule_locked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fills job.pending_reason for a QUEUED or RESTARTING job: its restart backoff, or why
  // the last scheduling pass left it waiting.
  void show_pending(const ActiveJob& active, v1::Job& job) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status start_attempt(ActiveJob& active, const std::vector<std::string>& worker_ids)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the live attempt in `attempt_state` and moves the job on: SUCCEEDED, CANCELLED, or
  // after a failure of class `failure` RESTARTING / FAILED (restarts.on, max_restarts).
  // Stops every rank still running.
  absl::Status end_attempt(ActiveJob& active, v1::Attempt::State attempt_state, const std::string& reason,
                          const std::string& cancelled_by = "",
                          scheduler::FailureClass failure = scheduler::FailureClass::kUnknown)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status fail_attempt(ActiveJob& active, const std::string& reason, scheduler::FailureClass failure)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return end_attempt(active, v1::Attempt::FAILED, reason, "", failure);
  }
  // StartRank for one rank of the job's attempt `attempt` (advertise_address_ read).
  v1::StartRank make_start_rank(const v1::Job& job, int attempt, int rank, int world_size, int64_t resume_step,
                              const std::string& trainer_token) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void queue_stop(Worker& worker, const std::string& job_id, int attempt, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void forget_final_job(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops a rank from its worker's `assigned` (the worker may be gone).
  void unassign(const std::string& worker_id, const std::string& job_id, int attempt, int rank)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void check_liveness() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the attempts with a rank that reported no progress within its timeout (hung).
  void check_progress() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What a heartbeat (or a re-registration) says about the worker's ranks: marks them
  // seen, stops ranks of ended attempts, starts again ranks it should run but does not,
  // and moves attempts whose ranks all run to RUNNING.
  absl::Status observe_ranks(Worker& worker, const google::protobuf::RepeatedPtrField<v1::RankStatus>& ranks)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void resend_missing_starts(Worker& worker) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool worker_busy(const Worker& worker) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<Worker*> calling_worker(const Principal& who, const std::string& worker_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The live attempt a trainer call is about: PERMISSION_DENIED when the caller may not
  // speak for that rank, FAILED_PRECONDITION when the attempt has ended.
  absl::StatusOr<ActiveJob*> trainer_target(const Principal& who, const v1::RankRef& caller)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void record_numerics(ActiveJob& active, v1::NumericsEvent event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  absl::CondVar events_changed_;
  std::unique_ptr<store::CoordinatorStore> store_ ABSL_GUARDED_BY(mu_);
  RendezvousStore& rendezvous_;
  const CoordinatorOptions options_;
  CoordinatorMetrics* metrics_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::string advertise_address_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, ActiveJob> active_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Worker> workers_ ABSL_GUARDED_BY(mu_);
  // Token hash -> who, for tokens seen before: every call authenticates, and a store read
  // per call would serialise on the lock. Tokens are never revoked but trainer tokens,
  // which EndAttempt drops from here and from the store together.
  std::map<std::string, Principal> principals_ ABSL_GUARDED_BY(mu_);
  int64_t event_generation_ ABSL_GUARDED_BY(mu_) = 0;
  // Progress acknowledged and not yet written (FlushProgress): the events in order, and
  // the jobs whose rows changed.
  std::vector<v1::JobEvent> pending_progress_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> progress_dirty_ ABSL_GUARDED_BY(mu_);
  // Held while progress is written, on a connection of its own: the ticker writes
  // without mu_, and a flush under mu_ waits here for the ticker's to end first.
  absl::Mutex flush_mu_ ABSL_ACQUIRED_AFTER(mu_);
  std::unique_ptr<store::CoordinatorStore> progress_store_ ABSL_GUARDED_BY(flush_mu_);
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  std::thread ticker_;
};

// How often the progress acknowledged meanwhile is written (Coordinator::flush_progress).
inline constexpr absl::Duration kProgressFlushInterval = absl::Milliseconds(50);

// "job-7/attempt-2/": the rendezvous namespace of an attempt.
std::string rendezvous_namespace(const std::string& job_id, int attempt);

}  // namespace fp8::server
