// Progress reports in group commits: acknowledged in memory (ReportProgress), written
// every kProgressFlushInterval by the ticker without the coordinator's lock, or at once
// before anything else about a job is written or read back.
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log/log.h"
#include "common/status_macros.h"
#include "server/coordinator/coordinator.h"

namespace fp8::server {

Coordinator::ProgressBatch Coordinator::take_progress() {
  ProgressBatch batch;
  for (const std::string& id : progress_dirty_) {
    auto it = active_.find(id);
    if (it == active_.end()) continue;  // its final Commit wrote it
    batch.rows.push_back(ProgressBatch::Row{it->second.job, it->second.number, it->second.submitted_seq});
  }
  for (const v1::JobEvent& e : pending_progress_) {
    // A long job keeps a bounded, thinned history of its progress events.
    auto it = active_.find(e.job_id());
    if (it == active_.end() || ++it->second.progress_events < 100) continue;
    it->second.progress_events = 0;
    batch.thin.push_back(e.job_id());
  }
  batch.events = std::move(pending_progress_);
  pending_progress_.clear();
  progress_dirty_.clear();
  return batch;
}

absl::Status Coordinator::write_progress(const ProgressBatch& batch) {
  return progress_store_->transaction([&]() -> absl::Status {
    for (const ProgressBatch::Row& row : batch.rows) {
      FP8_RETURN_IF_ERROR(progress_store_->put_job(row.job, row.number, row.submitted_seq));
    }
    for (v1::JobEvent e : batch.events) FP8_RETURN_IF_ERROR(progress_store_->append_event(e).status());
    for (const std::string& id : batch.thin) {
      FP8_RETURN_IF_ERROR(progress_store_->thin_progress(id, options_.progress_events_per_job));
    }
    return absl::OkStatus();
  });
}

void Coordinator::return_progress(ProgressBatch batch) {
  for (ProgressBatch::Row& row : batch.rows) progress_dirty_.insert(row.job.id());
  batch.events.insert(batch.events.end(), std::make_move_iterator(pending_progress_.begin()),
                      std::make_move_iterator(pending_progress_.end()));
  pending_progress_ = std::move(batch.events);
}

absl::Status Coordinator::flush_progress() {
  absl::MutexLock flush_lock(&flush_mu_);  // after the ticker's flush, if one is being written
  if (pending_progress_.empty()) return absl::OkStatus();
  ProgressBatch batch = take_progress();
  if (absl::Status s = write_progress(batch); !s.ok()) {
    return_progress(std::move(batch));
    return s;
  }
  ++event_generation_;
  events_changed_.SignalAll();
  return absl::OkStatus();
}

void Coordinator::flush_progress_in_background() {
  if (pending_progress_.empty()) return;
  ProgressBatch batch = take_progress();
  // flush_mu_ is taken before mu_ is let go: a flush under mu_ from now on waits for
  // this one, so a job's rows and events reach the store in the order they happened.
  flush_mu_.Lock();
  mu_.Unlock();
  absl::Status written = write_progress(batch);
  flush_mu_.Unlock();
  mu_.Lock();
  if (!written.ok()) {
    log::error(absl::StrCat("writing progress: ", written.message()));
    return_progress(std::move(batch));
    return;
  }
  ++event_generation_;
  events_changed_.SignalAll();
}

}  // namespace fp8::server
