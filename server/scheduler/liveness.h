// Liveness and restart decisions for the coordinator: small pure functions over
// heartbeat times and attempt outcomes, unit-tested without a server.
#pragma once

#include <chrono>
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
std::vector<std::string> LostWorkers(std::span<const WorkerHeartbeat> workers,
                                     LivenessClock::time_point now,
                                     LivenessClock::duration lost_after);

// Why an attempt ended early. Either way the whole attempt ends on every rank.
struct WorkerLost {
  std::string worker_id;
};
struct RankExited {
  int rank = 0;
  std::string worker_id;
  int exit_code = 0;  // non-zero; a negative value -N means killed by signal N
};
using AttemptFailure = std::variant<WorkerLost, RankExited>;

// One line for events and for the job's failure reason, e.g.
// "worker 'w2' lost (no heartbeat)" or "rank 1 on worker 'w2' exited with code 3".
std::string DescribeFailure(const AttemptFailure& failure);

struct Restart {
  int restart_number = 0;  // 1 for the first restart
  std::string reason;      // the failure that caused it
};
struct Fail {
  std::string reason;  // the failure, and that the restarts are used up
};
using AttemptDecision = std::variant<Restart, Fail>;

// After a failed attempt: restart from the last committed checkpoint while
// restarts_used < max_restarts, otherwise fail the job. max_restarts = 0 means the first
// failure is final; negative values count as 0.
AttemptDecision DecideAfterFailure(const AttemptFailure& failure, int restarts_used,
                                   int max_restarts);

}  // namespace fp8::scheduler
