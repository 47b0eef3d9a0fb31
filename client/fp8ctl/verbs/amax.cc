// fp8ctl amax ID [--by-rank]: a job's merged amax histories and scales (delayed scaling),
// or each rank's own amaxes side by side.
#include <iostream>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "client/fp8ctl/exit_codes.h"
#include "client/fp8ctl/inspect.h"
#include "client/fp8ctl/output.h"
#include "client/fp8ctl/verbs/verbs.h"

namespace fp8::ctl {

Verb add_amax_verb(CLI::App& app) {
  struct Args {
    std::string job_id;
    bool by_rank = false;
    OutputFormat output = OutputFormat::kTable;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd =
      app.add_subcommand("amax", "show a job's amax histories and scales, per layer and operand (delayed scaling)");
  cmd->fallthrough();
  cmd->add_option("ID", a->job_id, "job id (job-<n>)")->required();
  cmd->add_flag("--by-rank", a->by_rank,
                "each rank's own amax per layer and operand at the newest report (every recipe), which rank's is "
                "largest, and the run's largest so far");
  add_output_flag(cmd, &a->output);

  return {cmd, [a](Session& session) {
            if (auto e = session.connect()) return report(*e);
            v1::GetJobAmaxRequest req;
            req.set_job_id(a->job_id);
            req.set_by_rank(a->by_rank);
            v1::GetJobAmaxResponse response;
            auto ctx = session.context();
            if (grpc::Status s = session.stub().GetJobAmax(ctx.get(), req, &response); !s.ok()) {
              return report(session.error(s, absl::StrCat("amax ", a->job_id)));
            }
            if (is_document(a->output)) return print_message(response, a->output);
            std::cout << (a->by_rank ? amax_by_rank_report(a->job_id, response) : amax_report(a->job_id, response));
            return static_cast<int>(kExitOk);
          }};
}

}  // namespace fp8::ctl
