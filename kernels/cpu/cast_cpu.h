// The fast CPU casts and reductions behind cpu_backend(): loops written so that GCC
// vectorises them (an AVX2 clone is selected at run time where the CPU has it), split
// across the thread pool. Arguments are assumed validated by the caller.
#pragma once

#include <cstdint>

#include "fp8/fp8.h"

namespace fp8::cpu {

void amax(const MatrixRef& x, Granularity g, float* out);
// scale[i] = scale_from_amax(amax[i]); inv_scale (optional) = inverse_scale(scale[i]).
void compute_scales(const float* amax, int64_t n, Format f, bool pow2, float* scale, float* inv_scale = nullptr);
void cast(const CastArgs& a);
void count_cast_range(const CastRangeArgs& a);
void dequantize(const DequantizeArgs& a);
void convert(const void* in, DType in_dtype, void* out, DType out_dtype, int64_t n);

// Widen fp8 codes to fp32 values exactly (no scale): the GEMM's operand unpacking.
void widen_fp8(const uint8_t* in, Format f, int64_t n, float* out);
// Widen n bf16 values to fp32 exactly.
void widen_bf16(const uint16_t* in, int64_t n, float* out);

}  // namespace fp8::cpu
