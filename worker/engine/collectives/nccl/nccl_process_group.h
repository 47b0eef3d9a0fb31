// The NCCL backend of ProcessGroup: collectives between CUDA devices, one rank per device.
//
// Built wherever the CUDA toolkit (with NCCL in its lib dir) is found; FP8_HAVE_NCCL is
// defined for code that links fp8_engine_collectives_nccl. It needs a GPU and its driver at run
// time: NCCL cannot initialise without them.
//
// Memory: every pointer handed to a collective is device memory on the group's CUDA device
// (cudaMalloc or managed memory); host memory is rejected with InvalidArgument.
//
// Ordering: a collective is queued on the group's stream and the call returns once it has
// completed on the device, so its results are ready for any stream and for the host when
// the call returns. The group's stream does not wait for other streams: the caller makes
// the inputs ready before the call (for instance by synchronising the event recorded after
// the kernel that produced them).
//
// Queued mode: a group made with the device's compute stream also offers
// QueuedCollectives (queued()): between open() and close() its collectives queue on the
// group's stream behind the compute stream's work and return at once, and order_after()
// makes the compute stream wait for them with an event. The host then waits for nothing;
// a watchdog thread holds the failure contract instead, checking each batch against the
// timeout and NCCL's error state every millisecond and aborting the communicator (which
// ends kernels still waiting for a peer) when one fails. FSDP runs this way on GPUs.
//
// Failure contract (process_group.h): the communicator is created non-blocking, and every
// wait (communicator creation included) polls the stream and NCCL's asynchronous error
// state until the work is done, NCCL reports an error, or the group's timeout passes. On
// a timeout the communicator is aborted (ncclCommAbort, which also stops kernels still
// waiting for a peer) and the call returns DeadlineExceeded ("nccl all_gather: no progress
// within 30 s; a peer rank died or hangs ..."); an error NCCL reports (a peer's process or
// the network failed) returns Unavailable. NCCL does not say which peer failed, so unlike
// Gloo's errors these name no rank. After one failure the group is broken: every later
// call fails at once with the first error. A rejected argument (host memory, a root out of
// range) breaks the group as well, since this rank is then out of step with its peers.
//
// The calling thread's current CUDA device is switched to the group's device for the
// duration of each call and restored after.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/engine/collectives/kv_store.h"
#include "worker/engine/collectives/process_group.h"

namespace fp8::engine::collectives {

// Rank `rank` of a `size`-rank NCCL group on CUDA device `cuda_device`. Every rank calls it
// with the same store, size and options.prefix. Rank 0 creates NCCL's unique id and
// publishes it in `store` under nccl_unique_id_key(options.prefix); the other ranks wait up
// to options.timeout for it. Creating the communicator then waits for all ranks, again up to
// options.timeout (DeadlineExceeded, and the half-made communicator is aborted).
//
// `stream` is the cudaStream_t (of `cuda_device`) the collectives run on; the caller keeps
// it alive for the group's lifetime, and each collective also waits for the work queued on
// it before. Null: the group creates (and destroys) its own non-blocking stream.
// `compute_stream` (of the same device, alive as long as the group) enables the queued
// mode above; null: the group only waits on the host (FSDP then runs its collectives on a
// communication thread).
//
// Errors: InvalidArgument for a bad rank, size, timeout or device index; FailedPrecondition
// when no CUDA device is usable (the message carries CUDA's reason); the store's error when
// the unique id does not arrive; DeadlineExceeded / Unavailable / Internal from NCCL.
absl::StatusOr<std::unique_ptr<ProcessGroup>> make_nccl_process_group(KeyValueStore& store, int rank, int size,
                                                                      const ProcessGroupOptions& options,
                                                                      int cuda_device, void* stream,
                                                                      void* compute_stream = nullptr);

// The store key under which rank 0 publishes NCCL's 128-byte unique id (as 256 lowercase
// hex digits): prefix + "nccl/unique_id".
std::string nccl_unique_id_key(const std::string& prefix);

}  // namespace fp8::engine::collectives
