// Per-element fp8 arithmetic shared by the CPU and CUDA paths.
//
// Every function here is `constexpr`-free, branch-light and compiled for both host and
// device (FP8_HD), so the CPU unit tests exercise exactly the arithmetic the GPU kernels
// run. Formats follow arXiv 2209.05433: E4M3 ("e4m3fn": no infinities, one NaN code per
// sign) and E5M2 (IEEE-like). Conversions round to nearest, ties to even.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#include <cuda_fp8.h>
#define FP8_HD __host__ __device__ __forceinline__
#else
#define FP8_HD inline
#endif

namespace fp8 {

enum class Format : uint8_t { kE4M3 = 0, kE5M2 = 1 };

// Largest finite magnitude of each format.
FP8_HD float fp8_max(Format f) { return f == Format::kE4M3 ? 448.0f : 57344.0f; }

FP8_HD uint32_t float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}

FP8_HD float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
#endif
}

// c ? a : b, written with masks: GCC turns a ternary whose arms hold a float add into a
// branch (it sinks the add into one arm) and then refuses to vectorise the loop.
FP8_HD uint32_t select_u32(bool c, uint32_t a, uint32_t b) {
  const uint32_t m = 0u - static_cast<uint32_t>(c);
  return (a & m) | (b & ~m);
}

// ---- fp32 -> fp8 -------------------------------------------------------------------
//
// Works on the magnitude, then ORs the sign back in. Both candidate codes are computed
// and one is selected, with no early exits, so that the CPU loops vectorise and GPU
// warps do not diverge:
//  * |x| below the format's smallest normal: adding a "magic" power of two whose ulp is
//    the fp8 subnormal quantum lets the fp32 adder do the round-to-nearest-even; the low
//    bits of the sum are then the fp8 code (a carry into 8 quanta is the smallest normal,
//    which is the right code).
//  * normal: round the fp32 mantissa to M bits (ties to even, carry into the exponent),
//    then rebias the exponent. ±Inf lands past the largest code like any overflow.
//  * overflow (the rounded code passed the largest finite code): saturate to ±max, or
//    produce NaN (E4M3) / Inf (E5M2) when not saturating.
// NaN maps to 0x7F (sign dropped) for both formats, as CUDA's conversion does.
FP8_HD uint8_t float_to_fp8(float x, Format f, bool saturate) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  // Ada and Hopper convert in hardware (cvt.rn.satfinite): one instruction instead of
  // ~20. The host tests prove CUDA's conversion equals the code below bit for bit, and
  // the gpu contract tests check this path against the reference on the device.
  if (saturate) {
    return static_cast<uint8_t>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, f == Format::kE4M3 ? __NV_E4M3 : __NV_E5M2));
  }
#endif
  const bool e4 = f == Format::kE4M3;
  const int mbits = e4 ? 3 : 2;
  const int bias = e4 ? 7 : 15;
  const uint32_t max_code = e4 ? 0x7Eu : 0x7Bu;
  const uint32_t overflow_code = e4 ? 0x7Fu : 0x7Cu;  // NaN for E4M3, Inf for E5M2
  const uint32_t nan_code = 0x7Fu;

  const uint32_t bits = float_bits(x);
  const uint32_t sign = (bits >> 24) & 0x80u;
  const uint32_t mag = bits & 0x7FFFFFFFu;

  // Subnormal candidate. Magic number 2^(1 - bias - mbits + 23): its ulp is the
  // subnormal quantum 2^(1 - bias - mbits). fp32 subnormal inputs (far below half a
  // quantum, so they round to 0 anyway) are zeroed first: denormal operands take a
  // slow microcode path on x86.
  const uint32_t magic_bits = static_cast<uint32_t>(127 + 1 - bias - mbits + 23) << 23;
  const uint32_t flushed = select_u32((mag & 0x7F800000u) != 0, mag, 0u);
  const uint32_t sub_code = float_bits(bits_float(flushed) + bits_float(magic_bits)) - magic_bits;

  // Normal candidate (wraps harmlessly when the input is subnormal; not selected then).
  const int drop = 23 - mbits;
  const uint32_t rounded = mag + ((1u << (drop - 1)) - 1u) + ((mag >> drop) & 1u);
  const uint32_t norm_code = (rounded >> drop) - (static_cast<uint32_t>(127 - bias) << mbits);

  // Smallest normal is 2^(1-bias): fp32 exponent field 128 - bias.
  const uint32_t min_normal_bits = static_cast<uint32_t>(128 - bias) << 23;
  uint32_t code = select_u32(mag < min_normal_bits, sub_code, norm_code);
  code = select_u32(code > max_code, saturate ? max_code : overflow_code, code);
  // NaN becomes the positive canonical NaN whatever its sign, as CUDA's conversion does.
  const bool is_nan = mag > 0x7F800000u;
  code = select_u32(is_nan, nan_code, code);
  return static_cast<uint8_t>(select_u32(is_nan, 0u, sign) | code);
}

