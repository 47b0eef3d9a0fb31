// fp8ctl plot ID [ID...] --out FILE [-o svg|png|csv]: the jobs' loss, validation loss and
// throughput against the step, one chart per metric and one line per job, written as an
// SVG file (or that SVG drawn as PNG: png_render.h), or the same data as CSV. The data are the jobs' stored progress reports (every
// attempt; a step reported by two attempts shows the later one). -o is the format, as in
// every verb; the file is --out.
#include <fstream>
#include <iostream>
#include <map>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/fp8ctl/exit_codes.h"
#include "client/fp8ctl/format.h"
#include "client/fp8ctl/png_render.h"
#include "client/fp8ctl/progress_csv.h"
#include "client/fp8ctl/stored_events.h"
#include "client/fp8ctl/svg_plot.h"
#include "client/fp8ctl/verbs/verbs.h"

namespace fp8::ctl {
namespace {

struct Metric {
  std::string name;
  std::string title;
};

const std::vector<Metric>& all_metrics() {
  static const std::vector<Metric> kMetrics = {
      {"loss", "loss (training, nats/token)"},
      {"val_loss", "val_loss (validation, nats/token)"},
      {"tokens_per_second", "tokens_per_second (the job's, all data-parallel ranks)"},
  };
  return kMetrics;
}

// The metric's value in a report; false when the report has none (no evaluation ran).
bool metric_value(const std::string& metric, const v1::TrainingProgress& p, int data_parallel, double* out) {
  if (metric == "loss") {
    *out = p.loss();
  } else if (metric == "val_loss") {
    if (!p.has_val_loss()) return false;
    *out = p.val_loss();
  } else {
    *out = p.tokens_per_second() * std::max(1, data_parallel);
  }
  return true;
}

// The SVG: a chart per metric asked for, a line per job.
std::string chart(const std::vector<JobProgress>& jobs, const std::string& metric) {
  std::vector<Metric> metrics;
  for (const Metric& m : all_metrics()) {
    if (metric == "all" || metric == m.name) metrics.push_back(m);
  }
  PlotDocument doc;
  for (const Metric& m : metrics) doc.charts.push_back({m.title, "step", {}});
  for (const JobProgress& j : jobs) {
    doc.legend.push_back(absl::StrCat(j.job_id, " ", j.name, " (", j.recipe, ")"));
    for (size_t c = 0; c < metrics.size(); ++c) {
      PlotSeries series;
      for (const auto& [step, p] : j.by_step) {
        double v = 0;
        if (metric_value(metrics[c].name, p, j.data_parallel_ranks, &v)) series.points.push_back({static_cast<double>(step), v});
      }
      doc.charts[c].series.push_back(std::move(series));
    }
  }
  return render_svg(doc);
}

}  // namespace

Verb add_plot_verb(CLI::App& app) {
  struct Args {
    std::vector<std::string> job_ids;
    std::string path;
    std::string format;  // svg, png or csv; empty: from the --out file's extension
    std::string metric = "all";
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "plot", "write an SVG or PNG chart (or CSV) of jobs' loss, val_loss and tokens/s against the step (one line per "
      "job)");
  cmd->fallthrough();
  cmd->add_option("ID", a->job_ids, "job ids (job-<n>), one line each")->required();
  cmd->add_option("--out", a->path, "the file to write: FILE.svg, FILE.png or FILE.csv ('-': stdout, with -o)")
      ->required()
      ->type_name("FILE");
  cmd->add_option_function<std::string>(
         "-o,--output",
         [a](const std::string& value) {
           const std::string v = absl::AsciiStrToLower(value);
           if (v != "svg" && v != "png" && v != "csv") {
             throw CLI::ValidationError("--output", absl::StrCat("expected svg, png or csv, not '", value,
                                                                 "' (the file to write is --out FILE)"));
           }
           a->format = v;
         },
         "svg, png or csv (default: from the --out file's extension)")
      ->type_name("svg|png|csv");
  cmd->add_option("--metric", a->metric, "loss, val_loss, tokens_per_second or all (default: all, stacked)")
      ->check(CLI::IsMember({"loss", "val_loss", "tokens_per_second", "all"}))
      ->type_name("loss|val_loss|tokens_per_second|all");

  return {cmd, [a](Session& session) {
            std::string format = a->format;
            for (const char* known : {"svg", "png", "csv"}) {
              if (format.empty() && absl::EndsWithIgnoreCase(a->path, absl::StrCat(".", known))) format = known;
            }
            if (format.empty()) {
              return report({kExitUsage, absl::StrCat("plot: --out '", a->path,
                                                      "': name a .svg, .png or .csv file, or choose the format "
                                                      "with -o svg|png|csv (fp8ctl writes SVG, PNG or CSV)")});
            }
            if (auto e = session.connect()) return report(*e);
            std::vector<JobProgress> jobs;
            for (const std::string& id : a->job_ids) {
              v1::GetJobRequest req;
              req.set_job_id(id);
              v1::Job job;
              auto ctx = session.context();
              if (grpc::Status s = session.stub().GetJob(ctx.get(), req, &job); !s.ok()) {
                return report(session.error(s, absl::StrCat("plot ", id)));
              }
              StoredEventsResult events = read_stored_events(session, id, /*include_progress=*/true);
              if (!events.status.ok()) return report(session.error(events.status, absl::StrCat("plot ", id)));
              JobProgress& j = jobs.emplace_back();
              j.job_id = job.id();
              j.name = job.spec().name();
              j.recipe = recipe_name(job.spec().fp8().recipe());
              j.data_parallel_ranks = data_parallel_ranks(job.spec());
              // Per step, the latest report (a resumed attempt repeats steps).
              for (const v1::JobEvent& e : events.events) {
                if (e.has_progress()) j.by_step[e.progress().progress().step()] = e.progress().progress();
              }
              if (j.by_step.empty()) std::fprintf(stderr, "fp8ctl: plot: %s has no progress reports yet\n", id.c_str());
            }
            std::string text = format == "csv" ? progress_csv(jobs) : chart(jobs, a->metric);
            if (format == "png") {
              absl::StatusOr<std::string> png = render_png(text);
              if (!png.ok()) return report({kExitError, absl::StrCat("plot: ", png.status().message())});
              text = std::move(*png);
            }
            if (a->path == "-") {
              std::cout << text;
              return static_cast<int>(kExitOk);
            }
            std::ofstream file(a->path, std::ios::binary | std::ios::trunc);
            file << text;
            file.close();
            if (!file) return report({kExitError, absl::StrCat("plot: cannot write ", a->path)});
            std::cout << a->path << "\n";
            return static_cast<int>(kExitOk);
          }};
}

}  // namespace fp8::ctl
