// AVX2 versions of the cast's inner loops. GCC's auto-vectorised form of the shared
// arithmetic spills heavily and narrows 32-bit codes to bytes slowly; these do the same
// arithmetic (fp8/arith.h's float_to_fp8, step for step, 8 lanes at a time) and pack 32
// codes per store. The contract tests check them bit for bit against the reference.
#pragma once

#include <cstdint>

#include "fp8/arith.h"

namespace fp8::cpu::avx2 {

// True when the CPU running this process has AVX2.
bool available();

// Each processes a prefix of the n values whose length is a multiple of 32 and returns
// that length; the caller finishes the tail with the portable loop. `amax_bits` is
// updated with the max |x| bit pattern of the processed values (before scaling).
// `scale` is one scale for every value, or (colscale) one per value.
int64_t cast_f32(const float* x, int64_t n, float scale, Format f, bool sat, uint8_t* out, uint32_t* amax_bits);
int64_t cast_bf16(const uint16_t* x, int64_t n, float scale, Format f, bool sat, uint8_t* out, uint32_t* amax_bits);
int64_t cast_f32_colscale(const float* x, int64_t n, const float* scale, Format f, bool sat, uint8_t* out);
int64_t cast_bf16_colscale(const uint16_t* x, int64_t n, const float* scale, Format f, bool sat, uint8_t* out);

// Widens a prefix (multiple of 16) of fp8 codes to their exact fp32 values through the
// F16C half-precision converter: an e5m2 code is the top byte of the fp16 with the same
// value, and an e4m3 code shifted into an fp16 is its value times 2^-8 (exact, subnormals
// included). Needs AVX2 and F16C; see widen_available().
int64_t widen_fp8(const uint8_t* in, int64_t n, Format f, float* out);
bool widen_available();

// max |x| over a bf16 prefix (multiple of 16), as an fp32 bit pattern.
int64_t amax_bf16(const uint16_t* x, int64_t n, uint32_t* amax_bits);

}  // namespace fp8::cpu::avx2
