// Device-to-host reads that do not wait (Backend::queue_read on CUDA).
//
// A copy into pageable memory makes the host wait for the stream; into pinned memory it is
// queued like a kernel. So each read takes a slot of pinned memory from this pool, queues
// the copy into it and records an event; QueuedRead::wait() waits for that event (the
// device got there, not necessarily further) and copies the bytes out. The slot returns
// to the pool when the read is destroyed, after its copy has run.
//
// Slots are Backend::kMaxQueuedReadBytes each, allocated 64 at a time and kept until the
// pool goes (cudaFreeHost would make the host wait for the whole device). A trainer keeps
// one or two reads in flight.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/status/statusor.h"
#include "fp8/fp8.h"

namespace fp8::cuda {

class PinnedReads {
 public:
  static constexpr size_t kSlotBytes = Backend::kMaxQueuedReadBytes;
  static constexpr size_t kSlotsPerChunk = 64;

  // Reads on `stream` of `device` (which the caller makes current for every call).
  PinnedReads(int device, cudaStream_t stream) : device_(device), stream_(stream) {}
  ~PinnedReads();  // every read must be gone
  PinnedReads(const PinnedReads&) = delete;
  PinnedReads& operator=(const PinnedReads&) = delete;

  absl::StatusOr<std::unique_ptr<QueuedRead>> read(const void* src, size_t bytes);

 private:
  class Read;
  void give_back(void* slot);

  const int device_;
  const cudaStream_t stream_;
  std::mutex mu_;
  std::vector<void*> chunks_;  // pinned, kSlotsPerChunk slots each
  std::vector<void*> free_;
};

}  // namespace fp8::cuda
