// Fp8Tensor: an fp8 tensor as one value, what a cast produces and a GEMM consumes: the
// codes, their transpose when the cast made one, and the scale they were cast with, which
// travels with them. A weight FSDP gathers in fp8 is one (weight_scales.h makes its scale
// with the shard's cast; Float8Linear takes it as given), and so is each cast a layer makes
// of its own operands (linear_state.h's CastPlan).
#pragma once

#include <cstdint>

#include "fp8/fp8.h"

namespace fp8::engine {

// Pointers into backend memory, owned elsewhere: whoever hands an Fp8Tensor over keeps
// every buffer valid and unchanged for as long as the receiver reads it (Float8Linear: until
// its next forward()).
struct Fp8Tensor {
  const uint8_t* codes = nullptr;    // [rows, cols]
  const uint8_t* codes_t = nullptr;  // [cols, rows], the same codes transposed; null when not made
  // codes ≈ value · scale, one scale per scale_count(granularity, rows, cols).
  const float* scale = nullptr;
  const float* inv_scale = nullptr;  // 1 / scale as the host rounds it: what a GEMM multiplies by
  const float* amax = nullptr;       // the largest |value| each scale was derived from
  Format format = Format::kE4M3;
  Granularity granularity = Granularity::kTensorwise;
  int64_t rows = 0, cols = 0;
};

}  // namespace fp8::engine
