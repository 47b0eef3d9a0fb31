// Fp8Tensor: an fp8 tensor as one value, what a cast produces and a GEMM consumes: the
// codes, their transpose when the cast made one, and the scale they were cast with, which
// travels with them. Each cast a layer makes of its own operands is one (linear_state.h's
// CastPlan); a weight FSDP gathers in fp8 is an Fp8Weight, one Fp8Tensor for each GEMM that
// reads it (weight_scales.h makes their scales with the shards' casts; Float8Linear takes
// them as given).
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

// How a weight is cast for one of the two GEMMs that read it, described on the weight as
// stored ([out, in]): tensorwise; rowwise (the output GEMM's axiswise cast) or columnwise
// (the grad_input GEMM's, which contracts over the rows); or 128x128 blocks, the same blocks
// for either GEMM (the grad_input GEMM's operand is the transpose, its block grid the
// transposed grid).
struct Fp8WeightCast {
  Format format = Format::kE4M3;
  Granularity granularity = Granularity::kTensorwise;
  bool pow2_scale = false;
  bool operator==(const Fp8WeightCast&) const = default;
};

// A weight [out, in] cast outside the layer, as each GEMM reads it (Float8LinearNeeds'
// weight_output and weight_grad_input say how each is cast):
//   output      codes [out, in] scaled per tensor, row or block of the weight;
//   grad_input  codes_t [in, out], scaled per tensor or column of the weight (rows = out,
//               cols = in), or per 128x128 block of the transpose (rows = in, cols = out,
//               the transposed block grid), as the layer's own cast of it would describe.
// One tensorwise cast serving both GEMMs is the same tensor twice (the converting
// constructor), its codes_t with it.
struct Fp8Weight {
  Fp8Weight() = default;
  Fp8Weight(const Fp8Tensor& both) : output(both), grad_input(both) {}
  Fp8Tensor output;
  Fp8Tensor grad_input;
};

}  // namespace fp8::engine
