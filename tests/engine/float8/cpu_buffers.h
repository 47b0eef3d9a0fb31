// What the float8 tests on the CPU backend share: status assertions, and typed buffers in
// backend memory that free themselves.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "fp8/fp8.h"
#include "gtest/gtest.h"
#include "tests/kernels/backend_test_util.h"

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

// n values of T in the CPU backend's memory (testing::Buffer), zeroed: gradients
// accumulate into them.
template <class T>
class DeviceBuffer : public fp8::testing::Buffer<T> {
 public:
  explicit DeviceBuffer(size_t n) : fp8::testing::Buffer<T>(&backend(), n) {
    if (data() != nullptr) EXPECT_OK(backend().fill_zero(data(), n * sizeof(T)));
  }
  explicit DeviceBuffer(const std::vector<T>& host) : fp8::testing::Buffer<T>(&backend(), host) {}

  T* data() const { return this->get(); }
  using fp8::testing::Buffer<T>::download;
  // n values of T at `at`, in backend memory this buffer need not own.
  static std::vector<T> download(const T* at, size_t n) {
    std::vector<T> host(n);
    EXPECT_OK(backend().copy_to_host(host.data(), at, n * sizeof(T)));
    return host;
  }
};
using Floats = DeviceBuffer<float>;
using Bytes = DeviceBuffer<uint8_t>;

}  // namespace fp8::engine::float8_test
