// The verbs of fp8ctl. Each Add*Verb registers its subcommand (flags bound to state the
// returned `run` owns) and returns what main() calls when that subcommand was chosen.
#pragma once

#include <functional>
#include <string>

#include "client/fp8ctl/session.h"

namespace CLI {
class App;
}  // namespace CLI

namespace fp8::ctl {

struct Verb {
  CLI::App* command = nullptr;
  std::function<int(Session&)> run;
};

Verb add_submit_verb(CLI::App& app);
Verb add_follow_verb(CLI::App& app);
Verb add_list_verb(CLI::App& app);
Verb add_describe_verb(CLI::App& app);
Verb add_logs_verb(CLI::App& app);
Verb add_cancel_verb(CLI::App& app);
Verb add_resume_verb(CLI::App& app);
Verb add_clone_verb(CLI::App& app);
Verb add_workers_verb(CLI::App& app);
Verb add_amax_verb(CLI::App& app);
Verb add_events_verb(CLI::App& app);
Verb add_plot_verb(CLI::App& app);
Verb add_version_verb(CLI::App& app);
// Generates the script from `app`'s verbs and flags: add it last.
Verb add_completion_verb(CLI::App& app);

// `follow` as a function, for `submit --follow`: streams the job's events and returns the
// exit code of its outcome (0 SUCCEEDED, 10 FAILED, 11 CANCELLED) or of an error.
int follow_job(Session& session, const std::string& job_id);

// Sends `req` on a connected session, prints the new job's id on stdout and, with
// `follow`, follows it (FollowJob's exit code); `what` names the request in errors.
int submit_job(Session& session, const v1::SubmitJobRequest& req, const std::string& what, bool follow);

}  // namespace fp8::ctl
