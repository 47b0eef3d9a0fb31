#include "server/scheduler/liveness.h"

#include <algorithm>
#include <map>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/rpc/trainer_exit_codes.h"

namespace fp8::scheduler {

std::vector<std::string> lost_workers(std::span<const WorkerHeartbeat> workers,
                                     LivenessClock::time_point now,
                                     LivenessClock::duration lost_after) {
  std::map<std::string, LivenessClock::time_point> latest;  // sorted by id
  for (const WorkerHeartbeat& w : workers) {
    auto [it, inserted] = latest.emplace(w.id, w.last_heartbeat);
    if (!inserted) it->second = std::max(it->second, w.last_heartbeat);
  }
  std::vector<std::string> lost;
  for (const auto& [id, last] : latest) {
    // A heartbeat stamped after `now` gives a negative silence: alive.
    if (now - last > lost_after) lost.push_back(id);
  }
  return lost;
}

LivenessClock::duration progress_timeout(int64_t configured_seconds, bool reported,
                                        LivenessClock::duration longest_gap) {
  if (configured_seconds > 0) return std::chrono::seconds(configured_seconds);
  if (!reported) return kFirstReportTimeout;
  return std::clamp<LivenessClock::duration>(4 * longest_gap, kMinProgressTimeout, kMaxProgressTimeout);
}

std::string describe_failure(const AttemptFailure& failure) {
  return std::visit(
      [](const auto& f) -> std::string {
        using T = std::decay_t<decltype(f)>;
        if constexpr (std::is_same_v<T, WorkerLost>) {
          return absl::StrCat("worker '", f.worker_id, "' lost (no heartbeat)");
        } else if constexpr (std::is_same_v<T, RankHung>) {
          return absl::StrCat("rank ", f.rank, " on worker '", f.worker_id, "' hung: no progress for ",
                              std::chrono::duration_cast<std::chrono::seconds>(f.silent_for).count(),
                              " s (stopped, deadlocked, or waiting on a lost peer)");
        } else {
          if (f.exit_code < 0) {
            return absl::StrCat("rank ", f.rank, " on worker '", f.worker_id,
                                "' killed by signal ", -f.exit_code);
          }
          return absl::StrCat("rank ", f.rank, " on worker '", f.worker_id,
                              "' exited with code ", f.exit_code);
        }
      },
      failure);
}

FailureClass classify_exit_code(int exit_code) {
  if (exit_code < 0) return FailureClass::kSignal;
  switch (exit_code) {
    case rpc::kExitConfiguration:
      return FailureClass::kConfiguration;
    case rpc::kExitDivergence:
      return FailureClass::kDivergence;
    case rpc::kExitOutOfMemory:
      return FailureClass::kOutOfMemory;
    case rpc::kExitPeerLost:
      return FailureClass::kPeerLost;
    case rpc::kExitStopped:
    case 128 + 15:  // SIGTERM's conventional code
      return FailureClass::kSignal;
    default:
      return FailureClass::kUnknown;
  }
}

FailureClass classify_failure(const AttemptFailure& failure) {
  return std::visit(
      [](const auto& f) {
        using T = std::decay_t<decltype(f)>;
        if constexpr (std::is_same_v<T, WorkerLost>) {
          return FailureClass::kWorkerLost;
        } else if constexpr (std::is_same_v<T, RankHung>) {
          return FailureClass::kHung;
        } else {
          return classify_exit_code(f.exit_code);
        }
      },
      failure);
}

const char* failure_class_name(FailureClass c) {
  switch (c) {
    case FailureClass::kWorkerLost:
      return "worker_lost";
    case FailureClass::kPeerLost:
      return "peer_lost";
    case FailureClass::kSignal:
      return "signal";
    case FailureClass::kHung:
      return "hung";
    case FailureClass::kConfiguration:
      return "configuration";
    case FailureClass::kDivergence:
      return "divergence";
    case FailureClass::kOutOfMemory:
      return "out_of_memory";
    case FailureClass::kUnknown:
      break;
  }
  return "unknown";
}

AttemptDecision decide_after_failure(std::string cause, FailureClass failure, int restarts_used, int max_restarts,
                                   std::span<const FailureClass> restart_on) {
  const int allowed = std::max(max_restarts, 0);
  const int used = std::max(restarts_used, 0);
  if (std::find(restart_on.begin(), restart_on.end(), failure) == restart_on.end()) {
    return Fail{absl::StrCat(cause, "; not restarted: a ", failure_class_name(failure),
                             " failure, not in restarts.on")};
  }
  if (used < allowed) return Restart{used + 1, std::move(cause)};
  if (allowed == 0) return Fail{std::move(cause)};
  return Fail{absl::StrCat(cause, " (all ", allowed, " restarts used)")};
}

std::chrono::seconds restart_backoff(int backoff_seconds, int restart_number) {
  std::chrono::seconds delay{std::max(backoff_seconds, 0)};
  for (int i = 1; i < restart_number && delay < kMaxRestartBackoff; ++i) delay *= 2;
  return std::min(delay, kMaxRestartBackoff);
}

}  // namespace fp8::scheduler
