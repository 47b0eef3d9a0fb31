// Rank output to the coordinator: TrainerService.AppendLogs, batched per rank, sent from
// a background thread about once a second.
//
// Logs are best effort: the rank's output.log on the worker is the record. So a failed
// call drops its lines (one warning per rank, not one per call), a rank writing faster
// than the coordinator takes loses its oldest buffered lines, and nothing here ever
// blocks a rank's output reader or the session loop for longer than a mutex.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/log/log.h"
#include "fp8/v1/trainer_service.pb.h"
#include "worker/fp8_worker/rank_key.h"

namespace fp8::worker {

inline constexpr int kMaxLinesPerAppend = 500;  // trainer_service.proto

class LogForwarder {
 public:
  // Sends one AppendLogs call to coordinator_address with trainer_token as the bearer.
  using Sender = std::function<absl::Status(const std::string& coordinator_address,
                                            const std::string& trainer_token, const v1::AppendLogsRequest&)>;

  struct Options {
    absl::Duration interval = absl::Seconds(1);
    // Per rank; past it the oldest lines go.
    size_t max_buffered_lines = 20000;
    // false: no thread; the owner calls flush_once() (tests).
    bool background = true;
  };

  LogForwarder(Sender sender, Options options);
  // Stops the thread after one last pass.
  ~LogForwarder();
  LogForwarder(const LogForwarder&) = delete;
  LogForwarder& operator=(const LogForwarder&) = delete;

  // Starts buffering for a rank. The token is kept in memory only.
  void open(const RankKey& key, const std::string& coordinator_address, const std::string& trainer_token);
  // Thread-safe; lines of a rank not opened are dropped.
  void append(const RankKey& key, absl::string_view line, int64_t time_unix_ms,
              std::optional<log::Level> level = std::nullopt);
  // The rank has ended: its remaining lines go out with a pass started now (with the
  // background thread), then it is forgotten.
  void close(const RankKey& key);
  // Whether every line of the rank has been sent (or dropped): nothing buffered, no call
  // in flight. The rank's exit report waits for this, so that its last lines reach the
  // coordinator before the attempt, and the token they use, can end.
  bool delivered(const RankKey& key);

  // One pass over every rank: at most one call of <= 500 lines per rank, so that one
  // chatty rank cannot starve the others.
  void flush_once();

 private:
  struct Stream {
    std::string address;
    std::string token;
    std::deque<v1::LogLine> lines;
    bool closed = false;
    bool warned = false;  // a failed call or an overflow was reported once
    int sending = 0;      // calls in flight with its lines
  };

  void run();

  const Sender sender_;
  const Options options_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;
  bool flush_now_ = false;  // a stream was closed: pass at once rather than at the interval
  std::map<RankKey, Stream> streams_;
  std::mutex flush_mu_;  // one pass at a time
  std::thread thread_;
};

}  // namespace fp8::worker
