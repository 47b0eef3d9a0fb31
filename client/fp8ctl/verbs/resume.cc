// fp8ctl resume ID [--world-size N]: a new attempt of a FAILED or CANCELLED job from its
// last committed checkpoint.
#include <iostream>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "client/fp8ctl/exit_codes.h"
#include "client/fp8ctl/format.h"
#include "client/fp8ctl/jobs_table.h"
#include "client/fp8ctl/output.h"
#include "client/fp8ctl/verbs/verbs.h"

namespace fp8::ctl {

Verb add_resume_verb(CLI::App& app) {
  struct Args {
    std::string job_id;
    int world_size = 0;
    OutputFormat output = OutputFormat::kTable;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "resume", "continue a FAILED or CANCELLED job from its last committed checkpoint (the same job, a new attempt)");
  cmd->fallthrough();
  cmd->add_option("ID", a->job_id, "job id (job-<n>)")->required();
  cmd->add_option("--world-size", a->world_size,
                  "continue on this many ranks (train.batch_size is per rank: the global batch changes with it)")
      ->check(CLI::Range(1, 1 << 16));
  add_output_flag(cmd, &a->output, {OutputFormat::kTable, OutputFormat::kName, OutputFormat::kJson, OutputFormat::kYaml});

  return {cmd, [a](Session& session) {
            if (auto e = session.connect()) return report(*e);
            v1::ResumeJobRequest req;
            req.set_job_id(a->job_id);
            if (a->world_size > 0) req.set_world_size(a->world_size);
            v1::Job job;
            auto ctx = session.context();
            if (grpc::Status s = session.stub().ResumeJob(ctx.get(), req, &job); !s.ok()) {
              CliError e = session.error(s, absl::StrCat("resume ", a->job_id));
              if (s.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
                e.message = absl::StrCat("resume ", a->job_id, ": ", s.error_message());
              }
              return report(e);
            }
            if (is_document(a->output)) return print_message(job, a->output);
            if (a->output == OutputFormat::kName) {
              std::cout << job_name(job.id()) << std::endl;
              return static_cast<int>(kExitOk);
            }
            std::cout << job.id() << " " << job_state_name(job.state()) << ": resumes from step "
                      << job.last_checkpoint_step() << " on " << job.spec().resources().world_size() << " rank(s)"
                      << std::endl;
            return static_cast<int>(kExitOk);
          }};
}

}  // namespace fp8::ctl
