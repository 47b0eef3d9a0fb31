#include "cpu/cast_avx2.h"

#include <immintrin.h>

namespace fp8::cpu::avx2 {
namespace {

#define FP8_AVX2 __attribute__((target("avx2")))

// Per-format constants of float_to_fp8, broadcast once per call.
struct Consts {
  __m256i abs_mask, magic, min_normal, round_bias, one, rebias, max_code, max_bits, overflow_code, nan_code, inf_bits,
      sign_byte;
  int drop;
};

FP8_AVX2 Consts make_consts(Format f) {
  const bool e4 = f == Format::kE4M3;
  const int mbits = e4 ? 3 : 2, bias = e4 ? 7 : 15;
  Consts c;
  c.drop = 23 - mbits;
  c.abs_mask = _mm256_set1_epi32(0x7FFFFFFF);
  c.magic = _mm256_set1_epi32((127 + 1 - bias - mbits + 23) << 23);
  c.min_normal = _mm256_set1_epi32((128 - bias) << 23);
  c.round_bias = _mm256_set1_epi32((1 << (c.drop - 1)) - 1);
  c.one = _mm256_set1_epi32(1);
  c.rebias = _mm256_set1_epi32((127 - bias) << mbits);
  c.max_code = _mm256_set1_epi32(e4 ? 0x7E : 0x7B);
  c.max_bits = _mm256_set1_epi32(static_cast<int>(float_bits(fp8_max(f))));
  c.overflow_code = _mm256_set1_epi32(e4 ? 0x7F : 0x7C);
  c.nan_code = _mm256_set1_epi32(0x7F);
  c.inf_bits = _mm256_set1_epi32(0x7F800000);
  c.sign_byte = _mm256_set1_epi32(0x80);
  return c;
}

// float_to_fp8 on 8 lanes; the result holds one code per 32-bit lane. Three shortcuts
// that give the same bits with fewer instructions (this loop is the cast's whole cost):
//  * no flush of fp32 subnormal inputs before the magic add: they round to code 0
//    either way (arith.h flushes only to dodge x87-era denormal stalls);
//  * when saturating, the magnitude is clamped to the largest finite fp8 value first
//    (NaN is detected before the clamp), so no overflow select is needed;
//  * NaN replaces the whole byte, sign included, in one blend.
template <bool kSaturate>
FP8_AVX2 inline __m256i encode8(__m256 x, const Consts& c) {
  const __m256i bits = _mm256_castps_si256(x);
  __m256i mag = _mm256_and_si256(bits, c.abs_mask);
  const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(bits, 24), c.sign_byte);
  const __m256i is_nan = _mm256_cmpgt_epi32(mag, c.inf_bits);
  if constexpr (kSaturate) mag = _mm256_min_epu32(mag, c.max_bits);
  // Subnormal candidate.
  const __m256 sum = _mm256_add_ps(_mm256_castsi256_ps(mag), _mm256_castsi256_ps(c.magic));
  const __m256i sub_code = _mm256_sub_epi32(_mm256_castps_si256(sum), c.magic);
  // Normal candidate.
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(mag, c.drop), c.one);
  const __m256i rounded = _mm256_add_epi32(_mm256_add_epi32(mag, c.round_bias), lsb);
  const __m256i norm_code = _mm256_sub_epi32(_mm256_srli_epi32(rounded, c.drop), c.rebias);
  // mag and the codes are below 2^31, so signed compares order them correctly.
  const __m256i is_sub = _mm256_cmpgt_epi32(c.min_normal, mag);
  __m256i code = _mm256_blendv_epi8(norm_code, sub_code, is_sub);
  if constexpr (!kSaturate) code = _mm256_blendv_epi8(code, c.overflow_code, _mm256_cmpgt_epi32(code, c.max_code));
  return _mm256_blendv_epi8(_mm256_or_si256(code, sign), c.nan_code, is_nan);
}

// Packs 4 x 8 codes (one per 32-bit lane, each <= 255) into 32 bytes in order.
FP8_AVX2 inline void store32(uint8_t* out, __m256i a, __m256i b, __m256i c, __m256i d) {
  // packus works within 128-bit halves; the final permute restores element order.
  const __m256i ab = _mm256_packus_epi32(a, b);
  const __m256i cd = _mm256_packus_epi32(c, d);
  const __m256i bytes = _mm256_packus_epi16(ab, cd);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm256_permutevar8x32_epi32(bytes, order));
}

FP8_AVX2 inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }

FP8_AVX2 inline __m256 load8(const uint16_t* p) {
  const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

FP8_AVX2 inline uint32_t hmax(__m256i v) {
  alignas(32) uint32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), v);
  uint32_t m = 0;
  for (uint32_t l : lanes) m = l > m ? l : m;
  return m;
}

template <bool kSat, class In>
FP8_AVX2 inline int64_t cast_scalar_scale(const In* x, int64_t n, float scale, Format f, uint8_t* out,
                                          uint32_t* amax_bits) {
  const Consts c = make_consts(f);
  const __m256 s = _mm256_set1_ps(scale);
  __m256i acc = _mm256_setzero_si256();
  const int64_t bulk = n / 32 * 32;
  for (int64_t i = 0; i < bulk; i += 32) {
    __m256i codes[4];
    for (int j = 0; j < 4; ++j) {
      const __m256 v = load8(x + i + 8 * j);
      acc = _mm256_max_epu32(acc, _mm256_and_si256(_mm256_castps_si256(v), c.abs_mask));
      codes[j] = encode8<kSat>(_mm256_mul_ps(v, s), c);
    }
    store32(out + i, codes[0], codes[1], codes[2], codes[3]);
  }
  const uint32_t m = hmax(acc);
  if (m > *amax_bits) *amax_bits = m;
  return bulk;
}

