// CPU AdamW step over a flat parameter buffer. Arguments are validated by the caller;
// the per-element update is in ops/model_arith.h.
#pragma once

#include <cstdint>

#include "fp8/model_ops.h"
#include "ops/model_arith.h"

namespace fp8::ops {

// The step's scalars: bias corrections in double (beta2^step for beta2 = 0.999 needs more
// than fp32 to stay accurate over a long run), then rounded once to float.
AdamWCoefficients adamw_coefficients(const AdamWHyperparams& h, int64_t step);

namespace cpu {

void adamw_step(const AdamWCoefficients& c, float* param, const float* grad, float* m, float* v, int64_t n);

}  // namespace cpu
}  // namespace fp8::ops
