#include "worker/engine/fsdp/comm_stream.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"

namespace fp8::engine::fsdp {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

absl::Status named(const std::string& what, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
}
}  // namespace

struct CommStream::Pending {
  std::string what;
  Job job;
  // Host groups: the compute the job must wait for (made when it was queued).
  std::unique_ptr<Fence> after;
  // Device-queued groups: the batch's ticket, until the compute stream was ordered after it.
  int64_t ticket = -1;
  bool done = false;
  absl::Status status;
  std::condition_variable finished;
};

CommStream::CommStream(collectives::ProcessGroup& group, Backend& backend)
    : group_(group), backend_(backend), queued_(group.queued()) {
  if (queued_ == nullptr) thread_ = std::thread([this] { loop(); });
}

CommStream::~CommStream() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  work_.notify_all();
  if (thread_.joinable()) thread_.join();
  // Whatever a device-queued job still holds is released behind its collective.
  const std::vector<std::shared_ptr<Pending>> left = unordered_;  // wait_on_device erases
  for (const std::shared_ptr<Pending>& p : left) (void)wait_on_device(*p);
}

void CommStream::add_counts(const CommCounters& counts) {
  counters_.all_gather_bytes_fp8 += counts.all_gather_bytes_fp8;
  counters_.all_gather_bytes_bf16 += counts.all_gather_bytes_bf16;
  counters_.all_gather_bytes_f32 += counts.all_gather_bytes_f32;
  counters_.reduce_scatter_bytes_f32 += counts.reduce_scatter_bytes_f32;
  counters_.reduce_scatter_bytes_bf16 += counts.reduce_scatter_bytes_bf16;
  counters_.all_reduces += counts.all_reduces;
  counters_.all_reduce_bytes += counts.all_reduce_bytes;
  counters_.weight_scale_all_reduces += counts.weight_scale_all_reduces;
  counters_.amax_all_reduces += counts.amax_all_reduces;
}

CommStream::Handle CommStream::enqueue(std::string what, const CommCounters& counts, Job job) {
  auto p = std::make_shared<Pending>();
  p->what = std::move(what);
  p->job = std::move(job);
  {
    std::lock_guard<std::mutex> lock(mu_);
    add_counts(counts);
  }
  if (queued_ != nullptr) return enqueue_on_device(std::move(p));
  // The thread runs the job once the compute queued so far is done; this thread goes on.
  absl::StatusOr<std::unique_ptr<Fence>> fence = backend_.fence();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (fence.ok()) {
      p->after = std::move(*fence);
    } else if (broken_.ok()) {
      broken_ = named(p->what, fence.status());
    }
    queue_.push_back(p);
  }
  work_.notify_one();
  return Handle(std::move(p));
}

CommStream::Handle CommStream::enqueue_on_device(std::shared_ptr<Pending> p) {
  absl::Status status = health();
  if (status.ok()) {
    status = queued_->open();
    if (status.ok()) {
      status = p->job(group_);
      absl::StatusOr<int64_t> ticket = queued_->close(p->what.c_str());
      if (ticket.ok()) {
        p->ticket = *ticket;
      } else if (status.ok()) {
        status = ticket.status();
      }
    }
    if (!status.ok()) status = named(p->what, status);
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!status.ok() && broken_.ok()) broken_ = status;
  p->status = std::move(status);
  p->done = true;
  if (p->ticket >= 0) {
    unordered_.push_back(p);
  } else {
    p->job = nullptr;  // nothing was queued that could still read its buffers
  }
  return Handle(std::move(p));
}

absl::Status CommStream::wait_on_device(Pending& p) {
  absl::Status ordered;
  if (p.ticket >= 0) {
    ordered = queued_->order_after(p.ticket);
    p.ticket = -1;
    // Dropped now, behind the compute stream's wait: the caching allocator reuses the
    // buffers only for work queued after it.
    p.job = nullptr;
  }
  std::lock_guard<std::mutex> lock(mu_);
  std::erase_if(unordered_, [&](const std::shared_ptr<Pending>& q) { return q.get() == &p; });
  if (!ordered.ok() && broken_.ok()) broken_ = named(p.what, ordered);
  return p.status.ok() ? ordered : p.status;
}

absl::Status CommStream::wait(const Handle& h) {
  if (!h.valid()) return absl::InternalError("CommStream::wait: an empty handle");
  if (queued_ != nullptr) return wait_on_device(*h.pending_);
  const Clock::time_point start = Clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  h.pending_->finished.wait(lock, [&] { return h.pending_->done; });
  counters_.exposed_seconds += seconds_between(start, Clock::now());
  return h.pending_->status;
}

absl::Status CommStream::health() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!broken_.ok()) return broken_;
  }
  return queued_ != nullptr ? queued_->health() : absl::OkStatus();
}

CommCounters CommStream::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (queued_ != nullptr) {
    // Measured on the device, as the batches complete.
    const collectives::QueuedCollectives::Times t = queued_->take_times();
    counters_.comm_seconds += t.comm_seconds;
    counters_.exposed_seconds += t.exposed_seconds;
  }
  return counters_;
}

void CommStream::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    work_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and everything queued has run
    std::shared_ptr<Pending> p = queue_.front();
    queue_.pop_front();
    absl::Status status = broken_;
    if (status.ok()) {
      lock.unlock();
      const Clock::time_point start = Clock::now();
      status = p->after->wait();
      if (status.ok()) status = p->job(group_);
      const double seconds = seconds_between(start, Clock::now());
      lock.lock();
      counters_.comm_seconds += seconds;
      if (!status.ok()) {
        status = named(p->what, status);
        broken_ = status;
      }
    }
    p->status = std::move(status);
    p->done = true;
    p->job = nullptr;  // drop what it captured now, on this thread, before waking the waiter
    p->after.reset();
    p->finished.notify_all();
  }
}

}  // namespace fp8::engine::fsdp
