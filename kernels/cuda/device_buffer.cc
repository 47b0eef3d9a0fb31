#include "cuda/device_buffer.h"

#include <algorithm>

#include "cuda/cuda_status.h"

namespace fp8::cuda {
namespace {

// Enough for every per-row / per-column vector of matrices up to 64K rows or columns
// without ever growing.
constexpr size_t kInitialBytes = size_t{1} << 20;

}  // namespace

DeviceBuffer::~DeviceBuffer() { release(); }

void DeviceBuffer::release() {
  // cudaFree waits for work still using the buffer; an error here has no one to report
  // to, and a sticky one resurfaces at the next synchronising call.
  if (data_ != nullptr) cudaFree(data_);
  data_ = nullptr;
  size_ = 0;
}

absl::StatusOr<void*> DeviceBuffer::get(size_t bytes, cudaStream_t stream) {
  if (bytes <= size_ && data_ != nullptr) return data_;
  const size_t want = std::max({bytes, 2 * size_, kInitialBytes});
  if (data_ != nullptr) {
    // Kernels queued earlier may still use the old buffer.
    if (auto s = cuda_status(cudaStreamSynchronize(stream), "cudaStreamSynchronize"); !s.ok()) return s;
    if (auto s = cuda_status(cudaFree(data_), "cudaFree"); !s.ok()) return s;
    data_ = nullptr;
    size_ = 0;
  }
  void* p = nullptr;
  if (auto s = cuda_status(cudaMalloc(&p, want), "cudaMalloc (backend scratch)"); !s.ok()) return s;
  data_ = p;
  size_ = want;
  return data_;
}

}  // namespace fp8::cuda
