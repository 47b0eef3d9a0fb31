#include "cuda/caching_allocator.h"

#include <algorithm>
#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "cuda/cuda_status.h"

namespace fp8::cuda {

absl::StatusOr<std::unique_ptr<CachingAllocator>> CachingAllocator::create(int device, cudaStream_t stream) {
  int supported = 0;
  if (auto s = cuda_status(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, device),
                           "cudaDeviceGetAttribute(MemoryPoolsSupported)");
      !s.ok()) {
    return s;
  }
  if (supported == 0) {
    return absl::UnavailableError(absl::StrCat("CUDA device ", device,
                                               " has no stream-ordered memory pools (driver too old?)"));
  }
  cudaMemPool_t pool = nullptr;
  if (auto s = cuda_status(cudaDeviceGetDefaultMemPool(&pool, device), "cudaDeviceGetDefaultMemPool"); !s.ok()) {
    return s;
  }
  // By default the pool hands its free memory back to the driver at every
  // synchronisation, which would make every step pay for cudaMalloc again.
  uint64_t keep_everything = std::numeric_limits<uint64_t>::max();
  if (auto s = cuda_status(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_everything),
                           "cudaMemPoolSetAttribute(ReleaseThreshold)");
      !s.ok()) {
    return s;
  }
  return std::unique_ptr<CachingAllocator>(new CachingAllocator(pool, stream));
}

absl::StatusOr<void*> CachingAllocator::allocate(size_t bytes) {
  void* p = nullptr;
  const cudaError_t e = cudaMallocAsync(&p, std::max<size_t>(bytes, 1), stream_);
  if (e != cudaSuccess) {
    cudaGetLastError();  // an out-of-memory must not stick to the thread's next call
    const absl::Status s = cuda_status(e, "cudaMallocAsync");
    const MemoryStats now = stats();
    return absl::Status(s.code(), absl::StrCat(s.message(), " (", bytes, " bytes; ", now.allocated,
                                               " bytes in use, ", now.reserved, " reserved)"));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    sizes_[p] = bytes;
  }
  counter_.on_allocate(static_cast<int64_t>(bytes));
  return p;
}

void CachingAllocator::deallocate(void* p) {
  if (p == nullptr) return;
  size_t bytes = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = sizes_.find(p);
    if (it == sizes_.end()) return;
    bytes = it->second;
    sizes_.erase(it);
  }
  counter_.on_deallocate(static_cast<int64_t>(bytes));
  cudaFreeAsync(p, stream_);  // an error here resurfaces at the next synchronising call
}

MemoryStats CachingAllocator::stats() const {
  MemoryStats s;
  s.allocated = counter_.allocated();
  s.peak_allocated = counter_.peak();
  uint64_t reserved = 0;
  if (cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrReservedMemCurrent, &reserved) == cudaSuccess) {
    s.reserved = static_cast<int64_t>(reserved);
  } else {
    cudaGetLastError();
    s.reserved = s.allocated;
  }
  return s;
}

}  // namespace fp8::cuda
