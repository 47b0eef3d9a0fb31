#include "cuda/pinned_uploads.h"

#include <cstring>

#include "cuda/cuda_status.h"

namespace fp8::cuda {
namespace {

size_t block_size_for(size_t bytes) {
  size_t size = PinnedUploads::kMinBlockBytes;
  while (size < bytes) size *= 2;
  return size;
}

}  // namespace

PinnedUploads::~PinnedUploads() {
  DeviceGuard guard(device_);
  // Copies out of the blocks may still be queued: let them finish before the memory goes.
  cudaStreamSynchronize(stream_);
  for (Block& b : blocks_) {
    cudaEventDestroy(b.done);
    cudaFreeHost(b.host);
  }
}

absl::Status PinnedUploads::acquire(size_t bytes, Block** out) {
  const size_t size = block_size_for(bytes);
  Block* oldest = nullptr;
  for (Block& b : blocks_) {
    if (b.bytes != size) continue;
    if (b.last_use == 0) {
      *out = &b;
      return absl::OkStatus();
    }
    const cudaError_t e = cudaEventQuery(b.done);
    if (e == cudaSuccess) {
      *out = &b;
      return absl::OkStatus();
    }
    if (e != cudaErrorNotReady) return cuda_status(e, "cudaEventQuery");
    if (oldest == nullptr || b.last_use < oldest->last_use) oldest = &b;
  }
  if (oldest != nullptr && pooled_bytes_ + size > kMaxPooledBytes) {
    // The pool is as large as it may grow: wait for the block whose copy was queued first.
    if (auto s = cuda_status(cudaEventSynchronize(oldest->done), "cudaEventSynchronize"); !s.ok()) return s;
    *out = oldest;
    return absl::OkStatus();
  }
  Block b;
  b.bytes = size;
  if (auto s = cuda_status(cudaMallocHost(&b.host, size), "cudaMallocHost"); !s.ok()) return s;
  if (auto s = cuda_status(cudaEventCreateWithFlags(&b.done, cudaEventDisableTiming), "cudaEventCreateWithFlags");
      !s.ok()) {
    cudaFreeHost(b.host);
    return s;
  }
  pooled_bytes_ += size;
  blocks_.push_back(b);
  *out = &blocks_.back();
  return absl::OkStatus();
}

absl::Status PinnedUploads::upload(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  Block* block = nullptr;
  if (auto s = acquire(bytes, &block); !s.ok()) return s;
  std::memcpy(block->host, src, bytes);
  if (auto s = cuda_status(cudaMemcpyAsync(dst, block->host, bytes, cudaMemcpyHostToDevice, stream_),
                           "cudaMemcpyAsync");
      !s.ok()) {
    return s;
  }
  if (auto s = cuda_status(cudaEventRecord(block->done, stream_), "cudaEventRecord"); !s.ok()) return s;
  block->last_use = ++uploads_;
  return absl::OkStatus();
}

}  // namespace fp8::cuda
