// fp8ctl describe ID: everything about one job a person asks first: what it trains, how
// it is doing, where it ran, why it failed, and what the fp8 numerics did.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <sstream>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/fp8ctl/exit_codes.h"
#include "client/fp8ctl/format.h"
#include "client/fp8ctl/inspect.h"
#include "client/fp8ctl/jobs_table.h"
#include "client/fp8ctl/message_document.h"
#include "client/fp8ctl/numerics_groups.h"
#include "client/fp8ctl/output.h"
#include "client/fp8ctl/stored_events.h"
#include "client/fp8ctl/table.h"
#include "client/fp8ctl/verbs/verbs.h"
#include "common/jobspec/memory_estimate.h"

namespace fp8::ctl {
namespace {

std::string field(const std::string& name, const std::string& value) {
  return absl::StrFormat("%-12s%s\n", name + ":", value);
}

std::string spec_summary(const v1::JobSpec& s) {
  const v1::ModelSpec& m = s.model();
  std::string out = "Spec:\n";
  absl::StrAppend(&out, "  model       llama, dim ", m.dim(), ", ", m.n_layers(), " layers, ", m.n_heads(), " heads (",
                  m.n_kv_heads(), " kv), ffn ", m.ffn_dim(), ", vocab ", m.vocab_size(), ", max_seq_len ",
                  m.max_seq_len(), "\n");
  absl::StrAppend(&out, "  recipe      ", recipe_name(s.fp8().recipe()), "\n");
  absl::StrAppend(&out, "  world       ", s.resources().world_size(), " x ", device_name(s.resources().device()), "\n");
  if (s.resources().world_size() > 1) absl::StrAppend(&out, "  mesh        ", mesh_text(s), "\n");
  absl::StrAppend(&out, "  steps       ", s.train().steps(), " (batch ", s.train().batch_size(), ", seq_len ",
                  s.data().seq_len(), ", lr ", absl::StrFormat("%g", s.train().lr()), ")\n");
  absl::StrAppend(&out, "  data        ", s.data().path(), "\n");
  if (s.data().has_val_path()) absl::StrAppend(&out, "  validation  ", s.data().val_path(), "\n");
  absl::StrAppend(&out, "  checkpoint  ", s.checkpoint().dir(), " every ", s.checkpoint().every(), " steps\n");
  absl::StrAppend(&out, "  restarts    at most ", s.restarts().max_restarts(), "\n");
  return out;
}

// A rank's memory: the job's estimate (what the scheduler places by, unless
// resources.memory_gb states it), beside what rank 0 last measured.
std::string memory(const v1::Job& job) {
  const v1::JobSpec& s = job.spec();
  std::string out = "  memory      per rank: ";
  const absl::StatusOr<jobspec::MemoryEstimate> e = jobspec::estimate_rank_memory(s);
  absl::StrAppend(&out, e.ok() ? absl::StrCat("estimate ", jobspec::format_bytes(e->total_bytes())) : "no estimate");
  if (s.resources().has_memory_gb()) {
    absl::StrAppend(&out, absl::StrFormat(", resources.memory_gb %g GiB", s.resources().memory_gb()));
  }
  if (job.latest_progress().has_memory()) {
    absl::StrAppend(&out, ", measured peak ", jobspec::format_bytes(job.latest_progress().memory().peak_bytes()),
                    " (rank 0, step ", job.latest_progress().step(), ")");
  }
  return out + "\n";
}

std::string metrics(const v1::TrainingProgress& p, int data_parallel) {
  std::string out = absl::StrCat("Metrics (step ", p.step(), ", ", local_time(p.time_unix_ms()), "):\n");
  absl::StrAppend(&out, absl::StrFormat("  loss %.4f", p.loss()));
  if (p.has_val_loss()) absl::StrAppend(&out, absl::StrFormat("  val loss %.4f", p.val_loss()));
  // Rank 0 reports its own throughput; the job's is that of every data-parallel rank
  // (tensor-parallel ranks train one batch together).
  absl::StrAppend(&out, "  tokens/s ", si_rate(p.tokens_per_second() * data_parallel), " (",
                  si_rate(p.tokens_per_second()), " per rank)");
  if (p.has_mfu()) absl::StrAppend(&out, absl::StrFormat("  mfu %.1f%%", 100 * p.mfu()));
  absl::StrAppend(&out, absl::StrFormat("  grad norm %.4g", p.grad_norm()), absl::StrFormat("  lr %.4g", p.lr()),
                  "\n");
  return out;
}

std::string attempts(const v1::Job& job) {
  if (job.attempt_history().empty()) return "Attempts:   none yet\n";
  std::string out = "Attempts:\n";
  for (const v1::Attempt& a : job.attempt_history()) {
    absl::StrAppend(&out, "  #", a.number(), " ", attempt_state_name(a.state()), "  started ",
                    local_time(a.started_unix_ms()), "  ended ", local_time(a.ended_unix_ms()), "  ",
                    a.resumed_from_step() > 0 ? absl::StrCat("resumed from step ", a.resumed_from_step())
                                              : std::string("from scratch"),
                    "\n");
    Table ranks({"RANK", "WORKER", "DEVICE"});
    for (const v1::RankPlacement& r : a.ranks()) ranks.add_row({absl::StrCat(r.rank()), r.worker_id(), r.device_name()});
    std::istringstream lines(ranks.render());
    for (std::string line; std::getline(lines, line);) absl::StrAppend(&out, "      ", line, "\n");
    if (!a.end_reason().empty()) {
      const bool classed = a.failure_class() != v1::RestartPolicy::FAILURE_CLASS_UNSPECIFIED;
      absl::StrAppend(&out, "      end: ",
                      classed ? absl::StrCat("(", absl::AsciiStrToLower(v1::RestartPolicy::FailureClass_Name(
                                                      a.failure_class())),
                                             ") ")
                              : "",
                      a.end_reason(), "\n");
    }
  }
  return out;
}

// One line per kind, layer and operand with a count: a cast that saturates at every step
// is one line, not hundreds (`fp8ctl events ID` lists each).
std::string numerics(const std::vector<v1::JobEvent>& events) {
  NumericsGroups groups;
  for (const v1::JobEvent& e : events) groups.add(e);
  if (groups.events() == 0) return "Numerics:   no events\n";
  Table t({"KIND", "LAYER", "OPERAND", "COUNT", "STEPS", "LAST MESSAGE"});
  for (const NumericsGroup& g : groups.groups()) {
    t.add_row({numerics_kind_name(g.kind), g.layer.empty() ? "-" : g.layer, operand_name(g.operand), absl::StrCat(g.count),
              step_span(g), g.last.message()});
  }
  std::string out = absl::StrCat("Numerics:   ", groups.events(), " events of ", groups.groups().size(),
                                 " kinds (fp8ctl events ", events.front().job_id().empty() ? "ID" : events.front().job_id(),
                                 " lists each)\n");
  std::istringstream lines(t.render());
  for (std::string line; std::getline(lines, line);) absl::StrAppend(&out, "  ", line, "\n");
  return out;
}

std::string describe(const v1::Job& job, const std::vector<v1::JobEvent>& events) {
  const v1::JobSpec& s = job.spec();
  std::string out;
  absl::StrAppend(&out, field("ID", job.id()), field("Name", s.name()),
                  field("Owner", s.owner().empty() ? "-" : s.owner()), field("State", job_state_name(job.state())));
  if (!job.pending_reason().empty()) absl::StrAppend(&out, field("Waiting", job.pending_reason()));
  if (!job.failure_reason().empty()) absl::StrAppend(&out, field("Reason", job.failure_reason()));
  absl::StrAppend(&out, field("Submitted", absl::StrCat(local_time(job.created_unix_ms()), " (",
                                                        age(now_unix_ms() - job.created_unix_ms()), " ago)")),
                  field("Started", local_time(job.started_unix_ms())), field("Finished", local_time(job.finished_unix_ms())),
                  field("Progress", absl::StrCat(job.latest_progress().step(), "/", s.train().steps())),
                  field("Restarts", absl::StrCat(job.restarts_left(), " left")),
                  field("Checkpoint", job.last_checkpoint_step() > 0
                                          ? absl::StrCat("step ", job.last_checkpoint_step())
                                          : std::string("none yet")));
  absl::StrAppend(&out, spec_summary(s), memory(job));
  if (job.has_latest_progress()) absl::StrAppend(&out, metrics(job.latest_progress(), data_parallel_ranks(s)));
  absl::StrAppend(&out, attempts(job), numerics(events));
  return out;
}

}  // namespace

Verb add_describe_verb(CLI::App& app) {
  struct Args {
    std::string job_id;
    OutputFormat output = OutputFormat::kTable;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("describe", "show a job: spec summary, state, attempts, metrics, numerics events");
  cmd->fallthrough();
  cmd->add_option("ID", a->job_id, "job id (job-<n>)")->required();
  add_output_flag(cmd, &a->output, {OutputFormat::kTable, OutputFormat::kName, OutputFormat::kJson, OutputFormat::kYaml});

  return {cmd, [a](Session& session) {
            if (auto e = session.connect()) return report(*e);
            const std::string what = absl::StrCat("describe ", a->job_id);
            v1::GetJobRequest req;
            req.set_job_id(a->job_id);
            v1::Job job;
            auto ctx = session.context();
            if (grpc::Status s = session.stub().GetJob(ctx.get(), req, &job); !s.ok()) {
              return report(session.error(s, what));
            }
            StoredEventsResult events = read_stored_events(session, a->job_id);
            if (!events.status.ok()) {
              // The job itself is still worth showing; say what is missing.
              std::fprintf(stderr, "fp8ctl: %s: numerics events unavailable (%s)\n", what.c_str(),
                           events.status.error_message().c_str());
            }
            std::vector<v1::JobEvent> numerics;
            for (const v1::JobEvent& e : events.events) {
              if (e.has_numerics()) numerics.push_back(e);
            }
            if (a->output == OutputFormat::kName) {
              std::cout << job_name(job.id()) << "\n";
              return static_cast<int>(kExitOk);
            }
            if (a->output == OutputFormat::kTable) {
              std::cout << describe(job, numerics);
              return static_cast<int>(kExitOk);
            }
            // {"job": <Job>, "numerics_events": [<JobEvent>...]}
            Document events_doc = Document::array();
            for (const v1::JobEvent& e : numerics) events_doc.add(message_document(e));
            Document doc = Document::object();
            doc.set("job", message_document(job)).set("numerics_events", std::move(events_doc));
            return print_document(doc, a->output);
          }};
}

}  // namespace fp8::ctl
