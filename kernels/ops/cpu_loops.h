// Building blocks shared by the CPU kernels: how finely to split work across the thread
// pool, and serial reductions written so the compiler can vectorise them.
#pragma once

#include <algorithm>
#include <cstdint>

namespace fp8::ops::cpu {

// Below this many elements a chunk costs more in hand-off than a thread saves.
inline constexpr int64_t kElementGrain = int64_t{1} << 15;

// Rows per chunk so that each chunk covers at least kElementGrain elements.
inline int64_t row_grain(int64_t elements_per_row) {
  return std::max<int64_t>(1, kElementGrain / std::max<int64_t>(1, elements_per_row));
}

// Σ a[i] * b[i] in double. Eight independent accumulators, because without
// -ffast-math the compiler may not reorder one running sum into vector lanes.
inline double dot_double(const float* a, const float* b, int64_t n) {
  constexpr int kLanes = 8;
  double lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) lanes[j] += static_cast<double>(a[i + j]) * static_cast<double>(b[i + j]);
  }
  double sum = 0.0;
  for (; i < n; ++i) sum += static_cast<double>(a[i]) * static_cast<double>(b[i]);
  for (double l : lanes) sum += l;
  return sum;
}

inline double sum_squares_double(const float* x, int64_t n) { return dot_double(x, x, n); }

}  // namespace fp8::ops::cpu
