// Runs the ranks of a test as real processes: fork() one child per rank, each runs the same
// body with its rank, and the parent collects what each reported and how it ended.
//
// Children cannot use gtest assertions (their failures would stay in the child), so a
// body returns its complaints as text ("" = all good) plus any output the parent wants to
// compare across ranks. Fork before the parent creates any Gloo context or thread: a child
// of a multi-threaded parent inherits locks held by threads that do not exist in it.
//
// The parent never hangs: ranks still running at the deadline are killed and reported as
// hung, which fails the test with a message instead of stalling ctest.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace fp8::engine::collectives::test {

struct RankReport {
  std::string errors;  // empty when every check in the child passed
  std::string output;  // free-form, for comparisons across ranks
};

struct RankOutcome {
  int rank = -1;
  bool exited = false;      // exit() / _exit(): exit_code is valid
  int exit_code = -1;
  int term_signal = 0;      // killed by this signal
  bool hung = false;        // still running at the deadline (then killed)
  bool reported = false;    // the body returned and its report arrived
  RankReport report;

  // "" when the rank exited normally with no complaints; else what went wrong.
  std::string problems() const;
};

struct RunOptions {
  // Ranks still running this long after the start count as hung.
  absl::Duration deadline = absl::Seconds(25);
  // Ranks the test stops or strands on purpose: once every other rank has ended, they are
  // killed (SIGKILL, after SIGCONT) without being reported as hung.
  std::vector<int> left_behind;
};

// `report_dir` must exist; each child writes its report there.
std::vector<RankOutcome> run_ranks(int world, const std::function<RankReport(int rank)>& body,
                                   const std::string& report_dir, const RunOptions& options = {});

}  // namespace fp8::engine::collectives::test
