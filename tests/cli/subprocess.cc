#include "tests/cli/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

extern char** environ;

namespace fp8::cli_test {

std::string ExitInfo::describe() const {
  if (timed_out) return "timed out (killed)";
  if (exited) return "exit " + std::to_string(code);
  if (signal != 0) return "killed by signal " + std::to_string(signal) + " (" + strsignal(signal) + ")";
  return "not finished";
}

std::string read_file(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

Subprocess::Subprocess(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                       std::filesystem::path stdout_file, std::filesystem::path stderr_file)
    : stdout_file_(std::move(stdout_file)), stderr_file_(std::move(stderr_file)) {
  std::map<std::string, std::string> merged;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string kv = *e;
    const size_t eq = kv.find('=');
    if (eq != std::string::npos) merged[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : env) merged[k] = v;
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : merged) env_strings.push_back(k + "=" + v);

  std::vector<char*> c_argv, c_env;
  for (const std::string& a : argv) c_argv.push_back(const_cast<char*>(a.c_str()));
  c_argv.push_back(nullptr);
  for (const std::string& e : env_strings) c_env.push_back(const_cast<char*>(e.c_str()));
  c_env.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, stdout_file_.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, stderr_file_.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  // The child starts with default dispositions for the signals the tests send and nothing
  // blocked, whatever the test runner set up (a background shell ignores SIGINT).
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t defaults, empty;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGINT);
  sigaddset(&defaults, SIGTERM);
  sigemptyset(&empty);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setsigmask(&attr, &empty);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);

  pid_t pid = -1;
  const int rc = posix_spawn(&pid, c_argv[0], &actions, &attr, c_argv.data(), c_env.data());
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    start_error_ = std::string("posix_spawn ") + argv[0] + ": " + std::strerror(rc);
    return;
  }
  pid_ = pid;
}

Subprocess::~Subprocess() {
  if (pid_ > 0 && !reaped_) {
    ::kill(pid_, SIGKILL);
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
}

bool Subprocess::running() {
  if (pid_ <= 0 || reaped_) return false;
  int status = 0;
  pid_t r;
  do {
    r = waitpid(pid_, &status, WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == 0) return true;
  reaped_ = true;
  if (r < 0) return false;  // not our child any more: nothing to report
  if (WIFEXITED(status)) {
    exit_.exited = true;
    exit_.code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    exit_.signal = WTERMSIG(status);
  }
  return false;
}

void Subprocess::signal(int sig) {
  if (pid_ > 0 && !reaped_) ::kill(pid_, sig);
}

ExitInfo Subprocess::wait(std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (running()) {
    if (std::chrono::steady_clock::now() >= deadline) {
      ::kill(pid_, SIGKILL);
      int status = 0;
      while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
      }
      reaped_ = true;
      exit_ = ExitInfo{};
      exit_.timed_out = true;
      return exit_;
    }
    struct timespec ts{0, 1000 * 1000};  // 1 ms
    nanosleep(&ts, nullptr);
  }
  return exit_;
}

RunResult run(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
              const std::filesystem::path& stdout_file, const std::filesystem::path& stderr_file,
              std::chrono::milliseconds limit) {
  RunResult r;
  Subprocess child(argv, env, stdout_file, stderr_file);
  if (!child.started()) {
    r.err = child.start_error();
    return r;
  }
  r.exit = child.wait(limit);
  r.out = child.stdout_text();
  r.err = child.stderr_text();
  return r;
}

}  // namespace fp8::cli_test
