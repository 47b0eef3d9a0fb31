// fp8ctl list: the caller's jobs (an admin's: everyone's), newest first.
#include <cstdio>
#include <iostream>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "client/fp8ctl/exit_codes.h"
#include "client/fp8ctl/format.h"
#include "client/fp8ctl/jobs_table.h"
#include "client/fp8ctl/output.h"
#include "client/fp8ctl/verbs/verbs.h"

namespace fp8::ctl {

Verb add_list_verb(CLI::App& app) {
  struct Args {
    std::vector<std::string> states;
    std::string owner;
    bool all_pages = false;
    OutputFormat output = OutputFormat::kTable;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("list", "list jobs, newest first (yours; an admin sees everyone's)");
  cmd->fallthrough();
  cmd->add_option("--state", a->states,
                  "only jobs in this state: queued, running, restarting, succeeded, failed, cancelled (repeatable)")
      ->allow_extra_args(false)
      ->type_name("queued|running|restarting|succeeded|failed|cancelled");
  cmd->add_option("--owner", a->owner, "only jobs of this owner");
  cmd->add_flag("--all-pages", a->all_pages, "fetch every page, not only the newest 100 jobs");
  add_output_flag(cmd, &a->output,
                {OutputFormat::kTable, OutputFormat::kWide, OutputFormat::kName, OutputFormat::kJson,
                 OutputFormat::kYaml});

  return {cmd, [a](Session& session) {
            v1::ListJobsRequest req;
            req.set_owner(a->owner);
            for (const std::string& name : a->states) {
              v1::Job::State state;
              if (!v1::Job::State_Parse(absl::AsciiStrToUpper(name), &state) || state == v1::Job::STATE_UNSPECIFIED) {
                return report({kExitUsage, absl::StrCat("--state '", name,
                                                        "': expected queued, running, restarting, succeeded, "
                                                        "failed or cancelled")});
              }
              req.add_states(state);
            }
            if (auto e = session.connect()) return report(*e);
            v1::ListJobsResponse all;
            while (true) {
              v1::ListJobsResponse page;
              auto ctx = session.context();
              if (grpc::Status s = session.stub().ListJobs(ctx.get(), req, &page); !s.ok()) {
                return report(session.error(s, "list"));
              }
              for (v1::Job& j : *page.mutable_jobs()) *all.add_jobs() = std::move(j);
              all.set_next_page_token(page.next_page_token());
              if (!a->all_pages || page.next_page_token().empty()) break;
              req.set_page_token(page.next_page_token());
            }
            if (is_document(a->output)) return print_message(all, a->output);
            if (a->output == OutputFormat::kName) {
              for (const v1::Job& j : all.jobs()) std::cout << job_name(j.id()) << "\n";
            } else if (all.jobs().empty()) {
              std::fprintf(stderr, "no jobs\n");
              return static_cast<int>(kExitOk);
            } else {
              std::cout << jobs_table(all, now_unix_ms(), a->output == OutputFormat::kWide);
            }
            if (!all.next_page_token().empty()) {
              std::fprintf(stderr, "(newest %d jobs shown; --all-pages for the rest)\n", all.jobs_size());
            }
            return static_cast<int>(kExitOk);
          }};
}

}  // namespace fp8::ctl
