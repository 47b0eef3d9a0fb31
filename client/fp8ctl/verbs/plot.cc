// fp8ctl plot ID [ID...] -o FILE.svg: the jobs' loss, validation loss and throughput
// against the step, one chart per metric and one line per job, written as an SVG file.
// The data are the jobs' stored progress reports (every attempt; a step reported by two
// attempts shows the later one).
#include <fstream>
#include <iostream>
#include <map>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/fp8ctl/exit_codes.h"
#include "client/fp8ctl/format.h"
#include "client/fp8ctl/stored_events.h"
#include "client/fp8ctl/svg_plot.h"
#include "client/fp8ctl/verbs/verbs.h"

namespace fp8::ctl {
namespace {

struct Metric {
  std::string name;
  std::string title;
};

const std::vector<Metric>& AllMetrics() {
  static const std::vector<Metric> kMetrics = {
      {"loss", "loss (training, nats/token)"},
      {"val_loss", "val_loss (validation, nats/token)"},
      {"tokens_per_second", "tokens_per_second (the job's, all ranks)"},
  };
  return kMetrics;
}

// The metric's value in a report; false when the report has none (no evaluation ran).
bool MetricValue(const std::string& metric, const v1::TrainingProgress& p, int world_size, double* out) {
  if (metric == "loss") {
    *out = p.loss();
  } else if (metric == "val_loss") {
    if (!p.has_val_loss()) return false;
    *out = p.val_loss();
  } else {
    *out = p.tokens_per_second() * std::max(1, world_size);
  }
  return true;
}

}  // namespace

Verb AddPlotVerb(CLI::App& app) {
  struct Args {
    std::vector<std::string> job_ids;
    std::string path;
    std::string metric = "all";
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "plot", "write an SVG chart of jobs' loss, val_loss and tokens/s against the step (one line per job)");
  cmd->fallthrough();
  cmd->add_option("ID", a->job_ids, "job ids (job-<n>), one line each")->required();
  cmd->add_option("-o,--output", a->path, "the SVG file to write (must end in .svg)")->required();
  cmd->add_option("--metric", a->metric, "loss, val_loss, tokens_per_second or all (default: all, stacked)")
      ->check(CLI::IsMember({"loss", "val_loss", "tokens_per_second", "all"}));

  return {cmd, [a](Session& session) {
            if (!absl::EndsWithIgnoreCase(a->path, ".svg")) {
              return Report({kExitUsage, absl::StrCat("plot: --output '", a->path,
                                                      "': the file name must end in .svg (fp8ctl writes SVG only)")});
            }
            if (auto e = session.Connect()) return Report(*e);
            std::vector<Metric> metrics;
            for (const Metric& m : AllMetrics()) {
              if (a->metric == "all" || a->metric == m.name) metrics.push_back(m);
            }
            PlotDocument doc;
            for (const Metric& m : metrics) doc.charts.push_back({m.title, "step", {}});
            for (const std::string& id : a->job_ids) {
              v1::GetJobRequest req;
              req.set_job_id(id);
              v1::Job job;
              auto ctx = session.Context();
              if (grpc::Status s = session.stub().GetJob(ctx.get(), req, &job); !s.ok()) {
                return Report(session.Error(s, absl::StrCat("plot ", id)));
              }
              StoredEventsResult events = ReadStoredEvents(session, id, /*include_progress=*/true);
              if (!events.status.ok()) return Report(session.Error(events.status, absl::StrCat("plot ", id)));
              // Per step, the latest report (a resumed attempt repeats steps).
              std::map<int64_t, v1::TrainingProgress> by_step;
              for (const v1::JobEvent& e : events.events) {
                if (e.has_progress()) by_step[e.progress().progress().step()] = e.progress().progress();
              }
              if (by_step.empty()) std::fprintf(stderr, "fp8ctl: plot: %s has no progress reports yet\n", id.c_str());
              doc.legend.push_back(
                  absl::StrCat(job.id(), " ", job.spec().name(), " (", RecipeName(job.spec().fp8().recipe()), ")"));
              for (size_t c = 0; c < metrics.size(); ++c) {
                PlotSeries series;
                for (const auto& [step, p] : by_step) {
                  double v = 0;
                  if (MetricValue(metrics[c].name, p, job.spec().resources().world_size(), &v)) {
                    series.points.push_back({static_cast<double>(step), v});
                  }
                }
                doc.charts[c].series.push_back(std::move(series));
              }
            }
            const std::string svg = RenderSvg(doc);
            std::ofstream file(a->path, std::ios::binary | std::ios::trunc);
            file << svg;
            file.close();
            if (!file) return Report({kExitError, absl::StrCat("plot: cannot write ", a->path)});
            std::cout << a->path << "\n";
            return static_cast<int>(kExitOk);
          }};
}

}  // namespace fp8::ctl
