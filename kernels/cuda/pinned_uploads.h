// Host-to-device copies that do not wait (Backend::queue_copy_from_host on CUDA).
//
// cudaMemcpyAsync from pageable memory may synchronise, and from pinned memory the host
// buffer must stay untouched until the copy has run. So each upload first copies the
// caller's bytes into a pinned block of this pool (a memcpy on the host), queues the DMA
// from there, and records an event after it: the block is reused once that event has
// passed, and the caller's buffer is free as soon as upload() returns.
//
// Blocks come in power-of-two sizes from 4 KiB up; a block whose event has passed is
// reused, else another is allocated. A training step queues a few hundred small uploads
// (token ids, delayed-scaling scales) while the GPU runs behind, so the pool settles at
// that many blocks. Past kMaxPooledBytes of pinned memory the oldest busy block of the
// size is waited for instead of growing further.
//
// Not thread-safe on its own: the backend serialises calls.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"

namespace fp8::cuda {

class PinnedUploads {
 public:
  static constexpr size_t kMinBlockBytes = 4096;
  static constexpr size_t kMaxPooledBytes = size_t{256} << 20;

  // Uploads on `stream` of `device` (which the caller makes current for every call).
  PinnedUploads(int device, cudaStream_t stream) : device_(device), stream_(stream) {}
  ~PinnedUploads();
  PinnedUploads(const PinnedUploads&) = delete;
  PinnedUploads& operator=(const PinnedUploads&) = delete;

  // Queues dst[0, bytes) = src[0, bytes) on the stream; src may be reused on return.
  absl::Status upload(void* dst, const void* src, size_t bytes);

  // Pinned bytes held and blocks, for tests and diagnostics.
  size_t pooled_bytes() const { return pooled_bytes_; }
  size_t blocks() const { return blocks_.size(); }

 private:
  struct Block {
    void* host = nullptr;  // pinned
    size_t bytes = 0;
    cudaEvent_t done = nullptr;  // recorded after the last copy out of the block
    uint64_t last_use = 0;       // upload counter at that copy; 0: never used
  };

  // A block of at least `bytes` that no queued copy still reads.
  absl::Status acquire(size_t bytes, Block** out);

  const int device_;
  const cudaStream_t stream_;
  std::vector<Block> blocks_;
  size_t pooled_bytes_ = 0;
  uint64_t uploads_ = 0;
};

}  // namespace fp8::cuda
