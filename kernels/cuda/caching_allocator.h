// The CUDA backend's device memory: a caching allocator that hands out blocks in stream
// order, so that a training step allocates and frees its activations, gathered weights
// and gradients without cudaMalloc/cudaFree (each of which can cost milliseconds, and
// cudaFree waits for the whole device).
//
// It is CUDA's own stream-ordered allocator (cudaMallocAsync / cudaFreeAsync) on the
// device's default memory pool, told to keep what it holds (release threshold: all of
// it) instead of returning memory to the driver at every synchronisation. A block freed
// on the stream is reused only by work queued on that stream after the free, which is
// what lets a tensor be dropped while kernels that read it are still queued. Memory a
// collective uses on another stream must be done there before it is freed (FSDP waits
// for its collectives on the host).
//
// Counts the bytes asked for and not returned, and their peak, for the per-step peak
// memory the trainer reports; `reserved` is what the pool holds from the driver.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "absl/status/statusor.h"
#include "backend/memory_counter.h"
#include "fp8/fp8.h"

namespace fp8::cuda {

class CachingAllocator {
 public:
  // For `device` (current when called) and work on `stream`. Fails when the device has
  // no memory pools (a driver too old for CUDA 13 would).
  static absl::StatusOr<std::unique_ptr<CachingAllocator>> create(int device, cudaStream_t stream);

  // The current device must be the allocator's. 256-byte aligned; a zero-byte request
  // still gets a distinct pointer.
  absl::StatusOr<void*> allocate(size_t bytes);
  // Queued on the stream; null is ignored, an unknown pointer is left alone.
  void deallocate(void* p);

  MemoryStats stats() const;
  void reset_peak() { counter_.reset_peak(); }

 private:
  CachingAllocator(cudaMemPool_t pool, cudaStream_t stream) : pool_(pool), stream_(stream) {}

  const cudaMemPool_t pool_;
  const cudaStream_t stream_;
  mutable std::mutex mu_;  // guards sizes_
  std::unordered_map<void*, size_t> sizes_;
  detail::MemoryCounter counter_;
};

}  // namespace fp8::cuda
