#include "worker/engine/float8/config.h"

#include <array>

#include "absl/strings/str_cat.h"
#include "common/jobspec/fp8_recipes.h"

namespace fp8::engine {
namespace {

// Defaults the job.yaml loader writes into a spec; repeated here for specs built in code.
constexpr int kDefaultAmaxHistoryLen = 16;
constexpr int kMaxAmaxHistoryLen = 4096;

CastConfig from_proto(const v1::CastConfig& c, bool pow2) {
  CastConfig out;
  switch (c.dtype()) {
    case v1::CastConfig::E4M3:
      out.dtype = CastDtype::kE4M3;
      break;
    case v1::CastConfig::E5M2:
      out.dtype = CastDtype::kE5M2;
      break;
    default:
      // EffectiveGemms completes every unset dtype to high precision.
      return out;
  }
  switch (c.granularity()) {
    case v1::CastConfig::AXISWISE:
      out.granularity = ScaleGranularity::kAxiswise;
      break;
    case v1::CastConfig::BLOCK:
      out.granularity = ScaleGranularity::kBlock;
      break;
    default:
      out.granularity = ScaleGranularity::kTensorwise;
      break;
  }
  out.scaling = c.scaling() == v1::CastConfig::DELAYED ? ScalingMode::kDelayed : ScalingMode::kDynamic;
  out.pow2_scale = pow2;
  return out;
}

// The three GEMMs as (path, lhs, rhs) in formula order, for checks that loop over them.
struct GemmView {
  const char* path;
  const char* lhs_name;
  const CastConfig* lhs;
  const char* rhs_name;
  const CastConfig* rhs;
};

std::array<GemmView, 3> gemm_views(const Float8LinearConfig& c) {
  return {{
      {"fp8.gemms.output", "input", &c.output.input, "weight", &c.output.weight},
      {"fp8.gemms.grad_input", "grad_output", &c.grad_input.grad_output, "weight", &c.grad_input.weight},
      {"fp8.gemms.grad_weight", "grad_output", &c.grad_weight.grad_output, "input", &c.grad_weight.input},
  }};
}

}  // namespace

const char* cast_dtype_name(CastDtype d) {
  switch (d) {
    case CastDtype::kE4M3:
      return "e4m3";
    case CastDtype::kE5M2:
      return "e5m2";
    case CastDtype::kHighPrecision:
      return "high_precision";
  }
  return "?";
}

const char* scale_granularity_name(ScaleGranularity g) {
  switch (g) {
    case ScaleGranularity::kTensorwise:
      return "tensorwise";
    case ScaleGranularity::kAxiswise:
      return "axiswise";
    case ScaleGranularity::kBlock:
      return "block";
  }
  return "?";
}

const char* scaling_mode_name(ScalingMode s) { return s == ScalingMode::kDelayed ? "delayed" : "dynamic"; }

std::string describe(const CastConfig& c) {
  if (!c.is_fp8()) return cast_dtype_name(c.dtype);
  return absl::StrCat(cast_dtype_name(c.dtype), " ", scale_granularity_name(c.granularity), " ",
                      scaling_mode_name(c.scaling), c.pow2_scale ? " pow2" : "");
}

bool Float8LinearConfig::any_delayed() const {
  for (const GemmView& g : gemm_views(*this)) {
    if ((g.lhs->is_fp8() && g.lhs->scaling == ScalingMode::kDelayed) ||
        (g.rhs->is_fp8() && g.rhs->scaling == ScalingMode::kDelayed)) {
      return true;
    }
  }
  return false;
}

absl::StatusOr<Float8LinearConfig> config_from_spec(const v1::Fp8Spec& fp8) {
  const v1::Float8Gemms gemms = jobspec::effective_gemms(fp8);
  const bool pow2 =
      fp8.has_power_of_2_scales() ? fp8.power_of_2_scales() : jobspec::recipe_uses_power_of2_scales(fp8.recipe());

  Float8LinearConfig c;
  c.output.input = from_proto(gemms.output().input(), pow2);
  c.output.weight = from_proto(gemms.output().weight(), pow2);
  c.output.fast_accum = gemms.output().fast_accum();
  c.grad_input.grad_output = from_proto(gemms.grad_input().grad_output(), pow2);
  c.grad_input.weight = from_proto(gemms.grad_input().weight(), pow2);
  c.grad_input.fast_accum = gemms.grad_input().fast_accum();
  c.grad_weight.grad_output = from_proto(gemms.grad_weight().grad_output(), pow2);
  c.grad_weight.input = from_proto(gemms.grad_weight().input(), pow2);
  c.grad_weight.fast_accum = gemms.grad_weight().fast_accum();
  c.amax_history_len = fp8.has_amax_history_len() ? fp8.amax_history_len() : kDefaultAmaxHistoryLen;

  if (auto s = validate(c); !s.ok()) return s;
  return c;
}

absl::StatusOr<Float8LinearConfig> recipe_config(v1::Fp8Spec::Recipe recipe, int amax_history_len) {
  v1::Fp8Spec fp8;
  fp8.set_recipe(recipe);
  fp8.set_amax_history_len(amax_history_len);
  return config_from_spec(fp8);
}

absl::Status validate(const Float8LinearConfig& c) {
  for (const GemmView& g : gemm_views(c)) {
    if (g.lhs->dtype == CastDtype::kE5M2 && g.rhs->dtype == CastDtype::kE5M2) {
      return absl::InvalidArgumentError(
          absl::StrCat(g.path, ": e5m2 x e5m2 has no fp8 GEMM kernel; make one operand e4m3"));
    }
    for (auto [name, op] : {std::pair{g.lhs_name, g.lhs}, std::pair{g.rhs_name, g.rhs}}) {
      if (op->is_fp8() && op->scaling == ScalingMode::kDelayed && op->granularity != ScaleGranularity::kTensorwise) {
        return absl::InvalidArgumentError(
            absl::StrCat(g.path, ".", name,
                         ": delayed scaling keeps one amax history per tensor, so it needs tensorwise "
                         "granularity, not ",
                         scale_granularity_name(op->granularity)));
      }
    }
    // The block-scaled GEMM takes block scales on both operands, and a block cast has no
    // dequantized copy for a mixed GEMM.
    const bool lhs_block = g.lhs->is_fp8() && g.lhs->granularity == ScaleGranularity::kBlock;
    const bool rhs_block = g.rhs->is_fp8() && g.rhs->granularity == ScaleGranularity::kBlock;
    if (lhs_block != rhs_block) {
      return absl::InvalidArgumentError(absl::StrCat(
          g.path, ": ", lhs_block ? g.lhs_name : g.rhs_name, " is block-scaled, so ",
          lhs_block ? g.rhs_name : g.lhs_name, " must be fp8 at block granularity too (got ",
          describe(lhs_block ? *g.rhs : *g.lhs), ")"));
    }
  }
  if (c.any_delayed() && (c.amax_history_len < 1 || c.amax_history_len > kMaxAmaxHistoryLen)) {
    return absl::InvalidArgumentError(
        absl::StrCat("fp8.amax_history_len: must be in [1, ", kMaxAmaxHistoryLen, "], got ", c.amax_history_len));
  }
  return absl::OkStatus();
}

}  // namespace fp8::engine
