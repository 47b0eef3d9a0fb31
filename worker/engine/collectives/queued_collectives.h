// Collectives queued on a device the way kernels are: without the host waiting for them.
//
// A process group whose collectives run on a device (NCCL) may offer this
// (ProcessGroup::queued()). FSDP's communication stream (fsdp/comm_stream.h) then queues
// each of its jobs as a batch:
//
//   QueuedCollectives& q = *group.queued();
//   FP8_RETURN_IF_ERROR(q.open());         // behind the compute stream's work so far
//   ... group.all_gather(...) ...          // returns once queued on the group's stream
//   FP8_ASSIGN_OR_RETURN(int64_t t, q.close());
//   ... more compute, queued meanwhile ...
//   FP8_RETURN_IF_ERROR(q.order_after(t)); // the compute stream's later work waits for it
//
// "The compute stream" is the one the group was made with (the device's). Between open()
// and close() the group's collectives do not wait for completion, and their buffers must
// stay allocated until work on the compute stream queued after order_after() no longer
// needs them (the caching allocator reuses freed memory in the compute stream's order, so
// dropping them after order_after() is enough).
//
// Failures: a collective that does not complete within the group's timeout, or an error
// NCCL reports meanwhile, is found by a watchdog thread of the group, which aborts the
// communicator (that ends kernels still waiting for a peer, so the compute stream moves on
// with whatever the buffers hold) and breaks the group. health() returns that error from
// then on, as does every later call; a caller that reads results on the host checks
// health() after the read, so that a broken group is reported as such rather than as the
// garbage it left.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace fp8::engine::collectives {

class QueuedCollectives {
 public:
  virtual ~QueuedCollectives() = default;

  // Starts a batch behind the work queued on the compute stream so far.
  virtual absl::Status open() = 0;
  // Ends it: a ticket for its collectives' completion. `what` names it in a timeout's
  // error ("all_gather of layers.3").
  virtual absl::StatusOr<int64_t> close(const char* what) = 0;
  // Makes the compute stream's work queued from now on wait for the ticket's batch. The
  // host does not wait. Returns health().
  virtual absl::Status order_after(int64_t ticket) = 0;
  // OK, or the group's first failure.
  virtual absl::Status health() = 0;

  // Device time of the batches that completed since the last call: in collectives
  // (comm_seconds), and during which the compute stream stood waiting for one at an
  // order_after() (exposed_seconds). Measured with events on the device; a batch counts
  // once the watchdog saw it complete, so a step's figures may trail it slightly.
  struct Times {
    double comm_seconds = 0;
    double exposed_seconds = 0;
  };
  virtual Times take_times() = 0;
};

}  // namespace fp8::engine::collectives
