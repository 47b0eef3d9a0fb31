#include "tests/engine/collectives/multi_process.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <fstream>
#include <iterator>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace fp8::engine::collectives::test {
namespace {

std::string report_path(const std::string& dir, int rank) { return absl::StrCat(dir, "/report-", rank); }

// "<length>\n<bytes>" twice: errors, then output.
void write_report(const std::string& dir, int rank, const RankReport& report) {
  std::ofstream out(report_path(dir, rank), std::ios::binary | std::ios::trunc);
  out << report.errors.size() << '\n' << report.errors << report.output.size() << '\n' << report.output;
}

bool read_report(const std::string& dir, int rank, RankReport& report) {
  std::ifstream in(report_path(dir, rank), std::ios::binary);
  if (!in) return false;
  auto read_field = [&](std::string& field) {
    size_t length = 0;
    if (!(in >> length) || in.get() != '\n') return false;
    field.resize(length);
    return static_cast<bool>(in.read(field.data(), static_cast<std::streamsize>(length)));
  };
  return read_field(report.errors) && read_field(report.output);
}

void record_end(RankOutcome& outcome, int status) {
  if (WIFEXITED(status)) {
    outcome.exited = true;
    outcome.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    outcome.term_signal = WTERMSIG(status);
  }
}

}  // namespace

std::string RankOutcome::problems() const {
  if (hung) return absl::StrCat("rank ", rank, " hung (still running at the deadline; killed)");
  if (term_signal != 0) return absl::StrCat("rank ", rank, " was killed by signal ", term_signal);
  if (!exited || exit_code != 0) return absl::StrCat("rank ", rank, " exited with code ", exit_code);
  if (!reported) return absl::StrCat("rank ", rank, " left no report");
  if (!report.errors.empty()) return absl::StrCat("rank ", rank, ": ", report.errors);
  return "";
}

std::vector<RankOutcome> run_ranks(int world, const std::function<RankReport(int rank)>& body,
                                   const std::string& report_dir, const RunOptions& options) {
  // Buffered output would be printed once by the parent and again by every child.
  std::fflush(stdout);
  std::fflush(stderr);

  std::vector<RankOutcome> outcomes(static_cast<size_t>(world));
  std::vector<pid_t> pids(static_cast<size_t>(world), -1);
  std::vector<bool> running(static_cast<size_t>(world), false);
  for (int r = 0; r < world; ++r) {
    outcomes[static_cast<size_t>(r)].rank = r;
    const pid_t pid = ::fork();
    if (pid == 0) {
      RankReport report;
      try {
        report = body(r);
      } catch (const std::exception& e) {
        report.errors = absl::StrCat("exception: ", e.what());
      } catch (...) {
        report.errors = "unknown exception";
      }
      write_report(report_dir, r, report);
      // _exit: no atexit handlers, no gtest teardown, no flushing of the parent's buffers.
      ::_exit(0);
    }
    pids[static_cast<size_t>(r)] = pid;
    running[static_cast<size_t>(r)] = pid > 0;
  }

  const auto is_left_behind = [&](int r) {
    return std::find(options.left_behind.begin(), options.left_behind.end(), r) != options.left_behind.end();
  };
  const auto kill_and_reap = [&](int r) {
    const pid_t pid = pids[static_cast<size_t>(r)];
    ::kill(pid, SIGCONT);
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    record_end(outcomes[static_cast<size_t>(r)], status);
    running[static_cast<size_t>(r)] = false;
  };

  const absl::Time start = absl::Now();
  for (;;) {
    for (int r = 0; r < world; ++r) {
      if (!running[static_cast<size_t>(r)]) continue;
      int status = 0;
      if (::waitpid(pids[static_cast<size_t>(r)], &status, WNOHANG) == pids[static_cast<size_t>(r)]) {
        record_end(outcomes[static_cast<size_t>(r)], status);
        running[static_cast<size_t>(r)] = false;
      }
    }
    bool others_done = true;
    for (int r = 0; r < world; ++r) others_done &= !running[static_cast<size_t>(r)] || is_left_behind(r);
    if (others_done) {
      for (int r = 0; r < world; ++r) {
        if (running[static_cast<size_t>(r)]) kill_and_reap(r);
      }
      break;
    }
    if (absl::Now() - start > options.deadline) {
      for (int r = 0; r < world; ++r) {
        if (!running[static_cast<size_t>(r)]) continue;
        outcomes[static_cast<size_t>(r)].hung = !is_left_behind(r);
        kill_and_reap(r);
      }
      break;
    }
    absl::SleepFor(absl::Milliseconds(5));
  }

  for (int r = 0; r < world; ++r) {
    RankOutcome& outcome = outcomes[static_cast<size_t>(r)];
    outcome.reported = read_report(report_dir, r, outcome.report);
  }
  return outcomes;
}

}  // namespace fp8::engine::collectives::test
