// FSDP's communication stream. Every collective of a sharded model goes through here, in
// the order it was queued, each one behind the compute work queued before it, so that the
// next block's all-gather (or the last block's reduce-scatter) proceeds while the device
// computes, and so that a process group, which one thread must drive, only ever sees one.
//
//   Handle h = stream.enqueue("gather layers.3", counts, [=](ProcessGroup& g) { ... });
//   ... compute ...
//   FP8_RETURN_IF_ERROR(stream.wait(h));   // compute queued from here on sees the result
//
// Two ways to run, chosen by the group:
//   - Host groups (Gloo; and any group without ProcessGroup::queued()): jobs run on a
//     thread of this stream, which first waits for a fence after the compute queued before
//     the job (so the thread that queues kernels never waits for the device), and wait()
//     blocks the caller until the job ran. Time blocked there counts as exposed.
//   - Device-queued groups (NCCL made with the device's stream, collectives/queued_collectives.h):
//     jobs run at once on the caller's thread and only queue their collectives on the
//     group's stream behind the compute stream's work; wait() makes the compute stream
//     wait for them, and the host waits for nothing. A job's captures (its buffers) are
//     kept until that wait, after which dropping them is ordered behind the collective.
//
// After a collective fails, the jobs queued behind it fail with the same error without
// running: the group is broken (process_group.h) and every rank is about to stop.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "fp8/fp8.h"
#include "worker/engine/collectives/process_group.h"
#include "worker/engine/fsdp/comm_counters.h"

namespace fp8::engine::fsdp {

class CommStream {
 public:
  using Job = std::function<absl::Status(collectives::ProcessGroup&)>;
  struct Pending;
  // A queued job; copyable, wait on any copy.
  class Handle {
   public:
    Handle() = default;
    bool valid() const { return pending_ != nullptr; }

   private:
    friend class CommStream;
    explicit Handle(std::shared_ptr<Pending> p) : pending_(std::move(p)) {}
    std::shared_ptr<Pending> pending_;
  };

  // `backend` is the device whose compute the collectives are ordered with (its fences).
  CommStream(collectives::ProcessGroup& group, Backend& backend);
  ~CommStream();  // finishes the queued jobs, then joins the thread
  CommStream(const CommStream&) = delete;
  CommStream& operator=(const CommStream&) = delete;

  collectives::ProcessGroup& group() { return group_; }
  // The group queues its collectives on the device (the host never waits for them).
  bool queued_on_device() const { return queued_ != nullptr; }

  // Queues `job` behind the compute queued so far (it may capture tensors to keep them
  // alive until it ran). `counts` are added to the counters now; the job's running time is
  // added when it ends. `what` names the job in errors ("all_gather of layers.3").
  Handle enqueue(std::string what, const CommCounters& counts, Job job);
  // The job's status, once compute queued from now on is ordered after it: on a host group
  // the caller blocks until the job ran; on a device-queued one the compute stream waits.
  absl::Status wait(const Handle& h);
  // enqueue + wait.
  absl::Status run(std::string what, const CommCounters& counts, Job job) { return wait(enqueue(std::move(what), counts, std::move(job))); }
  // OK, or the first failure of a job or of the group (a device-queued group's watchdog
  // finds a collective that overran its timeout). Check it after reading on the host what
  // a collective produced.
  absl::Status health();

  CommCounters counters() const;

 private:
  void loop();
  void add_counts(const CommCounters& counts);
  Handle enqueue_on_device(std::shared_ptr<Pending> p);
  absl::Status wait_on_device(Pending& p);

  collectives::ProcessGroup& group_;
  Backend& backend_;
  collectives::QueuedCollectives* queued_;  // null: jobs run on thread_
  mutable std::mutex mu_;
  std::condition_variable work_;
  std::deque<std::shared_ptr<Pending>> queue_;
  bool stopping_ = false;
  absl::Status broken_;  // the first failure
  mutable CommCounters counters_;  // counters() adds a device-queued group's times as it reads
  // Device-queued jobs not yet waited for: their captures live until then.
  std::vector<std::shared_ptr<Pending>> unordered_;
  std::thread thread_;
};

}  // namespace fp8::engine::fsdp
