// fp8ctl logs ID: what the ranks printed (the workers forward it to the coordinator).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <thread>
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

// A warning or an error of the trainer's log says so, as fp8-train's own console did;
// info lines and lines without a level print as they are.
absl::string_view level_mark(v1::LogLine::Level level) {
  switch (level) {
    case v1::LogLine::LEVEL_WARNING: return "warning: ";
    case v1::LogLine::LEVEL_ERROR: return "error: ";
    default: return "";
  }
}

void print_line(const v1::JobLogLine& l, bool one_rank) {
  if (!one_rank) std::cout << "[rank " << l.rank() << "] ";
  std::cout << level_mark(l.line().level()) << l.line().text() << "\n";
}

}  // namespace

Verb add_logs_verb(CLI::App& app) {
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
  CLI::Option* rank = cmd->add_option("--rank", a->rank, "only this rank (default: every rank, in the order they were stored)")
                          ->check(CLI::NonNegativeNumber);
  cmd->add_option("--tail", a->tail, "newest lines to print, 1-10000 (default 100)")->check(CLI::Range(1, kMaxTail));
  cmd->add_flag("-f,--follow", a->follow, "keep printing new lines every second until the job ends");
  add_output_flag(cmd, &a->output);

  return {cmd, [a, rank](Session& session) {
            if (a->follow && is_document(a->output)) {
              return report({kExitUsage, "logs: --follow prints text; it does not combine with --output"});
            }
            if (auto e = session.connect()) return report(*e);
            const std::string what = absl::StrCat("logs ", a->job_id);
            const bool one_rank = rank->count() > 0;
            v1::GetJobLogsRequest req;
            req.set_job_id(a->job_id);
            req.set_attempt(a->attempt);
            if (one_rank) req.set_rank(a->rank);
            req.set_tail_lines(a->tail);

            auto fetch = [&](v1::GetJobLogsResponse* r) {
              auto ctx = session.context();
              return session.stub().GetJobLogs(ctx.get(), req, r);
            };
            v1::GetJobLogsResponse first;
            if (grpc::Status s = fetch(&first); !s.ok()) return report(session.error(s, what));
            if (is_document(a->output)) return print_message(first, a->output);
            // Every line carries a sequence that orders the job's lines; -f asks for the
            // lines after the last one printed (never by time: a rank writes many lines in
            // one millisecond, and ranks' clocks differ).
            int64_t cursor = 0;
            auto print = [&](const v1::GetJobLogsResponse& r) {
              for (const v1::JobLogLine& l : r.lines()) {
                print_line(l, one_rank);
                cursor = std::max(cursor, l.sequence());
              }
              std::cout.flush();
            };
            print(first);
            if (!a->follow) return static_cast<int>(kExitOk);

            req.set_tail_lines(kMaxTail);
            while (true) {
              // Whether the job had ended is read before the logs, so that the lines written
              // up to its end are in the last fetch.
              v1::GetJobRequest get;
              get.set_job_id(a->job_id);
              v1::Job job;
              auto ctx = session.context();
              if (grpc::Status s = session.stub().GetJob(ctx.get(), get, &job); !s.ok()) {
                return report(session.error(s, what));
              }
              // A page at a time until none is left (a busy second may fill several).
              for (bool more = true; more;) {
                req.set_after_sequence(cursor);
                v1::GetJobLogsResponse r;
                if (grpc::Status s = fetch(&r); !s.ok()) return report(session.error(s, what));
                print(r);
                more = r.truncated() && !r.lines().empty();
              }
              if (is_final(job.state())) return static_cast<int>(kExitOk);
              std::this_thread::sleep_for(kPollEvery);
            }
          }};
}

}  // namespace fp8::ctl
