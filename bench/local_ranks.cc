#include "bench/local_ranks.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

namespace fp8::bench {

namespace {

std::string describe(int status) {
  if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
  return "status " + std::to_string(status);
}

[[noreturn]] void child(int rank, const std::filesystem::path& dir,
                        const std::function<int(int, const std::filesystem::path&)>& rank_main) {
  int code = 3;
  try {
    code = rank_main(rank, dir);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
  }
  std::fflush(nullptr);
  // _exit: the parent's static objects and atexit handlers were copied, not owned.
  _exit(code);
}

}  // namespace

bool run_local_ranks(int n, const std::function<int(int rank, const std::filesystem::path& dir)>& rank_main,
                     const std::function<void(const std::filesystem::path& dir)>& after) {
  const char* tmp = std::getenv("TMPDIR");
  std::string templ = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/fp8-bench-ranks-XXXXXX";
  if (mkdtemp(templ.data()) == nullptr) {
    std::fprintf(stderr, "error: cannot create a directory %s: %s\n", templ.c_str(), std::strerror(errno));
    return false;
  }
  const std::filesystem::path dir = templ;

  std::fflush(nullptr);  // nothing buffered in the parent is written once per child
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    const pid_t pid = fork();
    if (pid == 0) child(r, dir, rank_main);
    if (pid < 0) {
      std::fprintf(stderr, "error: cannot fork rank %d: %s\n", r, std::strerror(errno));
      break;
    }
    pids.push_back(pid);
  }

  bool ok = static_cast<int>(pids.size()) == n;
  std::vector<bool> running(pids.size(), true);
  size_t left = pids.size();
  auto kill_the_rest = [&] {
    for (size_t r = 0; r < pids.size(); ++r) {
      if (running[r]) kill(pids[r], SIGKILL);
    }
  };
  if (!ok) kill_the_rest();
  while (left > 0) {
    for (size_t r = 0; r < pids.size(); ++r) {
      if (!running[r]) continue;
      int status = 0;
      if (waitpid(pids[r], &status, WNOHANG) != pids[r]) continue;
      running[r] = false;
      --left;
      if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
      if (ok) std::fprintf(stderr, "error: rank %zu of %d failed (%s)\n", r, n, describe(status).c_str());
      ok = false;
      kill_the_rest();
    }
    if (left > 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }

  if (ok && after) after(dir);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return ok;
}

}  // namespace fp8::bench
