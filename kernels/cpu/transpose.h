// Byte-matrix transpose for the fp8 cast+transpose path.
#pragma once

#include <cstdint>

namespace fp8::cpu {

// dst[c * ld_dst + r] = src[r * ld_src + c] for r < rows, c < cols. SSE2 16x16 blocks
// (SSE2 is part of x86-64) with a scalar edge.
void transpose_bytes(const uint8_t* src, int64_t ld_src, int64_t rows, int64_t cols, uint8_t* dst, int64_t ld_dst);

}  // namespace fp8::cpu
