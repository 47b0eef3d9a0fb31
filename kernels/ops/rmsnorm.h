// CPU RMSNorm and its backward over rows of x [rows, dim]. Arguments are validated by the
// caller.
#pragma once

#include <cstdint>

namespace fp8::ops::cpu {

void rmsnorm_forward(const float* x, const float* weight, int64_t rows, int64_t dim, float eps, float* out,
                     float* inv_rms);

// With r = inv_rms and y = x * r * w, per row:
//   grad_x = r * (g * w) - x * r^3 / dim * Σ_j (g * w * x)_j   (+= with accumulate_grad_x)
//   grad_w += g * x * r
// grad_weight sums over rows: each chunk of rows sums into its own partial vector, and
// the partials are added in chunk order, so no two threads write one element.
void rmsnorm_backward(const float* x, const float* weight, const float* inv_rms, const float* grad_out, int64_t rows,
                      int64_t dim, float* grad_x, float* grad_weight, bool accumulate_grad_x);

}  // namespace fp8::ops::cpu
