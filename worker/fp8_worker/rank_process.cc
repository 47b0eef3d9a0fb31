#include "worker/fp8_worker/rank_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "worker/fp8_worker/line_text.h"

namespace fp8::worker {
namespace {

// How long to keep reading after the child was reaped, for output still in the pipe
// when a grandchild holds its write end open.
constexpr std::chrono::seconds kDrainAfterExit{2};

std::string errno_text(int err) { return std::strerror(err); }

// RAII for the posix_spawn attribute objects.
struct SpawnSetup {
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  SpawnSetup() {
    posix_spawn_file_actions_init(&actions);
    posix_spawnattr_init(&attr);
  }
  ~SpawnSetup() {
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
  }
};

std::vector<char*> c_strings(const std::vector<std::string>& v) {
  std::vector<char*> out;
  out.reserve(v.size() + 1);
  for (const std::string& s : v) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<RankProcess>> RankProcess::spawn(const std::vector<std::string>& argv,
                                                                 const std::vector<std::string>& env,
                                                                 const std::string& log_path, LineSink sink) {
  if (argv.empty()) return absl::InvalidArgumentError("no program to run");
  const int log_fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) return absl::InternalError(absl::StrCat("cannot open ", log_path, ": ", errno_text(errno)));
  int fds[2];
  // Close-on-exec, so that no other child (spawned concurrently) inherits this pipe.
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    const int err = errno;
    ::close(log_fd);
    return absl::InternalError(absl::StrCat("cannot create a pipe for ", argv[0], ": ", errno_text(err)));
  }

  SpawnSetup s;
  posix_spawn_file_actions_addopen(&s.actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&s.actions, fds[1], 1);
  posix_spawn_file_actions_adddup2(&s.actions, fds[1], 2);
  // Nothing of the daemon's (gRPC sockets, other ranks' pipes and logs) leaks into a rank.
  posix_spawn_file_actions_addclosefrom_np(&s.actions, 3);
  posix_spawnattr_setpgroup(&s.attr, 0);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&s.attr, &none);
  // The daemon's handlers and ignored signals are not the trainer's.
  sigset_t defaults;
  sigemptyset(&defaults);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGCHLD, SIGUSR1, SIGUSR2}) sigaddset(&defaults, sig);
  posix_spawnattr_setsigdefault(&s.attr, &defaults);
  posix_spawnattr_setflags(&s.attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

  std::vector<char*> c_argv = c_strings(argv);
  std::vector<char*> c_env = c_strings(env);
  pid_t pid = -1;
  const int err = ::posix_spawn(&pid, argv[0].c_str(), &s.actions, &s.attr, c_argv.data(), c_env.data());
  ::close(fds[1]);
  if (err != 0) {
    ::close(fds[0]);
    ::close(log_fd);
    return absl::FailedPreconditionError(absl::StrCat("cannot run ", argv[0], ": ", errno_text(err)));
  }
  return std::unique_ptr<RankProcess>(new RankProcess(pid, fds[0], log_fd, std::move(sink)));
}

RankProcess::RankProcess(pid_t pid, int pipe_fd, int log_fd, LineSink sink)
    : pid_(pid), pipe_fd_(pipe_fd), log_fd_(log_fd), sink_(std::move(sink)) {
  reader_ = std::thread([this] { read_loop(); });
}

RankProcess::~RankProcess() {
  if (!reaped_) {
    ::kill(-pid_, SIGKILL);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
  stop_reader();
  ::close(pipe_fd_);
  ::close(log_fd_);
}

void RankProcess::signal(int sig) {
  if (reaped_) return;
  // The group id is the child's pid (setpgroup 0); the child itself may have left the
  // group, so signal it directly too.
  ::kill(-pid_, sig);
  ::kill(pid_, sig);
}

std::optional<ProcessExit> RankProcess::poll() {
  if (finished_) return exit_;
  if (!reaped_) {
    int status = 0;
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == 0 || (r < 0 && errno == EINTR)) return std::nullopt;
    reaped_ = true;
    reaped_at_ = std::chrono::steady_clock::now();
    if (r < 0) {  // ECHILD: someone else reaped it; say so rather than guess
      exit_.exit_code = 127;
    } else if (WIFSIGNALED(status)) {
      exit_.signal = WTERMSIG(status);
    } else {
      exit_.exit_code = WEXITSTATUS(status);
    }
    // Whatever the rank started dies with it; that also closes the pipe's last writers.
    ::kill(-pid_, SIGKILL);
  }
  if (!reader_done_.load() && std::chrono::steady_clock::now() - reaped_at_ < kDrainAfterExit) return std::nullopt;
  stop_reader();
  finished_ = true;
  return exit_;
}

std::string RankProcess::last_line() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_line_;
}

void RankProcess::stop_reader() {
  stop_reader_.store(true);
  if (reader_.joinable()) reader_.join();
}

void RankProcess::handle_line(absl::string_view raw) {
  std::optional<log::Record> record = log::read_json_line(raw);
  const std::string line = clean_line(record ? absl::string_view(record->message) : raw);
  lines_.fetch_add(1);
  if (has_text(line)) {
    std::lock_guard<std::mutex> lock(mu_);
    last_line_ = line;
  }
  if (!sink_) return;
  if (record) {
    sink_(line, record->time_unix_ms, record->level);
  } else {
    sink_(line, absl::ToUnixMillis(absl::Now()), std::nullopt);
  }
}

void RankProcess::read_loop() {
  std::string pending;  // bytes of a line not yet ended by '\n'
  char buf[16384];
  // poll() with a timeout rather than a blocking read, so that stop_reader() is heard even
  // when the pipe never reaches end of file.
  while (!stop_reader_.load()) {
    pollfd p{pipe_fd_, POLLIN, 0};
    const int ready = ::poll(&p, 1, 100);
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;
    const ssize_t n = ::read(pipe_fd_, buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) break;  // end of file: every writer is gone
    // The log gets the bytes as they came, whole lines or not.
    for (ssize_t off = 0; off < n;) {
      const ssize_t w = ::write(log_fd_, buf + off, static_cast<size_t>(n - off));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) break;  // disk full: keep reading so the child never blocks
      off += w;
    }
    pending.append(buf, static_cast<size_t>(n));
    size_t start = 0;
    for (size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1) {
      handle_line(absl::string_view(pending).substr(start, nl - start));
    }
    pending.erase(0, start);
    // A "line" without a newline for this long is forwarded in pieces.
    if (pending.size() > 64 * 1024) {
      handle_line(pending);
      pending.clear();
    }
  }
  if (!pending.empty()) handle_line(pending);
  reader_done_.store(true);
}

}  // namespace fp8::worker
