// A process group: the collectives FSDP needs, over a fixed set of ranks.
//
// Backends: Gloo over TCP on CPU (gloo_process_group.h; host memory) and NCCL on CUDA
// (nccl/nccl_process_group.h; device memory, queued on the group's stream). Every call is
// collective: all ranks call it in the same order with the same sizes.
//
// Failure contract (the failure users of distributed training meet most often is
// surviving ranks hanging in a collective after one rank died): a collective whose peer
// died or stopped answering returns an error within the group's timeout, never hangs.
// The error is Unavailable (peer gone) or DeadlineExceeded (peer silent) and names the
// peer rank where it is known ("all_gather: lost rank 2 (connection closed)"). After one
// failure the group is broken: every later call fails at once with the first error.
//
// Determinism: a reduction gives the same bits on every rank and in every run with the
// same inputs and world size (the order of summation is fixed, not arrival-dependent).
//
// Not thread-safe: one thread drives a group (FSDP's prefetching runs every collective on
// its communication thread, or queues them on the device from the compute thread, see
// fsdp/comm_stream.h).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "worker/engine/collectives/queued_collectives.h"

namespace fp8::engine::collectives {

enum class ReduceOp : uint8_t { kSum, kMax };
const char* reduce_op_name(ReduceOp op);

// One all-gather of several in one call (ProcessGroup::all_gather_parts).
struct AllGatherPart {
  const void* send = nullptr;
  void* recv = nullptr;
  size_t bytes_per_rank = 0;
};
// One reduce-scatter of several in one call (ProcessGroup::reduce_scatter_parts).
struct ReduceScatterPart {
  const float* send = nullptr;
  float* recv = nullptr;
  int64_t count_per_rank = 0;
};
// The same in bf16 (the raw bits of each value): two bytes an element on the wire, where
// FSDP's fsdp.reduce_dtype asks for bf16 gradients.
struct Bf16ReduceScatterPart {
  const uint16_t* send = nullptr;
  uint16_t* recv = nullptr;
  int64_t count_per_rank = 0;
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "gloo", "nccl".
  virtual std::string backend_name() const = 0;

  // recv[r * bytes_per_rank, (r + 1) * bytes_per_rank) = rank r's send, on every rank.
  // `send` may be recv + rank * bytes_per_rank (in place). Bytes travel as they are: fp8
  // payloads cost one byte per element on the wire.
  virtual absl::Status all_gather(const void* send, void* recv, size_t bytes_per_rank) = 0;

  // recv[i] = op over ranks r of send_r[rank * count_per_rank + i], i < count_per_rank:
  // each rank gets its slice of the reduction of everyone's `send` (size * count_per_rank
  // floats). A mean is a sum of inputs the caller scaled by 1 / size.
  virtual absl::Status reduce_scatter(const float* send, float* recv, int64_t count_per_rank, ReduceOp op) = 0;

  // Several all-gathers (reduce-scatters) in one call: each part exactly as all_gather
  // (reduce_scatter) with its arguments, in order. NCCL issues the parts as one group,
  // which it launches together (about the cost of one collective); the default, one
  // collective after another (on Gloo a round trip each).
  virtual absl::Status all_gather_parts(std::span<const AllGatherPart> parts);
  virtual absl::Status reduce_scatter_parts(std::span<const ReduceScatterPart> parts, ReduceOp op);

  // Sums of bf16 values, each part as reduce_scatter(kSum) of its own: recv[i] = the sum
  // over ranks of send_r[rank * count_per_rank + i], rounded to bf16 (to nearest even).
  // Gloo sums the widened values in fp32 in rank order and rounds once (deterministic, as
  // every reduction here); NCCL sums as its bf16 reduce-scatter does. The default refuses.
  virtual absl::Status reduce_scatter_bf16_parts(std::span<const Bf16ReduceScatterPart> parts);

  // In place, on every rank.
  virtual absl::Status all_reduce(float* data, int64_t count, ReduceOp op) = 0;
  virtual absl::Status all_reduce(double* data, int64_t count, ReduceOp op) = 0;

  // Rank root's `bytes` bytes into every other rank's `data`.
  virtual absl::Status broadcast(void* data, size_t bytes, int root) = 0;

  virtual absl::Status barrier() = 0;

  // Where the group can queue collectives without the host waiting (queued_collectives.h):
  // NCCL made with the device's compute stream. Null for groups that compute on the host.
  virtual QueuedCollectives* queued() { return nullptr; }

  // How long a collective waits for a peer before failing. A new value holds for the
  // collectives that start after it, so the trainer can tighten it once it knows the pace of
  // a step (train/collective_timeout.h). Safe to call from any thread.
  absl::Duration timeout() const { return absl::Nanoseconds(timeout_ns_.load(std::memory_order_relaxed)); }
  void set_timeout(absl::Duration timeout) {
    timeout_ns_.store(absl::ToInt64Nanoseconds(timeout), std::memory_order_relaxed);
  }

 private:
  std::atomic<int64_t> timeout_ns_{absl::ToInt64Nanoseconds(absl::Seconds(300))};
};

// Options every backend takes.
struct ProcessGroupOptions {
  // Key prefix of this group in the store ("job-7/attempt-2/"); two groups on one store
  // need different prefixes.
  std::string prefix;
  // How long a collective (and the rendezvous) waits for a peer before failing.
  absl::Duration timeout = absl::Seconds(300);
};

}  // namespace fp8::engine::collectives
