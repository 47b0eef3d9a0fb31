// CPU SwiGLU, out = silu(gate) * up, and its backward. Arguments are validated by the
// caller; the per-element formulas are in ops/model_arith.h.
#pragma once

#include <cstdint>

namespace fp8::ops::cpu {

void swiglu_forward(const float* gate, const float* up, int64_t n, float* out);
void swiglu_backward(const float* gate, const float* up, const float* grad_out, int64_t n, float* grad_gate,
                     float* grad_up);

}  // namespace fp8::ops::cpu