// ---- fp8 -> fp32 (exact) ---------------------------------------------------------------
FP8_HD float fp8_to_float(uint8_t v, Format f) {
  const bool e4 = f == Format::kE4M3;
  const int mbits = e4 ? 3 : 2;
  const int bias = e4 ? 7 : 15;
  const uint32_t sign = static_cast<uint32_t>(v & 0x80u) << 24;
  const uint32_t mag = v & 0x7Fu;
  const uint32_t exp = mag >> mbits;
  const uint32_t man = mag & ((1u << mbits) - 1u);
  uint32_t out;
  if (e4 && mag == 0x7Fu) {
    out = 0x7FC00000u;  // the E4M3 NaN
  } else if (!e4 && exp == 0x1Fu) {
    out = man == 0 ? 0x7F800000u : 0x7FC00000u;  // E5M2 Inf / NaN
  } else if (exp == 0) {
    // Subnormal: man * 2^(1 - bias - mbits); exact in fp32 as a product of small powers.
    const float quantum = bits_float(static_cast<uint32_t>(127 + 1 - bias - mbits) << 23);
    out = float_bits(static_cast<float>(man) * quantum);
  } else {
    out = ((exp + 127u - static_cast<uint32_t>(bias)) << 23) | (man << (23 - mbits));
  }
  return bits_float(sign | out);
}

// ---- NaN canonicalisation -----------------------------------------------------------------
// Arithmetic on a NaN keeps its payload on x86 but yields 0x7FFFFFFF on NVIDIA GPUs, so
// every result that can be NaN is canonicalised to one pattern (positive quiet NaN) and
// the CPU and GPU paths agree bit for bit.
constexpr uint32_t kCanonicalNaN = 0x7FC00000u;
constexpr uint16_t kCanonicalNaNBf16 = 0x7FC0u;

FP8_HD float canonicalize_nan(float x) {
  const uint32_t b = float_bits(x);
  return bits_float((b & 0x7FFFFFFFu) > 0x7F800000u ? kCanonicalNaN : b);
}

// ---- bf16 <-> fp32 -----------------------------------------------------------------------
// bf16 is carried as its raw 16 bits so that host code needs no CUDA headers.
FP8_HD uint16_t float_to_bf16(float x) {
  const uint32_t bits = float_bits(x);
  const uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
  return static_cast<uint16_t>((bits & 0x7FFFFFFFu) > 0x7F800000u ? kCanonicalNaNBf16 : rounded);
}

FP8_HD float bf16_to_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

// ---- scaling ---------------------------------------------------------------------------
// torchao's EPS: an all-zero tensor gets the scale of amax = 1e-12.
constexpr double kAmaxEps = 1e-12;

// scale = fp8_max / max(amax, eps), in fp64, stored fp32. With `pow2`, rounded down to a
// power of two (2^floor(log2 scale)) so that scaling is exact. A NaN amax gives a NaN
// scale and an infinite one gives 0: callers that must not act on those (delayed
// scaling) check the amax first.
FP8_HD float scale_from_amax(float amax, Format f, bool pow2) {
  if (amax != amax) return amax;
  const double a = static_cast<double>(amax) > kAmaxEps ? static_cast<double>(amax) : kAmaxEps;
  float scale = static_cast<float>(static_cast<double>(fp8_max(f)) / a);
  if (pow2 && scale > 0.0f) {
    // Keep only the exponent: floor to a power of two. Scales are always normal fp32
    // (fp8_max / 1e-12 < 2^49, and fp8_max / FLT_MAX > 2^-126), so clearing the
    // mantissa is exact.
    const uint32_t b = float_bits(scale);
    if (b < 0x7F800000u) scale = bits_float(b & 0xFF800000u);
  }
  return scale;
}

