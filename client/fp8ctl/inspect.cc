#include "client/fp8ctl/inspect.h"

#include <algorithm>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/fp8ctl/format.h"
#include "client/fp8ctl/table.h"

namespace fp8::ctl {

std::string worker_ranks_cell(const v1::WorkerInfo& worker) {
  std::vector<std::string> parts;
  for (const v1::RankStatus& r : worker.ranks()) {
    parts.push_back(r.job_id().empty() ? std::string("(other user)") : absl::StrCat(r.job_id(), " r", r.rank()));
  }
  return parts.empty() ? std::string("-") : absl::StrJoin(parts, ", ");
}

std::string heartbeat_age(int64_t last_heartbeat_unix_ms, int64_t now_unix_ms) {
  if (last_heartbeat_unix_ms <= 0) return "never";
  const int64_t ms = std::max<int64_t>(0, now_unix_ms - last_heartbeat_unix_ms);
  if (ms < 60'000) return absl::StrFormat("%.1fs ago", static_cast<double>(ms) / 1000.0);
  return absl::StrCat(age(ms), " ago");
}

std::string workers_table(const v1::ListWorkersResponse& response, int64_t now_unix_ms, bool wide) {
  std::vector<std::string> headers = {"NAME", "DEVICE", "ADDRESS", "STATE", "JOB/RANK", "LAST HEARTBEAT"};
  if (wide) headers.insert(headers.end(), {"KIND", "CPUS", "MEMORY", "RANK STATES", "HEARTBEAT AT"});
  Table t(headers);
  for (const v1::WorkerInfo& w : response.workers()) {
    const std::string state =
        w.state() == v1::WorkerInfo::STATE_UNSPECIFIED ? std::string("UNKNOWN") : v1::WorkerInfo::State_Name(w.state());
    const std::string device = w.device_name().empty() ? device_name(w.device_kind()) : w.device_name();
    std::vector<std::string> row = {w.worker_id(), device, w.address().empty() ? "-" : w.address(), state,
                                    worker_ranks_cell(w), heartbeat_age(w.last_heartbeat_unix_ms(), now_unix_ms)};
    if (wide) {
      std::vector<std::string> rank_states;
      for (const v1::RankStatus& r : w.ranks()) {
        rank_states.push_back(r.state() == v1::RankStatus::STATE_UNSPECIFIED ? std::string("UNKNOWN")
                                                                             : v1::RankStatus::State_Name(r.state()));
      }
      row.push_back(device_name(w.device_kind()));
      row.push_back(w.cpus() > 0 ? absl::StrCat(w.cpus()) : "-");
      row.push_back(w.memory_gb() > 0 ? absl::StrFormat("%.1f GiB", w.memory_gb()) : "-");
      row.push_back(rank_states.empty() ? std::string("-") : absl::StrJoin(rank_states, ", "));
      row.push_back(local_time(w.last_heartbeat_unix_ms()));
    }
    t.add_row(std::move(row));
  }
  return t.render();
}

std::string operand_name(v1::AmaxHistory::Operand operand) {
  if (operand == v1::AmaxHistory::OPERAND_UNSPECIFIED) return "-";
  return absl::AsciiStrToLower(v1::AmaxHistory::Operand_Name(operand));
}

std::string amax_report(const std::string& job_id, const v1::GetJobAmaxResponse& response) {
  if (response.histories().empty()) {
    return absl::StrCat(job_id,
                        " has no amax histories: its recipe does not use delayed scaling, or it has not reported yet\n");
  }
  Table t({"LAYER", "OPERAND", "AMAX", "HISTORY MAX", "SCALE", "LEN"});
  for (const v1::AmaxHistory& h : response.histories()) {
    const bool empty = h.history().empty();
    const float newest = empty ? 0.0f : h.history(h.history_size() - 1);
    const float max = empty ? 0.0f : *std::max_element(h.history().begin(), h.history().end());
    t.add_row({h.layer(), operand_name(h.operand()), empty ? "-" : absl::StrFormat("%.4g", newest),
              empty ? "-" : absl::StrFormat("%.4g", max), absl::StrFormat("%.4g", h.scale()),
              absl::StrCat(h.history_size())});
  }
  return absl::StrCat(job_id, " amax histories at step ", response.step(), " (", response.histories_size(),
                      " casts)\n", t.render());
}

std::string amax_by_rank_report(const std::string& job_id, const v1::GetJobAmaxResponse& response) {
  if (response.by_rank().empty()) {
    return absl::StrCat(job_id,
                        " has no per-rank amaxes: it has not reported yet, or ended long ago or before a coordinator "
                        "restart\n");
  }
  size_t ranks = 0;
  for (const v1::RankAmaxes& r : response.by_rank()) ranks = std::max(ranks, static_cast<size_t>(r.amax_size()));
  std::vector<std::string> headers = {"LAYER", "OPERAND", "STEP"};
  for (size_t i = 0; i < ranks; ++i) headers.push_back(absl::StrCat("RANK ", i));
  headers.push_back("LARGEST");
  headers.push_back("RUN MAX");
  Table t(headers);
  for (const v1::RankAmaxes& r : response.by_rank()) {
    std::vector<std::string> row = {r.layer(), operand_name(r.operand()), absl::StrCat(r.step())};
    int largest = -1;
    for (int i = 0; i < r.amax_size(); ++i) {
      row.push_back(r.amax(i) < 0 ? "-" : absl::StrFormat("%.4g", r.amax(i)));
      if (r.amax(i) >= 0 && (largest < 0 || r.amax(i) > r.amax(largest))) largest = i;
    }
    for (size_t i = static_cast<size_t>(r.amax_size()); i < ranks; ++i) row.push_back("-");
    row.push_back(largest < 0 ? "-" : absl::StrCat("rank ", largest));
    const v1::RankAmaxes::Point* top = nullptr;
    for (const v1::RankAmaxes::Point& p : r.history()) {
      if (top == nullptr || p.amax() > top->amax()) top = &p;
    }
    row.push_back(top == nullptr ? "-" : absl::StrFormat("%.4g (rank %d, step %d)", top->amax(), top->rank(), top->step()));
    t.add_row(std::move(row));
  }
  return absl::StrCat(job_id, " amax by rank (each rank's own, at the newest report step)\n", t.render());
}

}  // namespace fp8::ctl
