// CPU GEMMs through OpenBLAS. Arguments are assumed validated by the caller.
#pragma once

#include "fp8/fp8.h"

namespace fp8::cpu {

// fp8 operands are widened to their exact fp32 values in cache-sized blocks (bounded
// extra memory: at most 48 MiB whatever the shape) and multiplied with sgemm; products of fp8 values
// are exact in fp32, so the result equals fp8 products accumulated in fp32. The scales
// are applied to the accumulated sums, as cuBLASLt does.
// Block-scaled operands (fp8.h): each 128-wide K block's product is summed in fp32 by
// sgemm, scaled by its two factors in fp32 and added to an fp32 accumulator.
void scaled_gemm(const ScaledGemmArgs& a);
void scaled_gemm_blocks(const ScaledGemmArgs& a);

void gemm(const GemmArgs& a);

}  // namespace fp8::cpu
