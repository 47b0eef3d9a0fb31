// fp8ctl events ID: every numerics event of a job, one line each (`describe` and `follow`
// show them grouped by kind, layer and operand with a count).
#include <iostream>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "client/fp8ctl/exit_codes.h"
#include "client/fp8ctl/message_document.h"
#include "client/fp8ctl/numerics_groups.h"
#include "client/fp8ctl/output.h"
#include "client/fp8ctl/stored_events.h"
#include "client/fp8ctl/verbs/verbs.h"

namespace fp8::ctl {

Verb AddEventsVerb(CLI::App& app) {
  struct Args {
    std::string job_id;
    OutputFormat output = OutputFormat::kTable;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "events", "list every numerics event of a job (saturation, amax jumps, non-finite loss), one per line");
  cmd->fallthrough();
  cmd->add_option("ID", a->job_id, "job id (job-<n>)")->required();
  AddOutputFlag(cmd, &a->output);

  return {cmd, [a](Session& session) {
            if (auto e = session.Connect()) return Report(*e);
            StoredEventsResult stored = ReadStoredEvents(session, a->job_id);
            if (!stored.status.ok()) return Report(session.Error(stored.status, absl::StrCat("events ", a->job_id)));
            std::vector<v1::JobEvent> numerics;
            for (const v1::JobEvent& e : stored.events) {
              if (e.has_numerics()) numerics.push_back(e);
            }
            if (IsDocument(a->output)) {
              // {"job_id": ID, "numerics_events": [<JobEvent>...]}, as describe has them.
              Document list = Document::Array();
              for (const v1::JobEvent& e : numerics) list.Add(MessageDocument(e));
              Document doc = Document::Object();
              doc.Set("job_id", Document::String(a->job_id)).Set("numerics_events", std::move(list));
              return PrintDocument(doc, a->output);
            }
            if (numerics.empty()) {
              std::cout << a->job_id << " has no numerics events\n";
              return static_cast<int>(kExitOk);
            }
            std::cout << NumericsEventsTable(numerics);
            return static_cast<int>(kExitOk);
          }};
}

}  // namespace fp8::ctl
