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

Verb add_events_verb(CLI::App& app) {
  struct Args {
    std::string job_id;
    OutputFormat output = OutputFormat::kTable;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "events", "list every numerics event of a job (saturation, amax jumps, non-finite loss), one per line");
  cmd->fallthrough();
  cmd->add_option("ID", a->job_id, "job id (job-<n>)")->required();
  add_output_flag(cmd, &a->output);

  return {cmd, [a](Session& session) {
            if (auto e = session.connect()) return report(*e);
            StoredEventsResult stored = read_stored_events(session, a->job_id);
            if (!stored.status.ok()) return report(session.error(stored.status, absl::StrCat("events ", a->job_id)));
            std::vector<v1::JobEvent> numerics;
            for (const v1::JobEvent& e : stored.events) {
              if (e.has_numerics()) numerics.push_back(e);
            }
            if (is_document(a->output)) {
              // {"job_id": ID, "numerics_events": [<JobEvent>...]}, as describe has them.
              Document list = Document::array();
              for (const v1::JobEvent& e : numerics) list.add(message_document(e));
              Document doc = Document::object();
              doc.set("job_id", Document::of_string(a->job_id)).set("numerics_events", std::move(list));
              return print_document(doc, a->output);
            }
            if (numerics.empty()) {
              std::cout << a->job_id << " has no numerics events\n";
              return static_cast<int>(kExitOk);
            }
            std::cout << numerics_events_table(numerics);
            return static_cast<int>(kExitOk);
          }};
}

}  // namespace fp8::ctl
