// A device copy of a host vector for the CUDA model-op tests, optionally `offset` elements
// into its allocation so that the kernels see a pointer less aligned than cudaMalloc's
// 256 bytes (the scalar paths). CUDA builds only.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

namespace fp8::ops_test {

template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n, size_t offset = 0) : n_(n), offset_(offset) {
    void* p = nullptr;
    const size_t bytes = (n + offset) * sizeof(T);
    EXPECT_EQ(cudaMalloc(&p, bytes == 0 ? 1 : bytes), cudaSuccess);
    base_ = static_cast<T*>(p);
  }
  DeviceArray(const std::vector<T>& host, size_t offset = 0) : DeviceArray(host.size(), offset) { upload(host); }
  ~DeviceArray() { cudaFree(base_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* get() const { return base_ + offset_; }
  size_t size() const { return n_; }

  void upload(const std::vector<T>& host) {
    ASSERT_EQ(host.size(), n_);
    ASSERT_EQ(cudaMemcpy(get(), host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  // Synchronous: waits for the kernels queued before it on the default stream.
  std::vector<T> download() const {
    std::vector<T> host(n_);
    EXPECT_EQ(cudaMemcpy(host.data(), get(), n_ * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }

 private:
  size_t n_;
  size_t offset_;
  T* base_ = nullptr;
};

}  // namespace fp8::ops_test
