// fp8ctl logs ID: what the ranks printed (the workers forward it to the coordinator).
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "client/fp8ctl/exit_codes.h"
#include "client/fp8ctl/format.h"
#include "client/fp8ctl/output.h"
#include "client/fp8ctl/verbs/verbs.h"

namespace fp8::ctl {
namespace {

constexpr std::chrono::seconds kPollEvery{1};
constexpr int kMaxTail = 10000;

// -f asks for the newest lines every second; this remembers, per (attempt, rank), the time
// of the newest line printed and how often each text was printed at that time, so that a
// line is printed once however the windows overlap (and a line repeated within one
// millisecond still prints as often as it was written). A rank's lines arrive in order.
class SeenLines {
 public:
  // The lines of `r` not printed before, oldest first.
  std::vector<const v1::JobLogLine*> Select(const v1::GetJobLogsResponse& r) {
    for (auto& [key, n] : newest_) n.in_response.clear();
    std::vector<const v1::JobLogLine*> fresh;
    for (const v1::JobLogLine& l : r.lines()) {
      Newest& n = newest_[{l.attempt(), l.rank()}];
      const int64_t t = l.line().time_unix_ms();
      if (t < n.time) continue;
      if (t > n.time) {
        n.time = t;
        n.printed.clear();
        n.in_response.clear();
      }
      if (++n.in_response[l.line().text()] > n.printed[l.line().text()]) {
        ++n.printed[l.line().text()];
        fresh.push_back(&l);
      }
    }
    return fresh;
  }

 private:
  struct Newest {
    int64_t time = -1;
    std::map<std::string, int> printed;      // texts printed at `time`
    std::map<std::string, int> in_response;  // texts at `time` in the response being read
  };
  std::map<std::pair<int32_t, int32_t>, Newest> newest_;
};

void PrintLine(const v1::JobLogLine& l, bool one_rank) {
  if (one_rank) {
    std::cout << l.line().text() << "\n";
  } else {
    std::cout << "[rank " << l.rank() << "] " << l.line().text() << "\n";
  }
}

}  // namespace

Verb AddLogsVerb(CLI::App& app) {
  struct Args {
    std::string job_id;
    int attempt = 0;
    int rank = -1;
    int tail = 100;
    bool follow = false;
    OutputFormat output = OutputFormat::kTable;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("logs", "print the newest log lines of a job's ranks");
  cmd->fallthrough();
  cmd->add_option("ID", a->job_id, "job id (job-<n>)")->required();
  cmd->add_option("--attempt", a->attempt, "attempt number (default: the newest)")->check(CLI::NonNegativeNumber);
  CLI::Option* rank = cmd->add_option("--rank", a->rank, "only this rank (default: every rank, merged by time)")
                          ->check(CLI::NonNegativeNumber);
  cmd->add_option("--tail", a->tail, "newest lines to print, 1-10000 (default 100)")->check(CLI::Range(1, kMaxTail));
  cmd->add_flag("-f,--follow", a->follow, "keep printing new lines every second until the job ends");
  AddOutputFlag(cmd, &a->output);

  return {cmd, [a, rank](Session& session) {
            if (a->follow && a->output != OutputFormat::kTable) {
              return Report({kExitUsage, "logs: --follow prints text; it does not combine with --output"});
            }
            if (auto e = session.Connect()) return Report(*e);
            const std::string what = absl::StrCat("logs ", a->job_id);
            const bool one_rank = rank->count() > 0;
            v1::GetJobLogsRequest req;
            req.set_job_id(a->job_id);
            req.set_attempt(a->attempt);
            if (one_rank) req.set_rank(a->rank);
            req.set_tail_lines(a->tail);

            auto fetch = [&](v1::GetJobLogsResponse* r) {
              auto ctx = session.Context();
              return session.stub().GetJobLogs(ctx.get(), req, r);
            };
            v1::GetJobLogsResponse first;
            if (grpc::Status s = fetch(&first); !s.ok()) return Report(session.Error(s, what));
            if (a->output != OutputFormat::kTable) return PrintMessage(first, a->output);
            SeenLines seen;
            for (const v1::JobLogLine* l : seen.Select(first)) PrintLine(*l, one_rank);
            std::cout.flush();
            if (!a->follow) return static_cast<int>(kExitOk);

            // Later polls take the widest window so that a busy second loses nothing.
            req.set_tail_lines(kMaxTail);
            while (true) {
              // Whether the job had ended is read before the logs, so that the lines written
              // up to its end are in the last fetch.
              v1::GetJobRequest get;
              get.set_job_id(a->job_id);
              v1::Job job;
              auto ctx = session.Context();
              if (grpc::Status s = session.stub().GetJob(ctx.get(), get, &job); !s.ok()) {
                return Report(session.Error(s, what));
              }
              v1::GetJobLogsResponse r;
              if (grpc::Status s = fetch(&r); !s.ok()) return Report(session.Error(s, what));
              for (const v1::JobLogLine* l : seen.Select(r)) PrintLine(*l, one_rank);
              std::cout.flush();
              if (IsFinal(job.state())) return static_cast<int>(kExitOk);
              std::this_thread::sleep_for(kPollEvery);
            }
          }};
}

}  // namespace fp8::ctl
