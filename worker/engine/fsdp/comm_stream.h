// FSDP's communication thread. Every collective of a sharded model runs here, in the order
// it was queued, so that the next block's all-gather (or the last block's reduce-scatter)
// proceeds while the compute thread works, and so that a process group, which one thread
// must drive, only ever sees this one.
//
//   Handle h = stream.enqueue("gather layers.3", counts, [=](ProcessGroup& g) { ... });
//   ... compute ...
//   FP8_RETURN_IF_ERROR(stream.wait(h));   // the time spent here is "exposed"
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

#include "absl/status/status.h"
#include "worker/engine/dist/process_group.h"
#include "worker/engine/fsdp/comm_counters.h"

namespace fp8::engine::fsdp {

class CommStream {
 public:
  using Job = std::function<absl::Status(dist::ProcessGroup&)>;
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

  explicit CommStream(dist::ProcessGroup& group);
  ~CommStream();  // finishes the queued jobs, then joins the thread
  CommStream(const CommStream&) = delete;
  CommStream& operator=(const CommStream&) = delete;

  dist::ProcessGroup& group() { return group_; }

  // Queues `job` (it may capture tensors to keep them alive until it ran). `counts` are
  // added to the counters now; the job's running time is added when it ends. `what` names
  // the job in errors ("all_gather of layers.3").
  Handle enqueue(std::string what, const CommCounters& counts, Job job);
  // Blocks until the job ran; its status. Time spent blocked counts as exposed.
  absl::Status wait(const Handle& h);
  // enqueue + wait.
  absl::Status run(std::string what, const CommCounters& counts, Job job) { return wait(enqueue(std::move(what), counts, std::move(job))); }

  CommCounters counters() const;

 private:
  void loop();

  dist::ProcessGroup& group_;
  mutable std::mutex mu_;
  std::condition_variable work_;
  std::deque<std::shared_ptr<Pending>> queue_;
  bool stopping_ = false;
  absl::Status broken_;  // the first failure
  CommCounters counters_;
  std::thread thread_;
};

}  // namespace fp8::engine::fsdp
