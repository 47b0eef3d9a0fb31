#include "client/fp8ctl/jobs_table.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/fp8ctl/format.h"
#include "client/fp8ctl/table.h"

namespace fp8::ctl {
namespace {

std::string progress_cell(const v1::Job& job) {
  const int64_t total = job.spec().train().steps();
  const int64_t step = job.has_latest_progress() ? job.latest_progress().step() : 0;
  return total > 0 ? absl::StrCat(step, "/", total) : absl::StrCat(step);
}

// Why it waits, or why it failed.
std::string reason_cell(const v1::Job& job) {
  if (!job.pending_reason().empty()) return job.pending_reason();
  return job.failure_reason().empty() ? std::string("-") : job.failure_reason();
}

std::string loss_cell(const v1::Job& job) {
  return job.has_latest_progress() ? absl::StrFormat("%.4f", job.latest_progress().loss()) : std::string("-");
}

}  // namespace

std::string jobs_table(const v1::ListJobsResponse& r, int64_t now_unix_ms, bool wide) {
  std::vector<std::string> headers = {"ID", "NAME", "OWNER", "STATE", "PROGRESS", "RECIPE", "WORLD", "SUBMITTED", "AGE"};
  if (wide) {
    for (const char* h : {"DEVICE", "PRIORITY", "LOSS", "ATTEMPTS", "RESTARTS LEFT", "CHECKPOINT", "FINISHED"}) {
      headers.push_back(h);
    }
  }
  headers.push_back("REASON");
  Table t(headers);
  for (const v1::Job& j : r.jobs()) {
    const v1::JobSpec& s = j.spec();
    std::vector<std::string> row = {j.id(), s.name(), s.owner().empty() ? "-" : s.owner(), job_state_name(j.state()),
                                    progress_cell(j), recipe_name(s.fp8().recipe()),
                                    absl::StrCat(s.resources().world_size()), local_time(j.created_unix_ms()),
                                    age(now_unix_ms - j.created_unix_ms())};
    if (wide) {
      for (std::string cell :
           {device_name(s.resources().device()), absl::StrCat(s.priority()), loss_cell(j), absl::StrCat(j.attempts()),
            absl::StrCat(j.restarts_left()),
            j.last_checkpoint_step() > 0 ? absl::StrCat("step ", j.last_checkpoint_step()) : std::string("-"),
            local_time(j.finished_unix_ms())}) {
        row.push_back(std::move(cell));
      }
    }
    row.push_back(reason_cell(j));
    t.add_row(std::move(row));
  }
  return t.render();
}

std::string job_name(const std::string& job_id) { return absl::StrCat("job/", job_id); }

}  // namespace fp8::ctl
