#include "worker/fp8_train/local_launcher.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <system_error>
#include <thread>

#include "common/rpc/trainer_exit_codes.h"

extern char** environ;

namespace fp8::train_cli {

namespace {

std::atomic<int> g_signals{0};
std::atomic<int> g_last_signal{SIGTERM};

void count_signal(int sig) {
  g_last_signal.store(sig);
  g_signals.fetch_add(1);
}

std::string self_executable() {
  std::error_code ec;
  std::filesystem::path p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("fp8-train") : p.string();
}

struct Rank {
  pid_t pid = -1;
  bool running = false;
  int status = 0;
  bool killed_by_launcher = false;
};

// After a rank failed, how long the others get to notice on their own (a lost peer fails
// their next collective at once) before the launcher kills them: a rank that died before
// the rendezvous completed would otherwise leave the rest waiting out the whole timeout.
constexpr std::chrono::seconds kGraceAfterFailure{30};

bool failed(int status) {
  return !(WIFEXITED(status) && (WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == 130));
}

std::string describe(int status) {
  if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("killed by signal ") + std::to_string(WTERMSIG(status));
  return "status " + std::to_string(status);
}

}  // namespace

int run_local_ranks(const LocalLaunch& launch) {
  const char* tmp = std::getenv("TMPDIR");
  std::string templ = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/fp8-train-rdzv-XXXXXX";
  if (mkdtemp(templ.data()) == nullptr) {
    std::fprintf(stderr, "fp8-train: cannot create a rendezvous directory %s: %s\n", templ.c_str(),
                 std::strerror(errno));
    return 1;
  }
  const std::string rendezvous = templ;

  for (int sig : {SIGINT, SIGTERM}) {
    if (std::signal(sig, count_signal) == SIG_IGN) std::signal(sig, SIG_IGN);
  }

  const std::string exe = self_executable();
  std::vector<Rank> ranks(static_cast<size_t>(launch.nproc));
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  pid_t group = 0;  // the first rank's pid becomes the ranks' process group
  int spawn_failures = 0;
  for (int r = 0; r < launch.nproc; ++r) {
    std::vector<std::string> args{exe};
    args.insert(args.end(), launch.rank_args.begin(), launch.rank_args.end());
    for (const std::string& a : {std::string("--rank"), std::to_string(r), std::string("--world-size"),
                                 std::to_string(launch.nproc), std::string("--rendezvous"), rendezvous}) {
      args.push_back(a);
    }
    if (launch.one_gpu_per_rank) {
      args.push_back("--cuda-device");
      args.push_back(std::to_string(r));
    }
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawnattr_setpgroup(&attr, group);
    pid_t pid = -1;
    if (const int err = posix_spawn(&pid, exe.c_str(), nullptr, &attr, argv.data(), environ); err != 0) {
      std::fprintf(stderr, "fp8-train: cannot start rank %d (%s): %s\n", r, exe.c_str(), std::strerror(err));
      ++spawn_failures;
      break;
    }
    if (group == 0) group = pid;
    ranks[static_cast<size_t>(r)] = {pid, true, 0};
  }
  posix_spawnattr_destroy(&attr);
  if (spawn_failures > 0) {
    // The ranks already started would wait for the missing one until the timeout.
    for (Rank& k : ranks) {
      if (k.running) kill(k.pid, SIGKILL);
    }
  }

  int forwarded = 0;
  int running = 0;
  std::optional<std::chrono::steady_clock::time_point> first_failure;
  for (const Rank& k : ranks) running += k.running ? 1 : 0;
  while (running > 0) {
    // Forward each signal the launcher received, once, to every rank still running.
    for (const int seen = g_signals.load(); forwarded < seen; ++forwarded) {
      for (const Rank& k : ranks) {
        if (k.running) kill(k.pid, g_last_signal.load());
      }
    }
    for (Rank& k : ranks) {
      if (!k.running) continue;
      int status = 0;
      const pid_t done = waitpid(k.pid, &status, WNOHANG);
      if (done == k.pid || (done < 0 && errno == ECHILD)) {
        k.running = false;
        k.status = status;
        --running;
        if (failed(status) && !first_failure) first_failure = std::chrono::steady_clock::now();
      }
    }
    if (first_failure && std::chrono::steady_clock::now() - *first_failure > kGraceAfterFailure) {
      for (Rank& k : ranks) {
        if (!k.running || k.killed_by_launcher) continue;
        kill(k.pid, SIGKILL);
        k.killed_by_launcher = true;
      }
    }
    if (running > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }

  std::error_code ec;
  std::filesystem::remove_all(rendezvous, ec);

  bool bad_input = false, any_failed = spawn_failures > 0, stopped = false;
  int classified = 0;  // the lowest rank's exit code that names a failure class
  for (size_t r = 0; r < ranks.size(); ++r) {
    const Rank& k = ranks[r];
    if (k.pid < 0) continue;
    const int s = k.status;
    if (WIFEXITED(s) && WEXITSTATUS(s) == 0) continue;
    if (WIFEXITED(s) && WEXITSTATUS(s) == fp8::rpc::kExitStopped) {
      stopped = true;
      continue;
    }
    if (WIFEXITED(s) && WEXITSTATUS(s) == fp8::rpc::kExitConfiguration) bad_input = true;
    const bool names_class = WIFEXITED(s) && (WEXITSTATUS(s) == fp8::rpc::kExitDivergence ||
                                              WEXITSTATUS(s) == fp8::rpc::kExitOutOfMemory ||
                                              WEXITSTATUS(s) == fp8::rpc::kExitPeerLost);
    if (names_class && classified == 0) classified = WEXITSTATUS(s);
    any_failed = true;
    std::fprintf(stderr, "fp8-train: rank %zu of %d failed (%s)\n", r, launch.nproc,
                 k.killed_by_launcher ? "still running after another rank failed; killed" : describe(s).c_str());
  }
  if (bad_input) return fp8::rpc::kExitConfiguration;
  if (any_failed) return classified != 0 ? classified : 1;
  return stopped ? fp8::rpc::kExitStopped : 0;
}

}  // namespace fp8::train_cli
