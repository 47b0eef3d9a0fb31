#include "cpu/transpose.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace fp8::cpu {
namespace {

#if defined(__SSE2__)
// Transposes one 16x16 block with four rounds of interleaves: bytes, then 16-, 32- and
// 64-bit lanes, each round doubling the run of one column's bytes that sit together.
void transpose16(const uint8_t* src, int64_t ld_src, uint8_t* dst, int64_t ld_dst) {
  __m128i r[16], a[16], b[16], c[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i * ld_src));
  for (int p = 0; p < 8; ++p) {  // row pairs: a[2p] columns 0-7, a[2p+1] columns 8-15
    a[2 * p] = _mm_unpacklo_epi8(r[2 * p], r[2 * p + 1]);
    a[2 * p + 1] = _mm_unpackhi_epi8(r[2 * p], r[2 * p + 1]);
  }
  for (int q = 0; q < 4; ++q) {  // row quads: b[4q + j] holds columns 4j .. 4j+3
    b[4 * q + 0] = _mm_unpacklo_epi16(a[4 * q], a[4 * q + 2]);
    b[4 * q + 1] = _mm_unpackhi_epi16(a[4 * q], a[4 * q + 2]);
    b[4 * q + 2] = _mm_unpacklo_epi16(a[4 * q + 1], a[4 * q + 3]);
    b[4 * q + 3] = _mm_unpackhi_epi16(a[4 * q + 1], a[4 * q + 3]);
  }
  for (int o = 0; o < 2; ++o) {  // row octets: c[8o + m] holds columns 2m, 2m+1
    for (int j = 0; j < 4; ++j) {
      c[8 * o + 2 * j] = _mm_unpacklo_epi32(b[8 * o + j], b[8 * o + 4 + j]);
      c[8 * o + 2 * j + 1] = _mm_unpackhi_epi32(b[8 * o + j], b[8 * o + 4 + j]);
    }
  }
  for (int m = 0; m < 8; ++m) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (2 * m) * ld_dst), _mm_unpacklo_epi64(c[m], c[8 + m]));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (2 * m + 1) * ld_dst), _mm_unpackhi_epi64(c[m], c[8 + m]));
  }
}
#endif

void transpose_scalar(const uint8_t* src, int64_t ld_src, int64_t r0, int64_t r1, int64_t c0, int64_t c1, uint8_t* dst,
                      int64_t ld_dst) {
  for (int64_t c = c0; c < c1; ++c) {
    for (int64_t r = r0; r < r1; ++r) dst[c * ld_dst + r] = src[r * ld_src + c];
  }
}

}  // namespace

void transpose_bytes(const uint8_t* src, int64_t ld_src, int64_t rows, int64_t cols, uint8_t* dst, int64_t ld_dst) {
#if defined(__SSE2__)
  const int64_t rows16 = rows / 16 * 16, cols16 = cols / 16 * 16;
  // Column blocks outermost: consecutive blocks then fill the same destination rows
  // left to right, finishing each destination cache line before moving on.
  for (int64_t c = 0; c < cols16; c += 16) {
    for (int64_t r = 0; r < rows16; r += 16) transpose16(src + r * ld_src + c, ld_src, dst + c * ld_dst + r, ld_dst);
  }
  transpose_scalar(src, ld_src, 0, rows16, cols16, cols, dst, ld_dst);
  transpose_scalar(src, ld_src, rows16, rows, 0, cols, dst, ld_dst);
#else
  transpose_scalar(src, ld_src, 0, rows, 0, cols, dst, ld_dst);
#endif
}

}  // namespace fp8::cpu
