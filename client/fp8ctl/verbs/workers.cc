// fp8ctl workers: every worker the coordinator knows, its state and the ranks it holds.
#include <cstdio>
#include <iostream>

#include "CLI/CLI.hpp"
#include "client/fp8ctl/exit_codes.h"
#include "client/fp8ctl/format.h"
#include "client/fp8ctl/inspect.h"
#include "client/fp8ctl/output.h"
#include "client/fp8ctl/verbs/verbs.h"

namespace fp8::ctl {

Verb add_workers_verb(CLI::App& app) {
  auto output = std::make_shared<OutputFormat>(OutputFormat::kTable);
  CLI::App* cmd = app.add_subcommand("workers", "list the workers, their state and the ranks they run");
  cmd->fallthrough();
  add_output_flag(cmd, output.get(),
                {OutputFormat::kTable, OutputFormat::kWide, OutputFormat::kName, OutputFormat::kJson,
                 OutputFormat::kYaml});

  return {cmd, [output](Session& session) {
            if (auto e = session.connect()) return report(*e);
            v1::ListWorkersResponse response;
            auto ctx = session.context();
            if (grpc::Status s = session.stub().ListWorkers(ctx.get(), v1::ListWorkersRequest(), &response); !s.ok()) {
              return report(session.error(s, "workers"));
            }
            if (is_document(*output)) return print_message(response, *output);
            if (*output == OutputFormat::kName) {
              for (const v1::WorkerInfo& w : response.workers()) std::cout << "worker/" << w.worker_id() << "\n";
              return static_cast<int>(kExitOk);
            }
            if (response.workers().empty()) {
              std::fprintf(stderr, "no workers registered\n");
              return static_cast<int>(kExitOk);
            }
            std::cout << workers_table(response, now_unix_ms(), *output == OutputFormat::kWide);
            return static_cast<int>(kExitOk);
          }};
}

}  // namespace fp8::ctl