// Quantize one value with a scale: saturate(x * scale) in the given format.
FP8_HD uint8_t quantize_value(float x, float scale, Format f, bool saturate) {
  return float_to_fp8(x * scale, f, saturate);
}

// Dequantize one code: q / scale, NaN canonicalised.
FP8_HD float dequantize_value(uint8_t q, Format f, float scale) { return canonicalize_nan(fp8_to_float(q, f) / scale); }

// The dequantization factor of a scale, 1 / scale as dequantize_value computes it for the
// code of 1.0: what a scaled GEMM multiplies its fp32 accumulators by.
FP8_HD float inverse_scale(float scale) { return canonicalize_nan(1.0f / scale); }

FP8_HD uint32_t abs_bits(float x) { return float_bits(x) & 0x7FFFFFFFu; }

// ---- what a cast did beyond rounding (numerics metrics) -----------------------------------
//
// For y = x * scale, as quantize_value computes it, two outcomes of float_to_fp8 lose
// more than a rounding error. Both are thresholds on |y|'s bit pattern (branch-free, so
// the counting loops vectorise), and format_test checks them against float_to_fp8 itself.
//
// Saturated: y rounds (to nearest, ties to even) past the largest finite code, so the
// saturating cast clamps it to ±max (a non-saturating one would make NaN / Inf). ±Inf
// counts. A |y| within half an ulp of max rounds to max like any other value: that is
// rounding, not clipping, and keeps dynamic scaling (amax·scale ≈ max, sometimes a fp32
// ulp above) at zero saturation by construction.
//  * E4M3: max 448, ulp 32; 464 ties to 448 (even mantissa; the next code, 0x7F, is NaN),
//    so overflow starts just above 464.
//  * E5M2: max 57344, ulp 8192; 61440 ties to 65536 (even mantissa), which is Inf, so
//    overflow starts at 61440.
FP8_HD uint32_t fp8_saturation_bits(Format f) {
  return f == Format::kE4M3 ? 0x43E80001u /* next float above 464 */ : 0x47700000u /* 61440 */;
}

// Underflow: y rounds to ±0. That is |y| ≤ half the smallest subnormal (2^-10 for E4M3,
// 2^-17 for E5M2; the half-way value ties to the even code, zero), fp32 subnormals
// (float_to_fp8 flushes them) and y = 0 itself (x·scale underflowed fp32, or scale is 0).
// Only nonzero x count: zeros are exact.
FP8_HD uint32_t fp8_underflow_bits(Format f) {
  const int bias = f == Format::kE4M3 ? 7 : 15;
  const int mbits = f == Format::kE4M3 ? 3 : 2;
  return static_cast<uint32_t>(127 - bias - mbits) << 23;  // 2^(-bias-mbits): half a quantum
}

// NaN (an x that is NaN, or Inf·0) is neither: the cast maps it to NaN, which is neither a
// clipped nor a flushed value, and amax already reports it (a NaN amax propagates).
FP8_HD bool fp8_saturates(float y, Format f) {
  const uint32_t a = abs_bits(y);
  return (a >= fp8_saturation_bits(f)) & (a <= 0x7F800000u);  // up to Inf; NaN sorts above
}

FP8_HD bool fp8_underflows(float x, float y, Format f) {
  return (abs_bits(x) != 0u) & (abs_bits(y) <= fp8_underflow_bits(f));
}

// amax accumulates on the magnitude's bit pattern: for non-negative floats the integer
// order is the numeric order, and every NaN sorts above +Inf, so a NaN anywhere in the
// tensor propagates into its amax (as torch.amax does) without a branch.
FP8_HD uint32_t amax_bits_update(uint32_t acc, float x) {
  const uint32_t a = abs_bits(x);
  return a > acc ? a : acc;
}

}  // namespace fp8
