// Per-element arithmetic of the model ops, compiled for host and device (FP8_HD), so that
// the CPU unit tests exercise exactly the formulas a CUDA implementation will run. Only the
// loops and the parallel decomposition differ between the two paths.
#pragma once

#include <cmath>

#include "fp8/arith.h"

namespace fp8::ops {

// sigmoid(g) = 1 / (1 + e^-g). For g below about -88, e^-g overflows to +inf and the
// result is the correct limit 0, never NaN.
FP8_HD float sigmoid(float g) { return 1.0f / (1.0f + expf(-g)); }

FP8_HD float swiglu(float gate, float up) { return gate * sigmoid(gate) * up; }

// d/dg [g * sigmoid(g)] = sigmoid(g) * (1 + g * (1 - sigmoid(g))).
FP8_HD void swiglu_grad(float gate, float up, float grad_out, float* grad_gate, float* grad_up) {
  const float s = sigmoid(gate);
  *grad_gate = grad_out * up * s * (1.0f + gate * (1.0f - s));
  *grad_up = grad_out * gate * s;
}

// Rotates (x0, x1) by the angle whose cosine and sine are (c, s); the inverse rotation
// passes -s.
FP8_HD void rotate_pair(float x0, float x1, float c, float s, float* y0, float* y1) {
  *y0 = x0 * c - x1 * s;
  *y1 = x0 * s + x1 * c;
}

// ---- causal attention's softmax (flash-attention style) ----------------------------------
// A score row's softmax is built over key tiles from a running max m and a running sum
// l = Σ exp(s - m); masked scores (the causal future) are -inf.

// exp(s - m) for a score s of a row whose running max (forward) or log-sum-exp (backward)
// is m. A masked score gives exactly 0, also when m is still -inf (a row that has seen only
// masked keys), where exp(-inf - -inf) would be NaN.
FP8_HD float softmax_exp(float s, float m) { return s == -INFINITY ? 0.0f : expf(s - m); }

// exp(m_old - m_new), the factor by which a row's running sum and output shrink when its
// running max grows from m_old to m_new >= m_old: 0 while the row has seen nothing
// (m_old = -inf), so that nothing is computed as -inf - -inf.
FP8_HD float online_softmax_rescale(float m_old, float m_new) { return softmax_exp(m_old, m_new); }

// The row's log-sum-exp from its max and its sum of exp(s - max); the sum is >= 1 once the
// row has seen its max.
FP8_HD float log_sum_exp(float max, float sum) { return max + logf(sum); }

// The gradient of a softmax input: dS = P·(dP - delta), where dP is the gradient of the
// probability P and delta = Σ_j P_j·dP_j over the row (for attention, grad_out · out).
FP8_HD float softmax_input_grad(float p, float grad_p, float delta) { return p * (grad_p - delta); }

// The factor AdamW scales the gradients by from their sum of squares (ModelOps::
// queue_grad_norm's clip_scale): max_norm / norm where the norm exceeds max_norm > 0, else
// 1, in double and then rounded once; NaN for a non-finite sum, which skips the update.
// The one rule for clipping: every device's grad norm and queue_clip_scale run it.
FP8_HD float clip_scale_from_sum_of_squares(double sum, double max_norm) {
  if (!(sum - sum == 0.0)) return NAN;  // inf or NaN
  const double norm = sqrt(sum);
  return max_norm > 0.0 && norm > max_norm ? static_cast<float>(max_norm / norm) : 1.0f;
}

// One AdamW step's scalars, computed once per call on the host in double.
struct AdamWCoefficients {
  float decay;  // 1 - lr * weight_decay
  float beta1, beta2;
  float step_size;         // lr / (1 - beta1^step)
  float sqrt_correction2;  // sqrt(1 - beta2^step)
  float eps;
  float grad_scale;  // AdamWHyperparams::grad_scale
};

// The update of one parameter, in the order and form torch.optim.AdamW (single-tensor,
// non-foreach) uses, so that results agree to rounding.
FP8_HD void adamw_update(const AdamWCoefficients& c, float grad, float* param, float* m, float* v) {
  grad *= c.grad_scale;  // gradient clipping (x 1 leaves it alone)
  *param *= c.decay;
  *m += (grad - *m) * (1.0f - c.beta1);  // torch: exp_avg.lerp_(grad, 1 - beta1)
  *v = *v * c.beta2 + (1.0f - c.beta2) * grad * grad;
  const float denom = sqrtf(*v) / c.sqrt_correction2 + c.eps;
  *param -= c.step_size * (*m / denom);
}

}  // namespace fp8::ops
