#include "ops/adamw.h"

#include <cmath>

#include "cpu/parallel.h"
#include "ops/cpu_loops.h"

namespace fp8::ops {

AdamWCoefficients adamw_coefficients(const AdamWHyperparams& h, int64_t step) {
  const double lr = h.lr;
  const double correction1 = 1.0 - std::pow(static_cast<double>(h.beta1), static_cast<double>(step));
  const double correction2 = 1.0 - std::pow(static_cast<double>(h.beta2), static_cast<double>(step));
  AdamWCoefficients c;
  c.decay = static_cast<float>(1.0 - lr * static_cast<double>(h.weight_decay));
  c.beta1 = h.beta1;
  c.beta2 = h.beta2;
  c.step_size = static_cast<float>(lr / correction1);
  c.sqrt_correction2 = static_cast<float>(std::sqrt(correction2));
  c.eps = h.eps;
  c.grad_scale = h.grad_scale;
  return c;
}

namespace cpu {

void adamw_step(const AdamWCoefficients& c, float* param, const float* grad, float* m, float* v, int64_t n) {
  fp8::cpu::parallel_for(n, kElementGrain, [&](int64_t, int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) adamw_update(c, grad[i], &param[i], &m[i], &v[i]);
  });
}

}  // namespace cpu
}  // namespace fp8::ops
