// What the float8 tests on the CPU backend share: status assertions, and typed buffers in
// backend memory that free themselves.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "fp8/fp8.h"
#include "gtest/gtest.h"

#define ASSERT_OK(expr)                   \
  do {                                    \
    const absl::Status status_ = (expr);  \
    ASSERT_TRUE(status_.ok()) << status_; \
  } while (0)

#define EXPECT_OK(expr)                   \
  do {                                    \
    const absl::Status status_ = (expr);  \
    EXPECT_TRUE(status_.ok()) << status_; \
  } while (0)

namespace fp8::engine::float8_test {

inline Backend& backend() { return cpu_backend(); }

// n values of T in backend memory, zeroed (gradients accumulate into them).
template <class T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n) : n_(n) {
    absl::StatusOr<void*> p = backend().allocate(std::max<size_t>(n, 1) * sizeof(T));
    EXPECT_TRUE(p.ok()) << p.status();
    data_ = p.ok() ? static_cast<T*>(*p) : nullptr;
    if (data_ != nullptr) EXPECT_OK(backend().fill_zero(data_, n * sizeof(T)));
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { upload(host); }
  ~DeviceBuffer() {
    if (data_ != nullptr) backend().deallocate(data_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* data() const { return data_; }
  size_t size() const { return n_; }
  void upload(const std::vector<T>& host) {
    ASSERT_EQ(host.size(), n_);
    ASSERT_OK(backend().copy_from_host(data_, host.data(), n_ * sizeof(T)));
  }
  std::vector<T> download() const { return download(data_, n_); }
  // n values of T at `at`, in backend memory this buffer need not own.
  static std::vector<T> download(const T* at, size_t n) {
    std::vector<T> host(n);
    EXPECT_OK(backend().copy_to_host(host.data(), at, n * sizeof(T)));
    return host;
  }

 private:
  size_t n_;
  T* data_ = nullptr;
};
using Floats = DeviceBuffer<float>;
using Bytes = DeviceBuffer<uint8_t>;

}  // namespace fp8::engine::float8_test
