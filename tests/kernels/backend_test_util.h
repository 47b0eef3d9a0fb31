// Helpers for tests that run one contract against several backends: buffers in a
// backend's memory, random data, and the signal-to-quantisation-noise ratio.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "fp8/fp8.h"

namespace fp8::testing {

// Resolves a backend by name ("reference", "cpu", "cuda"). Returns null and says why
// when it is not available here (no GPU, or built without CUDA).
inline Backend* find_backend(const std::string& name, std::string* why) {
  if (name == "reference") return &reference_backend();
  if (name == "cpu") return &cpu_backend();
  static absl::StatusOr<std::unique_ptr<Backend>> cuda = make_cuda_backend(0, nullptr);
  if (!cuda.ok()) {
    *why = std::string(cuda.status().message());
    return nullptr;
  }
  return cuda->get();
}

// A test run once per backend name (the parameter: "reference", "cpu", "cuda"), skipped,
// saying why, where that backend is not available here. b_ is the backend under test.
class BackendTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::string why;
    b_ = find_backend(GetParam(), &why);
    if (b_ == nullptr) GTEST_SKIP() << "backend '" << GetParam() << "' unavailable: " << why;
  }
  Backend& ref() { return reference_backend(); }
  Backend* b_ = nullptr;
};

// A buffer of T in a backend's memory, freed on destruction.
template <class T>
class Buffer {
 public:
  Buffer(Backend* b, size_t n) : backend_(b), n_(n) {
    auto p = b->allocate(std::max<size_t>(n, 1) * sizeof(T));
    EXPECT_TRUE(p.ok()) << p.status();
    ptr_ = p.ok() ? static_cast<T*>(*p) : nullptr;
  }
  Buffer(Backend* b, const std::vector<T>& host) : Buffer(b, host.size()) { upload(host); }
  ~Buffer() {
    if (ptr_ != nullptr) backend_->deallocate(ptr_);
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  T* get() const { return ptr_; }
  size_t size() const { return n_; }
  void upload(const std::vector<T>& host) {
    ASSERT_EQ(host.size(), n_);
    ASSERT_TRUE(backend_->copy_from_host(ptr_, host.data(), n_ * sizeof(T)).ok());
  }
  std::vector<T> download() const {
    std::vector<T> host(n_);
    const auto s = backend_->copy_to_host(host.data(), ptr_, n_ * sizeof(T));
    EXPECT_TRUE(s.ok()) << s;
    return host;
  }

 private:
  Backend* backend_;
  size_t n_;
  T* ptr_ = nullptr;
};

inline std::vector<float> gaussian(size_t n, uint32_t seed, float stddev = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

inline std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = float_to_bf16(v[i]);
  return out;
}

inline std::vector<float> from_bf16(const std::vector<uint16_t>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = bf16_to_float(v[i]);
  return out;
}

// Bytes of `v` stored as dtype t (bf16 rounded to nearest even).
inline std::vector<uint8_t> stored_bytes(const std::vector<float>& v, DType t) {
  std::vector<uint8_t> bytes(v.size() * dtype_size(t));
  if (t == DType::kFloat32) {
    std::memcpy(bytes.data(), v.data(), bytes.size());
  } else {
    const auto h = to_bf16(v);
    std::memcpy(bytes.data(), h.data(), bytes.size());
  }
  return bytes;
}

// The values of bytes stored as dtype t, widened to fp32 (exact).
inline std::vector<float> widened(const std::vector<uint8_t>& bytes, DType t) {
  std::vector<float> v(bytes.size() / dtype_size(t));
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == DType::kFloat32) {
      std::memcpy(&v[i], bytes.data() + 4 * i, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, bytes.data() + 2 * i, 2);
      v[i] = bf16_to_float(h);
    }
  }
  return v;
}

// 20·log10(‖ref‖ / ‖ref − x‖) in dB, as torchao's tests compute it.
inline double sqnr_db(const std::vector<double>& ref, const std::vector<float>& x, size_t begin = 0,
                      size_t end = SIZE_MAX) {
  end = std::min(end, ref.size());
  double num = 0, den = 0;
  for (size_t i = begin; i < end; ++i) {
    num += ref[i] * ref[i];
    den += (ref[i] - x[i]) * (ref[i] - x[i]);
  }
  return 10.0 * std::log10(num / den);
}

// ‖x − ref‖ / ‖ref‖.
inline double relative_error(const std::vector<double>& ref, const std::vector<float>& x) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += (ref[i] - x[i]) * (ref[i] - x[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / den);
}

// m [rows, cols] transposed into [cols, rows], on the host.
template <class T>
std::vector<T> transposed(const std::vector<T>& m, int64_t rows, int64_t cols) {
  std::vector<T> t(m.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) t[static_cast<size_t>(c * rows + r)] = m[static_cast<size_t>(r * cols + c)];
  }
  return t;
}

// out[m, n] = Σ_k a[m, k] · b[n, k] in fp64.
inline std::vector<double> matmul_nt_fp64(const std::vector<float>& a, const std::vector<float>& b, int64_t m,
                                          int64_t n, int64_t k) {
  std::vector<double> out(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t l = 0; l < k; ++l) acc += static_cast<double>(a[i * k + l]) * b[j * k + l];
      out[i * n + j] = acc;
    }
  }
  return out;
}

}  // namespace fp8::testing
