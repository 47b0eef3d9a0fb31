// fp8ctl clone ID [--set FIELD=VALUE ...]: a new job from an existing job's spec (as the
// coordinator resolved it), with overrides, e.g. the same run in another fp8 recipe.

#include "CLI/CLI.hpp"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/fp8ctl/exit_codes.h"
#include "client/fp8ctl/verbs/verbs.h"
#include "common/jobspec/loader.h"
#include "common/rpc/request_limits.h"

namespace fp8::ctl {

Verb add_clone_verb(CLI::App& app) {
  struct Args {
    std::string job_id;
    std::vector<std::string> sets;
    bool follow = false;
    bool queue_anyway = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "clone", "submit a new job with an existing job's spec and print its id on stdout (--set changes fields)");
  cmd->fallthrough();
  cmd->add_option("ID", a->job_id, "the job whose spec to copy (job-<n>)")->required();
  cmd->add_option("--set", a->sets, "FIELD=VALUE override of the copied spec, e.g. --set fp8.recipe=rowwise "
                                    "(repeatable)")
      ->allow_extra_args(false);
  cmd->add_flag("--follow", a->follow, "then follow the new job (as `fp8ctl follow`); the exit code is its outcome");
  cmd->add_flag("--queue-anyway", a->queue_anyway,
                "queue the job even when no registered worker offers the memory a rank of it needs");

  return {cmd, [a](Session& session) {
            if (auto e = session.connect()) return report(*e);
            v1::GetJobRequest get;
            get.set_job_id(a->job_id);
            v1::Job original;
            {
              auto ctx = session.context();
              if (grpc::Status s = session.stub().GetJob(ctx.get(), get, &original); !s.ok()) {
                return report(session.error(s, absl::StrCat("clone ", a->job_id)));
              }
            }
            v1::SubmitJobRequest req;
            *req.mutable_spec() = original.spec();
            // The coordinator stored the job's own folder, <checkpoint.dir>/<id>: the clone
            // gets a folder of its own under the same checkpoint.dir.
            const std::string own = "/" + original.id();
            if (const std::string& dir = original.spec().checkpoint().dir(); absl::EndsWith(dir, own)) {
              req.mutable_spec()->mutable_checkpoint()->set_dir(dir.substr(0, dir.size() - own.size()));
            }
            for (const std::string& set : a->sets) {
              if (absl::Status s = jobspec::apply_override(*req.mutable_spec(), set); !s.ok()) {
                return report({kExitInvalidSpec, absl::StrCat("--set ", set, ": ", s.message(), "; not submitted")});
              }
            }
            req.set_queue_anyway(a->queue_anyway);
            if (absl::Status s = rpc::check_request_limits(req); !s.ok()) {
              return report({kExitInvalidSpec, absl::StrCat("clone ", a->job_id, ": ", s.message(), "; not submitted")});
            }
            return submit_job(session, req, absl::StrCat("clone ", a->job_id), a->follow);
          }};
}

}  // namespace fp8::ctl
