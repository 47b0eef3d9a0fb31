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

Verb AddAmaxVerb(CLI::App& app) {
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
  AddOutputFlag(cmd, &a->output);

  return {cmd, [a](Session& session) {
            if (auto e = session.Connect()) return Report(*e);
            v1::GetJobAmaxRequest req;
            req.set_job_id(a->job_id);
            req.set_by_rank(a->by_rank);
            v1::GetJobAmaxResponse response;
            auto ctx = session.Context();
            if (grpc::Status s = session.stub().GetJobAmax(ctx.get(), req, &response); !s.ok()) {
              return Report(session.Error(s, absl::StrCat("amax ", a->job_id)));
            }
            if (IsDocument(a->output)) return PrintMessage(response, a->output);
            std::cout << (a->by_rank ? AmaxByRankReport(a->job_id, response) : AmaxReport(a->job_id, response));
            return static_cast<int>(kExitOk);
          }};
}

}  // namespace fp8::ctl
