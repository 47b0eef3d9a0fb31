// Checks shared by the tests that run kernels on the CPU under the CUDA emulation
// (row_kernels_emulation_test.cc, rmsnorm_emulation_test.cc, cast_kernels_emulation_test.cc): activations of either type
// (fp32, or bf16 as raw bits), the rows' amaxes of values as stored, bit-for-bit
// comparison, and the instantiation a launcher would pick.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "fp8/arith.h"

namespace fp8::emulation_test {

using bf16_bits = uint16_t;

// An activation of type T holding v (rounded to bf16 for T = bf16_bits), a vector of
// them, and back to float (exact).
template <typename T>
T as_stored(float v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    return float_to_bf16(v);
  }
}
template <typename T>
std::vector<T> stored(const std::vector<float>& v) {
  std::vector<T> s(v.size());
  for (size_t i = 0; i < v.size(); ++i) s[i] = as_stored<T>(v[i]);
  return s;
}
template <typename T>
float widened(T x) {
  if constexpr (std::is_same_v<T, float>) {
    return x;
  } else {
    return bf16_to_float(x);
  }
}

// Each row's amax of x [rows, cols] as stored, as the kernels' bit patterns give it.
template <typename T>
std::vector<float> row_amaxes(const std::vector<T>& x, int64_t rows, int64_t cols) {
  std::vector<float> a(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    uint32_t bits = 0;
    for (int64_t c = 0; c < cols; ++c) bits = amax_bits_update(bits, widened(x[static_cast<size_t>(r * cols + c)]));
    a[static_cast<size_t>(r)] = bits_float(bits);
  }
  return a;
}

template <typename T>
void expect_bits_equal(const std::vector<T>& got, const std::vector<T>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t first = got.size();
  for (size_t i = 0; i < got.size() && first == got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0) first = i;
  }
  EXPECT_EQ(first, got.size()) << what << ": first difference at " << first;
}

// Calls launch(std::bool_constant<kVec>) as the launchers choose: 16-byte groups when the
// row length is a multiple of one (the tests' buffers are 16-byte aligned), else element
// by element.
template <typename T, typename Launch>
void on_the_launchers_path(int64_t cols, Launch launch) {
  if (cols % static_cast<int64_t>(16 / sizeof(T)) == 0) {
    launch(std::true_type{});
  } else {
    launch(std::false_type{});
  }
}

}  // namespace fp8::emulation_test
