#include "ops/elementwise.h"

#include <vector>

#include "cpu/parallel.h"
#include "ops/cpu_loops.h"

namespace fp8::ops::cpu {

void add(const float* a, const float* b, int64_t n, float* out) {
  fp8::cpu::parallel_for(n, kElementGrain, [&](int64_t, int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) out[i] = a[i] + b[i];
  });
}

void accumulate(const float* x, int64_t n, float* y) {
  fp8::cpu::parallel_for(n, kElementGrain, [&](int64_t, int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) y[i] += x[i];
  });
}

double sum_of_squares(const float* x, int64_t n) {
  std::vector<double> partial(static_cast<size_t>(fp8::cpu::plan_chunks(n, kElementGrain)), 0.0);
  fp8::cpu::parallel_for(n, kElementGrain, [&](int64_t chunk, int64_t begin, int64_t end) {
    partial[static_cast<size_t>(chunk)] = sum_squares_double(x + begin, end - begin);
  });
  double sum = 0.0;
  for (double p : partial) sum += p;
  return sum;
}

}  // namespace fp8::ops::cpu
