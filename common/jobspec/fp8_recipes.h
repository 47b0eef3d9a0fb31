// What an fp8 section means GEMM by GEMM: the named recipes (Fp8Spec.Recipe in
// proto/fp8/v1/job.proto; names as in torchao.float8) as per-operand cast configs, with
// the long form (fp8.gemms) laid over them. Validation and the training engine both
// read the result.
#pragma once

#include <array>
#include <string>

#include "fp8/v1/job.pb.h"

namespace fp8::jobspec {

// The recipe's table. RECIPE_UNSPECIFIED reads as the default, tensorwise.
v1::Float8Gemms recipe_gemms(v1::Fp8Spec::Recipe recipe);

// recipe_gemms(fp8.recipe) with every field written in fp8.gemms replacing the recipe's.
// In the result every operand has a dtype, every fp8 operand a granularity and a scaling
// too (an operand the long form turned into fp8 without saying how gets tensorwise, and
// delayed scaling under the delayed recipe, dynamic otherwise), and every GEMM fast_accum.
v1::Float8Gemms effective_gemms(const v1::Fp8Spec& fp8);

bool is_fp8(const v1::CastConfig& operand);
// An fp8 operand at granularity block (1x128 tiles or 128x128 blocks, by tensor).
bool is_block(const v1::CastConfig& operand);

// The three GEMMs with their operands in formula order (lhs · rhs), each under the dotted
// path the long form uses, so checks can loop over them and name what they find.
struct OperandRef {
  std::string path;  // "fp8.gemms.grad_weight.input"
  const v1::CastConfig* cast;
};
struct GemmRef {
  std::string path;  // "fp8.gemms.grad_weight"
  OperandRef lhs, rhs;
  bool fast_accum;
  // Both operands fp8: the GEMM runs as an fp8 GEMM (a mixed GEMM runs in high precision
  // on the dequantized operand).
  bool runs_in_fp8() const { return is_fp8(*lhs.cast) && is_fp8(*rhs.cast); }
};
std::array<GemmRef, 3> list_gemms(const v1::Float8Gemms& gemms);

// Whether FSDP can gather a layer's weight as fp8 codes (fp8.all_gather_fp8): both GEMMs
// that read the weight (output and grad_input) run in fp8, so none reads it in high
// precision (Float8LinearNeeds::fp8_weight in the engine).
bool weight_gathers_in_fp8(const v1::Float8Gemms& gemms);

// torchao turns on power-of-2 scales for its rowwise recipes only; TransformerEngine's
// block scaling uses them by default too (blockwise).
bool recipe_uses_power_of2_scales(v1::Fp8Spec::Recipe recipe);

}  // namespace fp8::jobspec
