// fp8ctl follow ID: the job's events as they happen, until it ends.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "client/fp8ctl/exit_codes.h"
#include "client/fp8ctl/follow_printer.h"
#include "client/fp8ctl/format.h"
#include "client/fp8ctl/verbs/verbs.h"

namespace fp8::ctl {
namespace {

// A coordinator restart (state survives it) breaks the stream with UNAVAILABLE; keep
// trying this long from the break before giving up.
constexpr std::chrono::seconds kReconnectWindow{60};
constexpr std::chrono::milliseconds kReconnectPause{500};

int exit_code_for_outcome(v1::Job::State state) {
  switch (state) {
    case v1::Job::SUCCEEDED: return kExitOk;
    case v1::Job::FAILED: return kExitJobFailed;
    case v1::Job::CANCELLED: return kExitJobCancelled;
    default: return kExitError;
  }
}

}  // namespace

int follow_job(Session& session, const std::string& job_id) {
  const std::string what = absl::StrCat("follow ", job_id);
  // GetJob first: an unknown id or an unreachable coordinator fails at once with its own
  // exit code (rather than as a stream to retry), and the spec gives the step total.
  v1::Job job;
  {
    v1::GetJobRequest req;
    req.set_job_id(job_id);
    auto ctx = session.context();
    if (grpc::Status s = session.stub().GetJob(ctx.get(), req, &job); !s.ok()) return report(session.error(s, what));
  }
  const v1::JobSpec& spec = job.spec();
  FollowPrinter printer(std::cout, ::isatty(STDOUT_FILENO) == 1, spec.train().steps(), data_parallel_ranks(spec),
                        int64_t{spec.train().batch_size()} * spec.data().seq_len(), spec.parallel().tensor());

  int64_t after = 0;
  // When the stream broke; min() while it is healthy. (Not an optional: GCC 12 warns
  // maybe-uninitialized on it at -O3.)
  std::chrono::steady_clock::time_point broken_since = std::chrono::steady_clock::time_point::min();
  while (true) {
    v1::WatchJobRequest req;
    req.set_job_id(job_id);
    req.set_after_sequence(after);
    req.set_include_progress(true);
    auto ctx = session.context(/*stream=*/true);
    std::unique_ptr<grpc::ClientReader<v1::JobEvent>> reader = session.stub().WatchJob(ctx.get(), req);
    v1::JobEvent event;
    while (reader->Read(&event)) {
      after = event.sequence();
      broken_since = std::chrono::steady_clock::time_point::min();
      printer.on_event(event);
    }
    const grpc::Status status = reader->Finish();
    if (status.ok()) break;
    printer.finish();
    // UNAVAILABLE: the connection broke (a coordinator killed or restarting). CANCELLED:
    // this client never cancels the stream, so the coordinator did, shutting down.
    if (status.error_code() != grpc::StatusCode::UNAVAILABLE && status.error_code() != grpc::StatusCode::CANCELLED) {
      return report(session.error(status, what));
    }
    const auto now = std::chrono::steady_clock::now();
    if (broken_since == std::chrono::steady_clock::time_point::min()) {
      broken_since = now;
      std::fprintf(stderr, "fp8ctl: %s: lost the event stream from %s (%s); reconnecting for up to %llds\n",
                   what.c_str(), session.config().coordinator.c_str(), status.error_message().c_str(),
                   static_cast<long long>(kReconnectWindow.count()));
    } else if (now - broken_since > kReconnectWindow) {
      CliError e = session.error(status, what);
      e.message += absl::StrCat("; gave up after ", kReconnectWindow.count(), " s of reconnecting");
      return report(e);
    }
    std::this_thread::sleep_for(kReconnectPause);
  }
  if (printer.final_state().has_value()) {
    printer.print_summary();
    return exit_code_for_outcome(*printer.final_state());
  }
  printer.finish();
  // The stream ends only after the final state change, which the printer saw; if an older
  // coordinator ended it otherwise, ask for the state.
  v1::GetJobRequest req;
  req.set_job_id(job_id);
  auto ctx = session.context();
  if (grpc::Status s = session.stub().GetJob(ctx.get(), req, &job); !s.ok()) return report(session.error(s, what));
  if (!is_final(job.state())) {
    return report({kExitError, absl::StrCat(what, ": the event stream ended while the job is ",
                                            job_state_name(job.state()))});
  }
  return exit_code_for_outcome(job.state());
}

Verb add_follow_verb(CLI::App& app) {
  auto job_id = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand(
      "follow", "stream a job's state changes, attempts and progress until it ends; the exit code is its outcome "
                "(0 SUCCEEDED, 10 FAILED, 11 CANCELLED)");
  cmd->fallthrough();
  cmd->add_option("ID", *job_id, "job id (job-<n>)")->required();
  return {cmd, [job_id](Session& session) {
            if (auto e = session.connect()) return report(*e);
            return follow_job(session, *job_id);
          }};
}

}  // namespace fp8::ctl
