// One child process (fp8-train for one rank): spawned in its own process group, its
// stdout and stderr read line by line from a pipe, signalled as a group, reaped without
// blocking.
//
// Own process group: a Ctrl-C typed at fp8-worker's terminal goes to the terminal's
// foreground group, which must not include the ranks (the daemon decides how they stop),
// and a stop must reach whatever the trainer itself started.
//
// The pipe is read by a thread per process that appends each line to the rank's
// output.log (as written) and hands it to a LineSink (the log forwarder). The thread never blocks on
// anything but the pipe, so a slow coordinator cannot stall a trainer on a full pipe.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/log/log.h"

namespace fp8::worker {

// How a process ended: exactly one is set.
struct ProcessExit {
  std::optional<int> exit_code;
  std::optional<int> signal;
};

// Called on the reader thread with each line (without its newline, cleaned by clean_line).
// A line of the trainer's json log (common/log/log.h) comes as its message, with the time
// and level it was logged at; any other line as it is, with the time it was read at and
// no level.
using LineSink =
    std::function<void(absl::string_view line, int64_t time_unix_ms, std::optional<log::Level> level)>;

class RankProcess {
 public:
  // argv[0] must be a path (no PATH search); env is the child's whole environment
  // ("NAME=value"). log_path is created or appended to. Fails (nothing left running) when
  // the log cannot be opened or the program cannot be executed; the message says which.
  static absl::StatusOr<std::unique_ptr<RankProcess>> spawn(const std::vector<std::string>& argv,
                                                            const std::vector<std::string>& env,
                                                            const std::string& log_path, LineSink sink);

  // A process still running is killed (SIGKILL to its group) and reaped.
  ~RankProcess();
  RankProcess(const RankProcess&) = delete;
  RankProcess& operator=(const RankProcess&) = delete;

  pid_t pid() const { return pid_; }

  // Sends sig to the whole process group; nothing once the child has been reaped (its
  // ids may belong to someone else by then).
  void signal(int sig);

  // Non-blocking. The exit once the child has been reaped and its output read to the end
  // (or for at most a couple of seconds more when something it started keeps the pipe
  // open); nullopt while it runs. Once it returned an exit it returns the same again.
  std::optional<ProcessExit> poll();

  // The last line of output holding more than whitespace ("" if none yet).
  std::string last_line() const;
  // Whether the child has written anything yet.
  bool has_output() const { return lines_.load() > 0; }

 private:
  RankProcess(pid_t pid, int pipe_fd, int log_fd, LineSink sink);
  void read_loop();
  void handle_line(absl::string_view raw);
  void stop_reader();

  const pid_t pid_;
  const int pipe_fd_;
  const int log_fd_;
  const LineSink sink_;
  std::thread reader_;
  std::atomic<bool> stop_reader_{false};
  std::atomic<bool> reader_done_{false};
  std::atomic<int64_t> lines_{0};
  mutable std::mutex mu_;
  std::string last_line_;  // guarded by mu_

  bool reaped_ = false;
  ProcessExit exit_;
  std::chrono::steady_clock::time_point reaped_at_;
  bool finished_ = false;  // the reader was joined and the exit is final
};

}  // namespace fp8::worker
