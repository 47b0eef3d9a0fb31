// A growable device scratch buffer owned by the backend (amax scratch, broadcast scale
// vectors, bf16 copies of a bias, GEMM temporaries).
//
// Work queued on the backend's stream may still be reading the old buffer when it grows,
// so growing first synchronises that stream, then frees and reallocates. That is the one
// host synchronisation outside synchronize()/copy_to_host(); the buffer starts at a size
// that covers the usual vectors and grows geometrically, so it happens a handful of times
// per process at most.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "absl/status/statusor.h"

namespace fp8::cuda {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // A pointer (256-byte aligned, from cudaMalloc) to at least `bytes` bytes. The contents
  // are not preserved across growth. The current device must be the buffer's device.
  absl::StatusOr<void*> get(size_t bytes, cudaStream_t stream);

  // Frees the buffer now (cudaFree waits for the device), with the owner's device current.
  void release();

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

// Carves 256-byte aligned pieces out of one scratch request: a first pass sums the sizes,
// a second hands out the pointers.
class ScratchLayout {
 public:
  // Reserves `bytes` and returns its offset.
  size_t add(size_t bytes) {
    const size_t offset = total_;
    total_ += (bytes + kAlign - 1) / kAlign * kAlign;
    return offset;
  }
  size_t total() const { return total_; }

  static constexpr size_t kAlign = 256;

 private:
  size_t total_ = 0;
};

}  // namespace fp8::cuda
