// Running an executable as a child process for the CLI tests: posix_spawn with stdin
// from /dev/null and stdout/stderr written to files, which the test can read while the
// child runs (fp8-train flushes every line) and after it exits.
#pragma once

#include <sys/types.h>

#include <ctime>

#include <chrono>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace fp8::cli_test {

// How a child ended.
struct ExitInfo {
  bool exited = false;   // returned from main / called exit: `code` is its status
  int code = -1;
  int signal = 0;        // killed by this signal (when !exited)
  bool timed_out = false;  // the test killed it after the time limit

  std::string describe() const;  // "exit 2", "killed by signal 9", "timed out"
};

std::string read_file(const std::filesystem::path& file);

class Subprocess {
 public:
  // Starts `argv` (argv[0] an absolute path) with the parent's environment plus `env`
  // (which replaces variables of the same name). stdout and stderr go to the files.
  Subprocess(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
             std::filesystem::path stdout_file, std::filesystem::path stderr_file);
  ~Subprocess();  // kills and reaps a child still running
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  bool started() const { return pid_ > 0; }
  const std::string& start_error() const { return start_error_; }
  pid_t pid() const { return pid_; }

  // Sends `sig` to the child if it has not been reaped yet.
  void signal(int sig);
  // Waits up to `limit` for the child to end, then kills it (SIGKILL) and reports a timeout.
  ExitInfo wait(std::chrono::milliseconds limit);
  // Polls the captured stdout until `predicate(text)` holds (true), the child exits or
  // `limit` passes (false).
  template <typename Pred>
  bool wait_for_stdout(Pred predicate, std::chrono::milliseconds limit);

  std::string stdout_text() const { return read_file(stdout_file_); }
  std::string stderr_text() const { return read_file(stderr_file_); }

 private:
  bool running();  // reaps the child (filling exit_) when it has ended

  pid_t pid_ = -1;
  bool reaped_ = false;
  ExitInfo exit_;
  std::string start_error_;
  std::filesystem::path stdout_file_, stderr_file_;
};

template <typename Pred>
bool Subprocess::wait_for_stdout(Pred predicate, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (predicate(stdout_text())) return true;
    if (!running()) return predicate(stdout_text());
    struct timespec ts{0, 500 * 1000};  // 0.5 ms
    nanosleep(&ts, nullptr);
  }
  return false;
}

// Runs a command to the end: its exit and what it printed.
struct RunResult {
  ExitInfo exit;
  std::string out, err;
};
RunResult run(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
              const std::filesystem::path& stdout_file, const std::filesystem::path& stderr_file,
              std::chrono::milliseconds limit);

}  // namespace fp8::cli_test
