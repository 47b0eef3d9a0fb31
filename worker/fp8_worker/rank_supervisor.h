// The rank processes of this worker, keyed by (job, attempt, rank): starts them on
// StartRank, stops them on StopRank (SIGTERM, SIGKILL after the grace), and turns their
// exits into reports. Single-threaded: the session loop calls everything here; the only
// other threads are each process's output reader and the log forwarder.
//
// Nothing here blocks: a stop sets a deadline that poll() enforces, and exits are found
// with waitpid(WNOHANG) on each poll(), so no zombie outlives the next poll.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fp8/v1/worker_service.pb.h"
#include "worker/fp8_worker/log_forwarder.h"
#include "worker/fp8_worker/rank_key.h"
#include "worker/fp8_worker/rank_process.h"
#include "worker/fp8_worker/worker_config.h"

namespace fp8::worker {

// One rank's end, as ReportRankExit carries it.
struct RankExit {
  RankKey key;
  std::optional<int> exit_code;  // exactly one of exit_code and signal is set
  std::optional<int> signal;
  std::string message;  // last line of its output, or the spawn error; <= 4096 bytes
  // What the rank was when it ended (heartbeats carry it until the exit is reported).
  v1::RankStatus last_status;
};

class RankSupervisor {
 public:
  using Clock = std::chrono::steady_clock;

  // forwarder may be null (no log forwarding). base_env: the environment ranks inherit.
  RankSupervisor(WorkerConfig config, LogForwarder* forwarder, std::vector<std::string> base_env);
  // Ranks still running are killed (see ~RankProcess).
  ~RankSupervisor();

  // Writes the spec to <rank dir>/job.yaml and spawns the trainer. A rank already running
  // is left alone (a repeated command); one that cannot be started becomes an exit with
  // code 127 and the reason.
  void start(const v1::StartRank& start);
  // Every rank of the attempt: SIGTERM now and SIGKILL grace_seconds later (at once for 0).
  // A second stop can shorten the grace, never lengthen it.
  void stop(const std::string& job_id, int attempt, int grace_seconds, const std::string& reason);
  void stop_all(int grace_seconds, const std::string& reason);

  // Reaps exited ranks, sends the SIGKILLs that are due. Call often (every ~50 ms).
  void poll();
  // The exits found since the last call, in the order found.
  std::vector<RankExit> take_exits();
  // Whether an exited rank's output has all gone to the coordinator (or been dropped):
  // once every rank has exited the attempt ends and its token, which the log calls use,
  // is revoked, so its exit is reported after them.
  bool logs_delivered(const RankKey& key) const;

  // Ranks not yet exited (as heartbeats and re-registration carry them).
  std::vector<v1::RankStatus> statuses() const;
  bool empty() const { return ranks_.empty(); }
  size_t size() const { return ranks_.size(); }

 private:
  struct Rank {
    std::unique_ptr<RankProcess> process;
    std::optional<Clock::time_point> kill_at;  // set once stopping
    bool killed = false;
  };

  v1::RankStatus status_of(const RankKey& key, const Rank& r) const;
  void spawn_failed(const RankKey& key, const std::string& why, int exit_code);
  void stop_rank(Rank& r, int grace_seconds);

  const WorkerConfig config_;
  LogForwarder* const forwarder_;
  const std::vector<std::string> base_env_;
  std::map<RankKey, Rank> ranks_;
  std::vector<RankExit> exits_;
};

}  // namespace fp8::worker
