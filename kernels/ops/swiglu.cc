#include "ops/swiglu.h"

#include "cpu/parallel.h"
#include "ops/cpu_loops.h"
#include "ops/model_arith.h"

namespace fp8::ops::cpu {

void swiglu_forward(const float* gate, const float* up, int64_t n, float* out) {
  fp8::cpu::parallel_for(n, kElementGrain, [&](int64_t, int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) out[i] = swiglu(gate[i], up[i]);
  });
}

void swiglu_backward(const float* gate, const float* up, const float* grad_out, int64_t n, float* grad_gate,
                     float* grad_up) {
  fp8::cpu::parallel_for(n, kElementGrain, [&](int64_t, int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) swiglu_grad(gate[i], up[i], grad_out[i], &grad_gate[i], &grad_up[i]);
  });
}

}  // namespace fp8::ops::cpu
