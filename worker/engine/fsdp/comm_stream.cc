#include "worker/engine/fsdp/comm_stream.h"

#include <chrono>

#include "absl/strings/str_cat.h"

namespace fp8::engine::fsdp {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}
}  // namespace

struct CommStream::Pending {
  std::string what;
  Job job;
  bool done = false;
  absl::Status status;
  std::condition_variable finished;
};

CommStream::CommStream(dist::ProcessGroup& group) : group_(group), thread_([this] { loop(); }) {}

CommStream::~CommStream() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  work_.notify_all();
  thread_.join();
}

CommStream::Handle CommStream::enqueue(std::string what, const CommCounters& counts, Job job) {
  auto p = std::make_shared<Pending>();
  p->what = std::move(what);
  p->job = std::move(job);
  {
    std::lock_guard<std::mutex> lock(mu_);
    counters_.all_gather_bytes_fp8 += counts.all_gather_bytes_fp8;
    counters_.all_gather_bytes_bf16 += counts.all_gather_bytes_bf16;
    counters_.all_gather_bytes_f32 += counts.all_gather_bytes_f32;
    counters_.reduce_scatter_bytes += counts.reduce_scatter_bytes;
    counters_.all_reduces += counts.all_reduces;
    counters_.all_reduce_bytes += counts.all_reduce_bytes;
    counters_.weight_scale_all_reduces += counts.weight_scale_all_reduces;
    counters_.amax_all_reduces += counts.amax_all_reduces;
    queue_.push_back(p);
  }
  work_.notify_one();
  return Handle(std::move(p));
}

absl::Status CommStream::wait(const Handle& h) {
  if (!h.valid()) return absl::InternalError("CommStream::wait: an empty handle");
  const Clock::time_point start = Clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  h.pending_->finished.wait(lock, [&] { return h.pending_->done; });
  counters_.exposed_seconds += seconds_between(start, Clock::now());
  return h.pending_->status;
}

CommCounters CommStream::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
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
      status = p->job(group_);
      const double seconds = seconds_between(start, Clock::now());
      lock.lock();
      counters_.comm_seconds += seconds;
      if (!status.ok()) {
        status = absl::Status(status.code(), absl::StrCat(p->what, ": ", status.message()));
        broken_ = status;
      }
    }
    p->status = std::move(status);
    p->done = true;
    p->job = nullptr;  // drop what it captured now, on this thread, before waking the waiter
    p->finished.notify_all();
  }
}

}  // namespace fp8::engine::fsdp