template <bool kSat, class In>
FP8_AVX2 inline int64_t cast_vector_scale(const In* x, int64_t n, const float* scale, Format f, uint8_t* out) {
  const Consts c = make_consts(f);
  const int64_t bulk = n / 32 * 32;
  for (int64_t i = 0; i < bulk; i += 32) {
    __m256i codes[4];
    for (int j = 0; j < 4; ++j) {
      const __m256 v = _mm256_mul_ps(load8(x + i + 8 * j), _mm256_loadu_ps(scale + i + 8 * j));
      codes[j] = encode8<kSat>(v, c);
    }
    store32(out + i, codes[0], codes[1], codes[2], codes[3]);
  }
  return bulk;
}

}  // namespace

bool available() { return __builtin_cpu_supports("avx2"); }

bool widen_available() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c"); }

__attribute__((target("avx2,f16c"))) int64_t widen_fp8(const uint8_t* in, int64_t n, Format f, float* out) {
  const bool e4 = f == Format::kE4M3;
  const int64_t bulk = n / 16 * 16;
  const __m256i mag_mask = _mm256_set1_epi16(0x7F), sign_mask = _mm256_set1_epi16(static_cast<short>(0x80));
  const __m256 rebias = _mm256_set1_ps(256.0f);  // 2^(15 - 7): fp16 bias minus e4m3 bias
  // Codes whose magnitude is above this are NaN (e4m3: 0x7F; e5m2: 0x7D..0x7F).
  const __m256i last_non_nan = _mm256_set1_epi32(e4 ? 0x7E : 0x7C);
  const __m256i mag32 = _mm256_set1_epi32(0x7F), sign32 = _mm256_set1_epi32(0x80);
  const __m256i nan_bits = _mm256_set1_epi32(static_cast<int>(kCanonicalNaN));
  for (int64_t i = 0; i < bulk; i += 16) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    const __m256i codes = _mm256_cvtepu8_epi16(bytes);
    const __m256i half =
        e4 ? _mm256_or_si256(_mm256_slli_epi16(_mm256_and_si256(codes, mag_mask), 7),
                             _mm256_slli_epi16(_mm256_and_si256(codes, sign_mask), 8))
           : _mm256_slli_epi16(codes, 8);
    // Two halves of 8; the byte shift needs an immediate, so the halves are spelled out.
    const __m128i codes_lo = bytes, codes_hi = _mm_srli_si128(bytes, 8);
    const __m128i half_lo = _mm256_castsi256_si128(half), half_hi = _mm256_extracti128_si256(half, 1);
    for (int h = 0; h < 2; ++h) {
      __m256 v = _mm256_cvtph_ps(h == 0 ? half_lo : half_hi);
      if (e4) v = _mm256_mul_ps(v, rebias);
      // NaN codes become the canonical NaN with their sign, as fp8_to_float gives (as
      // fp16, e4m3's NaN would read as ±480 and e5m2's keep their payloads).
      const __m256i c32 = _mm256_cvtepu8_epi32(h == 0 ? codes_lo : codes_hi);
      const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(c32, sign32), 24);
      const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(c32, mag32), last_non_nan);
      v = _mm256_blendv_ps(v, _mm256_castsi256_ps(_mm256_or_si256(nan_bits, sign)), _mm256_castsi256_ps(is_nan));
      _mm256_storeu_ps(out + i + 8 * h, v);
    }
  }
  return bulk;
}

FP8_AVX2 int64_t cast_f32(const float* x, int64_t n, float scale, Format f, bool sat, uint8_t* out, uint32_t* amax_bits) {
  return sat ? cast_scalar_scale<true>(x, n, scale, f, out, amax_bits)
             : cast_scalar_scale<false>(x, n, scale, f, out, amax_bits);
}

FP8_AVX2 int64_t cast_bf16(const uint16_t* x, int64_t n, float scale, Format f, bool sat, uint8_t* out,
                           uint32_t* amax_bits) {
  return sat ? cast_scalar_scale<true>(x, n, scale, f, out, amax_bits)
             : cast_scalar_scale<false>(x, n, scale, f, out, amax_bits);
}

FP8_AVX2 int64_t cast_f32_colscale(const float* x, int64_t n, const float* scale, Format f, bool sat, uint8_t* out) {
  return sat ? cast_vector_scale<true>(x, n, scale, f, out) : cast_vector_scale<false>(x, n, scale, f, out);
}

FP8_AVX2 int64_t cast_bf16_colscale(const uint16_t* x, int64_t n, const float* scale, Format f, bool sat, uint8_t* out) {
  return sat ? cast_vector_scale<true>(x, n, scale, f, out) : cast_vector_scale<false>(x, n, scale, f, out);
}

FP8_AVX2 int64_t amax_bf16(const uint16_t* x, int64_t n, uint32_t* amax_bits) {
  // On 16-bit patterns: bf16 magnitudes order like their fp32 widenings.
  const __m256i mask = _mm256_set1_epi16(0x7FFF);
  __m256i acc = _mm256_setzero_si256();
  const int64_t bulk = n / 16 * 16;
  for (int64_t i = 0; i < bulk; i += 16) {
    acc = _mm256_max_epu16(acc, _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)), mask));
  }
  alignas(32) uint16_t lanes[16];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), acc);
  uint32_t m = 0;
  for (uint16_t l : lanes) m = l > m ? l : m;
  m <<= 16;
  if (m > *amax_bits) *amax_bits = m;
  return bulk;
}

}  // namespace fp8::cpu::avx2
