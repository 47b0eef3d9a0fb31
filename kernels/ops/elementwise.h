// CPU elementwise ops and reductions over flat buffers: the residual adds, and the
// pieces of global gradient-norm clipping. Arguments are validated by the caller.
#pragma once

#include <cstdint>

namespace fp8::ops::cpu {

// out may equal a or b.
void add(const float* a, const float* b, int64_t n, float* out);
void accumulate(const float* x, int64_t n, float* y);

// Σ x² in double: per-chunk partial sums added in chunk order, so the result does not
// depend on thread timing.
double sum_of_squares(const float* x, int64_t n);

}  // namespace fp8::ops::cpu
