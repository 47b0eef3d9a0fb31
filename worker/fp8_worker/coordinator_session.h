// fp8-worker's conversation with the coordinator (WorkerService), one thread, one loop:
//
//   register ─▶ every heartbeat_interval_ms: report pending exits, heartbeat, run the
//               returned commands in order
//   heartbeat NOT_FOUND (the coordinator forgot or lost us) ─▶ register again with
//               previous_worker_id and the ranks still running
//   UNAVAILABLE / DEADLINE_EXCEEDED (coordinator down or restarting) ─▶ ranks keep
//               running; retry with backoff (100 ms doubling to 2 s), one log line per
//               outage, carry on where it left off when it is back
//   UNAUTHENTICATED / PERMISSION_DENIED / FAILED_PRECONDITION at registration ─▶ fatal
//
// Between calls the loop polls the ranks every ~50 ms: exits are reaped and reported
// at once (the coordinator ends the attempt on the other ranks sooner), SIGKILLs fall due.
// Rank exits are reported with ReportRankExit until acknowledged, across outages; until
// then heartbeats still carry the rank.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "fp8/v1/worker_service.grpc.pb.h"
#include "worker/fp8_worker/rank_supervisor.h"
#include "worker/fp8_worker/worker_config.h"
#include "worker/fp8_worker/worker_metrics.h"

namespace fp8::worker {

struct SessionOptions {
  std::chrono::milliseconds rpc_deadline{5000};
  std::chrono::milliseconds backoff_initial{100};
  std::chrono::milliseconds backoff_max{2000};
  std::chrono::milliseconds poll_interval{50};
  // On the way out: how long to keep trying to report the ranks' exits.
  std::chrono::milliseconds shutdown_report_budget{10000};
  // How long a rank's exit report waits for its last output lines to reach the
  // coordinator (RankSupervisor::logs_delivered) before it goes without them.
  std::chrono::milliseconds logs_before_exit{3000};
  // Refusals (not outages) of one exit report before it is given up on.
  int max_report_refusals = 5;
  // Kept up to date when set (must outlive the session).
  WorkerMetrics* metrics = nullptr;
};

class CoordinatorSession {
 public:
  // ranks outlives the session. channel: to config.coordinator (see MakeCoordinatorChannel).
  CoordinatorSession(WorkerConfig config, std::shared_ptr<grpc::ChannelInterface> channel, RankSupervisor& ranks,
                     SessionOptions options = {});

  // Runs until stop_requests > 0 (a signal handler's counter), then stops every rank
  // (SIGTERM, SIGKILL after --stop-grace-default; at once when stop_requests reaches 2),
  // reports their exits within a bounded time, and returns OK. A fatal refusal by the
  // coordinator (bad token, incompatible version) also stops the ranks, and returns it.
  absl::Status run(const std::atomic<int>& stop_requests);

  const std::string& worker_id() const { return worker_id_; }

 private:
  using Clock = std::chrono::steady_clock;
  struct PendingExit {
    RankExit exit;
    int refusals = 0;
    // Reported once the rank's output has reached the coordinator, or from this time on
    // whatever it has.
    Clock::time_point report_by;
  };

  // One round of calls; returns a fatal status only.
  absl::Status tick();
  absl::Status register_self();
  // false when the coordinator could not be reached (an outage was noted).
  bool report_pending_exits();
  void heartbeat();
  void execute(const v1::WorkerCommand& command);
  void collect_exits();
  // may_report: false after a fatal refusal (the coordinator would refuse the reports too).
  void shut_down(const std::atomic<int>& stop_requests, bool may_report);
  void sleep_until_next_tick() const;

  // Bookkeeping of a call's outcome: outages and their backoff, the next tick.
  void succeeded();
  void failed(const char* call, const grpc::Status& s);
  static bool is_outage(const grpc::Status& s);

  std::unique_ptr<grpc::ClientContext> context() const;

  const WorkerConfig config_;
  const std::string target_;
  std::unique_ptr<v1::WorkerService::Stub> stub_;
  RankSupervisor& ranks_;
  const SessionOptions options_;

  std::string worker_id_;       // empty until registered
  std::string previous_id_;     // the last id we had, for re-registration
  bool registered_ = false;
  bool shutting_down_ = false;
  std::chrono::milliseconds heartbeat_interval_{1000};
  Clock::time_point next_tick_{};
  std::chrono::milliseconds backoff_;
  bool in_outage_ = false;
  Clock::time_point outage_since_{};
  std::string last_error_;  // the last non-outage error logged (logged once until it changes)
  std::vector<PendingExit> pending_;
};

}  // namespace fp8::worker
