// A matrix of wider elements transposed through Backend::transpose_bytes, which every
// backend has: a high-precision tensor whose block cast runs along its other dimension
// (casts.cc), a block grid of scales for the transposed weight (weight_scales.cc).
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "fp8/fp8.h"

namespace fp8::engine {

// dst [cols, rows] = src [rows, cols] transposed, elements of `element_bytes` bytes: the
// elements split into byte planes ([n, es] -> [es, n]), each plane transposed, the planes
// interleaved again ([es, n] -> [n, es]). Exact; three passes. `planes` and `planes_t` are
// scratch of rows * cols * element_bytes bytes each; dst may be `planes`.
absl::Status transpose_elements(Backend& backend, const void* src, int64_t rows, int64_t cols, size_t element_bytes,
                                uint8_t* planes, uint8_t* planes_t, void* dst);

}  // namespace fp8::engine
