#include "common/jobspec/fp8_recipes.h"

namespace fp8::jobspec {
namespace {

using v1::CastConfig;

CastConfig cast(CastConfig::Dtype dtype, CastConfig::Granularity granularity, CastConfig::Scaling scaling) {
  CastConfig c;
  c.set_dtype(dtype);
  c.set_granularity(granularity);
  c.set_scaling(scaling);
  return c;
}

CastConfig high_precision() {
  CastConfig c;
  c.set_dtype(CastConfig::HIGH_PRECISION);
  return c;
}

v1::Float8Gemms table(const CastConfig& out_input, const CastConfig& out_weight,  //
                      const CastConfig& gi_grad_output, const CastConfig& gi_weight,
                      const CastConfig& gw_grad_output, const CastConfig& gw_input) {
  v1::Float8Gemms g;
  *g.mutable_output()->mutable_input() = out_input;
  *g.mutable_output()->mutable_weight() = out_weight;
  *g.mutable_grad_input()->mutable_grad_output() = gi_grad_output;
  *g.mutable_grad_input()->mutable_weight() = gi_weight;
  *g.mutable_grad_weight()->mutable_grad_output() = gw_grad_output;
  *g.mutable_grad_weight()->mutable_input() = gw_input;
  // torchao's defaults: fast accumulation in the forward only; the backward GEMMs
  // accumulate many small gradient products, where it costs accuracy.
  g.mutable_output()->set_fast_accum(true);
  g.mutable_grad_input()->set_fast_accum(false);
  g.mutable_grad_weight()->set_fast_accum(false);
  return g;
}

void complete_operand(CastConfig& c, CastConfig::Scaling default_scaling) {
  if (c.dtype() == CastConfig::DTYPE_UNSPECIFIED) c.set_dtype(CastConfig::HIGH_PRECISION);
  if (!is_fp8(c)) {
    // A recipe's fp8 operand that the long form keeps in high precision: how it would
    // have been scaled no longer means anything.
    c.clear_granularity();
    c.clear_scaling();
    return;
  }
  if (c.granularity() == CastConfig::GRANULARITY_UNSPECIFIED) c.set_granularity(CastConfig::TENSORWISE);
  if (c.scaling() == CastConfig::SCALING_UNSPECIFIED) c.set_scaling(default_scaling);
}

}  // namespace

v1::Float8Gemms recipe_gemms(v1::Fp8Spec::Recipe recipe) {
  constexpr auto kE4M3 = CastConfig::E4M3;
  constexpr auto kE5M2 = CastConfig::E5M2;
  constexpr auto kTensor = CastConfig::TENSORWISE;
  constexpr auto kAxis = CastConfig::AXISWISE;
  constexpr auto kDynamic = CastConfig::DYNAMIC;
  constexpr auto kDelayed = CastConfig::DELAYED;
  constexpr auto kBlock = CastConfig::BLOCK;
  switch (recipe) {
    case v1::Fp8Spec::BLOCKWISE: {
      // The tile follows the tensor (job.proto, CastConfig.BLOCK): 1x128 for input and
      // grad_output, 128x128 for the weight.
      CastConfig block = cast(kE4M3, kBlock, kDynamic);
      return table(block, block, block, block, block, block);
    }
    case v1::Fp8Spec::ROWWISE: {
      CastConfig axis = cast(kE4M3, kAxis, kDynamic);
      return table(axis, axis, axis, axis, axis, axis);
    }
    case v1::Fp8Spec::ROWWISE_WITH_GW_HP: {
      CastConfig axis = cast(kE4M3, kAxis, kDynamic);
      return table(axis, axis, axis, cast(kE4M3, kTensor, kDynamic), high_precision(), high_precision());
    }
    case v1::Fp8Spec::DELAYED: {
      CastConfig e4m3 = cast(kE4M3, kTensor, kDelayed);
      CastConfig e5m2 = cast(kE5M2, kTensor, kDelayed);
      return table(e4m3, e4m3, e5m2, e4m3, e5m2, e4m3);
    }
    case v1::Fp8Spec::NONE: {
      v1::Float8Gemms g = table(high_precision(), high_precision(), high_precision(), high_precision(),
                                high_precision(), high_precision());
      g.mutable_output()->set_fast_accum(false);
      return g;
    }
    case v1::Fp8Spec::TENSORWISE:
    default: {
      CastConfig e4m3 = cast(kE4M3, kTensor, kDynamic);
      CastConfig e5m2 = cast(kE5M2, kTensor, kDynamic);
      return table(e4m3, e4m3, e5m2, e4m3, e5m2, e4m3);
    }
  }
}

v1::Float8Gemms effective_gemms(const v1::Fp8Spec& fp8) {
  v1::Float8Gemms gemms = recipe_gemms(fp8.recipe());
  // Proto3 merge copies exactly what the long form wrote: enums that are not 0 (unset)
  // and optional fields that are present. An operand whose dtype the long form changes
  // keeps the recipe's granularity and scaling unless it changes those too.
  gemms.MergeFrom(fp8.gemms());
  CastConfig::Scaling default_scaling =
      fp8.recipe() == v1::Fp8Spec::DELAYED ? CastConfig::DELAYED : CastConfig::DYNAMIC;
  complete_operand(*gemms.mutable_output()->mutable_input(), default_scaling);
  complete_operand(*gemms.mutable_output()->mutable_weight(), default_scaling);
  complete_operand(*gemms.mutable_grad_input()->mutable_grad_output(), default_scaling);
  complete_operand(*gemms.mutable_grad_input()->mutable_weight(), default_scaling);
  complete_operand(*gemms.mutable_grad_weight()->mutable_grad_output(), default_scaling);
  complete_operand(*gemms.mutable_grad_weight()->mutable_input(), default_scaling);
  return gemms;
}

bool weight_gathers_in_fp8(const v1::Float8Gemms& gemms) {
  const std::array<GemmRef, 3> g = list_gemms(gemms);
  return g[0].runs_in_fp8() && g[1].runs_in_fp8();
}

bool is_fp8(const v1::CastConfig& operand) {
  return operand.dtype() == CastConfig::E4M3 || operand.dtype() == CastConfig::E5M2;
}

bool is_block(const v1::CastConfig& operand) {
  return is_fp8(operand) && operand.granularity() == CastConfig::BLOCK;
}

std::array<GemmRef, 3> list_gemms(const v1::Float8Gemms& g) {
  return {{
      {"fp8.gemms.output",
       {"fp8.gemms.output.input", &g.output().input()},
       {"fp8.gemms.output.weight", &g.output().weight()},
       g.output().fast_accum()},
      {"fp8.gemms.grad_input",
       {"fp8.gemms.grad_input.grad_output", &g.grad_input().grad_output()},
       {"fp8.gemms.grad_input.weight", &g.grad_input().weight()},
       g.grad_input().fast_accum()},
      {"fp8.gemms.grad_weight",
       {"fp8.gemms.grad_weight.grad_output", &g.grad_weight().grad_output()},
       {"fp8.gemms.grad_weight.input", &g.grad_weight().input()},
       g.grad_weight().fast_accum()},
  }};
}

bool recipe_uses_power_of2_scales(v1::Fp8Spec::Recipe recipe) {
  return recipe == v1::Fp8Spec::ROWWISE || recipe == v1::Fp8Spec::ROWWISE_WITH_GW_HP ||
         recipe == v1::Fp8Spec::BLOCKWISE;
}

}  // namespace fp8::jobspec
