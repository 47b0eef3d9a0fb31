// Liveness and restart decisions for the coordinator: small pure functions over
// heartbeat times and attempt outcomes, unit-tested without a server.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <variant>
#include <vector>

namespace fp8::scheduler {

// A monotonic clock: liveness must not jump with the wall clock. Heartbeat times live
// in the coordinator's memory only; after a coordinator restart workers re-register.
using LivenessClock = std::chrono::steady_clock;

struct WorkerHeartbeat {
  std::string id;
  LivenessClock::time_point last_heartbeat;
};

// The ids of workers silent for MORE than lost_after at `now` (now - last > lost_after).
// Exactly lost_after is still alive; a heartbeat stamped after `now` is alive. Sorted by
// id, each once (a worker listed twice counts by its latest heartbeat).
std::vector<std::string> lost_workers(std::span<const WorkerHeartbeat> workers,
                                     LivenessClock::time_point now,
                                     LivenessClock::duration lost_after);

// How long a rank may go without a progress report before it counts as hung
// (train.progress_timeout_seconds, job.proto): `configured_seconds` when > 0; otherwise
// derived from the job's pace: kFirstReportTimeout before its first report, then 4x the
// longest gap between its reports so far, within [kMinProgressTimeout, kMaxProgressTimeout].
inline constexpr std::chrono::seconds kFirstReportTimeout{900};
inline constexpr std::chrono::seconds kMinProgressTimeout{120};
inline constexpr std::chrono::seconds kMaxProgressTimeout{900};
LivenessClock::duration progress_timeout(int64_t configured_seconds, bool reported,
                                        LivenessClock::duration longest_gap);

// Why an attempt ended early. Either way the whole attempt ends on every rank.
struct WorkerLost {
  std::string worker_id;
};
struct RankExited {
  int rank = 0;
  std::string worker_id;
  int exit_code = 0;  // non-zero; a negative value -N means killed by signal N
};
struct RankHung {
  int rank = 0;
  std::string worker_id;
  LivenessClock::duration silent_for{};
};
using AttemptFailure = std::variant<WorkerLost, RankExited, RankHung>;

// What kind of failure it was (job.proto, RestartPolicy.FailureClass): whether trying again
// can help. A rank's exit code says (common/rpc/trainer_exit_codes.h).
enum class FailureClass {
  kWorkerLost,
  kPeerLost,
  kSignal,
  kHung,
  kConfiguration,
  kDivergence,
  kOutOfMemory,
  kUnknown,
};
FailureClass classify_failure(const AttemptFailure& failure);
FailureClass classify_exit_code(int exit_code);  // a negative code -N: killed by signal N
// As job.yaml writes it: "worker_lost", "divergence", ...
const char* failure_class_name(FailureClass c);

// One line for events and for the job's failure reason, e.g.
// "worker 'w2' lost (no heartbeat)", "rank 1 on worker 'w2' exited with code 3" or
// "rank 0 on worker 'w1' hung: no progress for 30 s".
std::string describe_failure(const AttemptFailure& failure);

struct Restart {
  int restart_number = 0;  // 1 for the first restart
  std::string reason;      // the failure that caused it
};
struct Fail {
  std::string reason;  // the failure, and why it is not restarted
};
using AttemptDecision = std::variant<Restart, Fail>;

// After a failed attempt described by `cause`, of class `failure`: restart from the last
// committed checkpoint while the class is one of `restart_on` (restarts.on) and
// restarts_used < max_restarts, otherwise fail the job. max_restarts = 0 means the first
// failure is final; negative values count as 0.
AttemptDecision decide_after_failure(std::string cause, FailureClass failure, int restarts_used, int max_restarts,
                                   std::span<const FailureClass> restart_on);

// Seconds before restart number `restart_number` (1 for the first): backoff_seconds,
// doubling for each later restart, at most kMaxRestartBackoff.
inline constexpr std::chrono::seconds kMaxRestartBackoff{3600};
std::chrono::seconds restart_backoff(int backoff_seconds, int restart_number);

}  // namespace fp8::scheduler
