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

Verb AddSubmitVerb(CLI::App& app);
Verb AddFollowVerb(CLI::App& app);
Verb AddListVerb(CLI::App& app);
Verb AddDescribeVerb(CLI::App& app);
Verb AddLogsVerb(CLI::App& app);
Verb AddCancelVerb(CLI::App& app);
Verb AddResumeVerb(CLI::App& app);
Verb AddCloneVerb(CLI::App& app);
Verb AddWorkersVerb(CLI::App& app);
Verb AddAmaxVerb(CLI::App& app);
Verb AddEventsVerb(CLI::App& app);
Verb AddPlotVerb(CLI::App& app);
Verb AddVersionVerb(CLI::App& app);
// Generates the script from `app`'s verbs and flags: add it last.
Verb AddCompletionVerb(CLI::App& app);

// `follow` as a function, for `submit --follow`: streams the job's events and returns the
// exit code of its outcome (0 SUCCEEDED, 10 FAILED, 11 CANCELLED) or of an error.
int FollowJob(Session& session, const std::string& job_id);

// Sends `req` on a connected session, prints the new job's id on stdout and, with
// `follow`, follows it (FollowJob's exit code); `what` names the request in errors.
int SubmitJob(Session& session, const v1::SubmitJobRequest& req, const std::string& what, bool follow);

}  // namespace fp8::ctl
