// fp8ctl cancel ID: stops the job's ranks and ends it CANCELLED.
#include <iostream>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "client/fp8ctl/exit_codes.h"
#include "client/fp8ctl/format.h"
#include "client/fp8ctl/jobs_table.h"
#include "client/fp8ctl/output.h"
#include "client/fp8ctl/verbs/verbs.h"

namespace fp8::ctl {

Verb add_cancel_verb(CLI::App& app) {
  struct Args {
    std::string job_id;
    std::string reason;
    OutputFormat output = OutputFormat::kTable;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("cancel", "cancel a job: its ranks are stopped and it ends CANCELLED");
  cmd->fallthrough();
  cmd->add_option("ID", a->job_id, "job id (job-<n>)")->required();
  cmd->add_option("--reason", a->reason, "why, shown in the job's failure reason (at most 1024 characters)");
  add_output_flag(cmd, &a->output, {OutputFormat::kTable, OutputFormat::kName, OutputFormat::kJson, OutputFormat::kYaml});

  return {cmd, [a](Session& session) {
            if (auto e = session.connect()) return report(*e);
            v1::CancelJobRequest req;
            req.set_job_id(a->job_id);
            req.set_reason(a->reason);
            v1::Job job;
            auto ctx = session.context();
            if (grpc::Status s = session.stub().CancelJob(ctx.get(), req, &job); !s.ok()) {
              CliError e = session.error(s, absl::StrCat("cancel ", a->job_id));
              if (s.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
                e.message = absl::StrCat("cancel ", a->job_id, ": ", s.error_message(), " (it has already ended)");
              }
              return report(e);
            }
            if (is_document(a->output)) return print_message(job, a->output);
            if (a->output == OutputFormat::kName) {
              std::cout << job_name(job.id()) << std::endl;
              return static_cast<int>(kExitOk);
            }
            std::cout << job.id() << " " << job_state_name(job.state());
            if (!job.failure_reason().empty()) std::cout << ": " << job.failure_reason();
            std::cout << std::endl;
            return static_cast<int>(kExitOk);
          }};
}

}  // namespace fp8::ctl
