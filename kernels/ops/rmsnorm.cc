#include "ops/rmsnorm.h"

#include <cmath>
#include <vector>

#include "cpu/parallel.h"
#include "ops/cpu_loops.h"

namespace fp8::ops::cpu {

void rmsnorm_forward(const float* x, const float* weight, int64_t rows, int64_t dim, float eps, float* out,
                     float* inv_rms) {
  fp8::cpu::parallel_for(rows, row_grain(dim), [&](int64_t, int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* xr = x + r * dim;
      float* yr = out + r * dim;
      const double mean_square = sum_squares_double(xr, dim) / static_cast<double>(dim);
      const float inv = static_cast<float>(1.0 / std::sqrt(mean_square + static_cast<double>(eps)));
      inv_rms[r] = inv;
      for (int64_t j = 0; j < dim; ++j) yr[j] = xr[j] * inv * weight[j];
    }
  });
}

void rmsnorm_backward(const float* x, const float* weight, const float* inv_rms, const float* grad_out, int64_t rows,
                      int64_t dim, float* grad_x, float* grad_weight, bool accumulate_grad_x) {
  const int64_t grain = row_grain(dim);
  const int64_t chunks = fp8::cpu::plan_chunks(rows, grain);
  std::vector<float> partial_grad_weight(static_cast<size_t>(chunks * dim), 0.0f);
  fp8::cpu::parallel_for(rows, grain, [&](int64_t chunk, int64_t begin, int64_t end) {
    float* partial = partial_grad_weight.data() + chunk * dim;
    std::vector<float> gw(static_cast<size_t>(dim));  // g * w of the current row
    for (int64_t r = begin; r < end; ++r) {
      const float* xr = x + r * dim;
      const float* gr = grad_out + r * dim;
      float* dxr = grad_x + r * dim;
      const float inv = inv_rms[r];
      for (int64_t j = 0; j < dim; ++j) gw[j] = gr[j] * weight[j];
      const double gwx = dot_double(gw.data(), xr, dim);
      const float coeff = static_cast<float>(gwx * inv * inv * inv / static_cast<double>(dim));
      for (int64_t j = 0; j < dim; ++j) {
        const float dx = inv * gw[j] - coeff * xr[j];
        dxr[j] = accumulate_grad_x ? dxr[j] + dx : dx;
        partial[j] += gr[j] * xr[j] * inv;
      }
    }
  });
  for (int64_t c = 0; c < chunks; ++c) {
    const float* partial = partial_grad_weight.data() + c * dim;
    for (int64_t j = 0; j < dim; ++j) grad_weight[j] += partial[j];
  }
}

}  // namespace fp8::ops::cpu
