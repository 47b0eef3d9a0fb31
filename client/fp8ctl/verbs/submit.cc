// fp8ctl submit job.yaml: validated here first (the same loader as the coordinator), so
// that mistakes come back with file:line:col before anything is sent. --dry-run stops
// there and prints the memory a rank of the job needs.
#include <cstdio>
#include <iostream>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "client/fp8ctl/exit_codes.h"
#include "client/fp8ctl/verbs/verbs.h"
#include "common/jobspec/loader.h"
#include "common/jobspec/memory_estimate.h"
#include "common/rpc/request_limits.h"

namespace fp8::ctl {

Verb add_submit_verb(CLI::App& app) {
  struct Args {
    std::string file;
    std::vector<std::string> sets;
    bool follow = false;
    std::string idempotency_key;
    bool dry_run = false;
    bool queue_anyway = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("submit", "validate job.yaml, submit it and print the job id on stdout");
  cmd->fallthrough();
  cmd->add_option("job.yaml", a->file, "the job spec")->required();
  cmd->add_option("--set", a->sets, "FIELD=VALUE override applied after the file, e.g. --set train.steps=200 "
                                    "(repeatable)")
      ->allow_extra_args(false);
  cmd->add_flag("--follow", a->follow, "then follow the job (as `fp8ctl follow`); the exit code is its outcome");
  cmd->add_flag("--dry-run", a->dry_run,
                "validate job.yaml and print the memory a rank needs, by part, without submitting it");
  cmd->add_flag("--queue-anyway", a->queue_anyway,
                "queue the job even when no registered worker offers the memory a rank of it needs");
  cmd->add_option("--idempotency-key", a->idempotency_key,
                  "retry-safe key: submitting again with it returns the first job (at most 128 characters)");

  return {cmd, [a](Session& session) {
            absl::StatusOr<v1::JobSpec> spec = jobspec::load_job_spec_file(a->file, a->sets);
            if (!spec.ok()) {
              if (absl::IsNotFound(spec.status())) {
                return report({kExitUsage, std::string(spec.status().message())});
              }
              // The loader's lines are file:line:col: message, printed as they are.
              std::fprintf(stderr, "%s\n", std::string(spec.status().message()).c_str());
              return report({kExitInvalidSpec, absl::StrCat(a->file, ": not submitted")});
            }
            v1::SubmitJobRequest req;
            *req.mutable_spec() = *std::move(spec);
            req.set_idempotency_key(a->idempotency_key);
            req.set_queue_anyway(a->queue_anyway);
            // The coordinator's limits (limits.proto), checked here too: a spec too large to
            // send at all gets the same message as one the coordinator refuses.
            if (absl::Status s = rpc::check_request_limits(req); !s.ok()) {
              std::fprintf(stderr, "%s: %s\n", a->file.c_str(), std::string(s.message()).c_str());
              return report({kExitInvalidSpec, absl::StrCat(a->file, ": not submitted")});
            }
            if (a->dry_run) {
              absl::StatusOr<jobspec::MemoryEstimate> e = jobspec::estimate_rank_memory(req.spec());
              if (!e.ok()) return report({kExitInvalidSpec, absl::StrCat(a->file, ": ", e.status().message())});
              std::printf("%s: valid, not submitted (--dry-run)\n%s", a->file.c_str(),
                          jobspec::format_memory_estimate(*e).c_str());
              return static_cast<int>(kExitOk);
            }
            if (auto e = session.connect()) return report(*e);
            return submit_job(session, req, absl::StrCat("submit ", a->file), a->follow);
          }};
}

int submit_job(Session& session, const v1::SubmitJobRequest& req, const std::string& what, bool follow) {
  v1::Job job;
  auto ctx = session.context();
  if (grpc::Status s = session.stub().Submit(ctx.get(), req, &job); !s.ok()) return report(session.error(s, what));
  std::cout << job.id() << std::endl;
  if (!follow) return static_cast<int>(kExitOk);
  return follow_job(session, job.id());
}

}  // namespace fp8::ctl
