// How a Float8Linear casts each operand of each of its three GEMMs, resolved from the
// job's fp8 section into plain structs the engine can act on without protobuf.
//
//   output      = input · weightᵀ          [M, N] = [M, K] · [N, K]ᵀ
//   grad_input  = grad_output · weight      [M, K] = [M, N] · [N, K]
//   grad_weight = grad_outputᵀ · input      [N, K] = [M, N]ᵀ · [M, K]
//
// The recipe tables live in common/jobspec/fp8_recipes.* (common/'s job validator reads them
// and common/ must not depend on worker/); config.cc is the one engine file that reads them
// and only translates their result, so a recipe is defined in exactly one place.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fp8/arith.h"
#include "fp8/v1/job.pb.h"

namespace fp8::engine {

enum class CastDtype : uint8_t { kE4M3, kE5M2, kHighPrecision };

enum class ScaleGranularity : uint8_t {
  kTensorwise,  // one scale for the whole tensor
  kAxiswise,    // one scale per row of the operand's K-contiguous form (per non-contracted index)
  // One scale per tile of the operand's K-contiguous form, the tile set by the tensor:
  // 1x128 (128 values along K) for input and grad_output, 128x128 for the weight
  // (DeepSeek-V3). Dynamic scaling only; both operands of its GEMM block-scaled.
  kBlock,
};

enum class ScalingMode : uint8_t {
  kDynamic,  // scale from this cast's own amax
  kDelayed,  // scale from the max of an amax history (see scaling.h); tensorwise only
};

const char* cast_dtype_name(CastDtype d);
const char* scale_granularity_name(ScaleGranularity g);
const char* scaling_mode_name(ScalingMode s);

// One operand of one GEMM. Granularity, scaling and pow2 mean nothing for a
// high-precision operand and are left at their defaults there, so that two configs that
// cast the same way compare equal.
struct CastConfig {
  CastDtype dtype = CastDtype::kHighPrecision;
  ScaleGranularity granularity = ScaleGranularity::kTensorwise;
  ScalingMode scaling = ScalingMode::kDynamic;
  bool pow2_scale = false;  // scales rounded down to powers of two (exact rescaling)

  bool is_fp8() const { return dtype != CastDtype::kHighPrecision; }
  // The fp8 format; only meaningful when is_fp8().
  Format format() const { return dtype == CastDtype::kE5M2 ? Format::kE5M2 : Format::kE4M3; }
  bool operator==(const CastConfig&) const = default;
};

// "e4m3 axiswise dynamic pow2", "high_precision": for logs and error messages.
std::string describe(const CastConfig& c);

struct OutputGemmConfig {
  CastConfig input;
  CastConfig weight;
  bool fast_accum = false;
};

struct GradInputGemmConfig {
  CastConfig grad_output;
  CastConfig weight;
  bool fast_accum = false;
};

struct GradWeightGemmConfig {
  CastConfig grad_output;
  CastConfig input;
  bool fast_accum = false;
};

// A GEMM runs as an fp8 GEMM only when both of its operands are fp8; with one fp8
// operand it runs in high precision on that operand's dequantized copy (what the job
// validator documents), and with none it is a plain fp32 GEMM.
struct Float8LinearConfig {
  OutputGemmConfig output;
  GradInputGemmConfig grad_input;
  GradWeightGemmConfig grad_weight;
  // Length of each delayed-scaling amax history; read only when some operand is delayed.
  int amax_history_len = 16;

  bool output_runs_in_fp8() const { return output.input.is_fp8() && output.weight.is_fp8(); }
  bool grad_input_runs_in_fp8() const { return grad_input.grad_output.is_fp8() && grad_input.weight.is_fp8(); }
  bool grad_weight_runs_in_fp8() const { return grad_weight.grad_output.is_fp8() && grad_weight.input.is_fp8(); }
  bool any_fp8_gemm() const { return output_runs_in_fp8() || grad_input_runs_in_fp8() || grad_weight_runs_in_fp8(); }
  bool any_delayed() const;
};

// The named recipe with the spec's knobs (amax_history_len, power_of_2_scales) and long
// form (fp8.gemms) applied, validated. Knobs the spec leaves unset take the documented
// defaults, so a spec built in code need not go through the job.yaml loader first.
absl::StatusOr<Float8LinearConfig> config_from_spec(const v1::Fp8Spec& fp8);

// Shorthand for config_from_spec of a spec naming only `recipe`.
absl::StatusOr<Float8LinearConfig> recipe_config(v1::Fp8Spec::Recipe recipe, int amax_history_len = 16);

// Rejects what no backend can run, naming the operand by its job.yaml path
// ("fp8.gemms.grad_input: e5m2 x e5m2 ..."). The job validator rejects the same things
// earlier; this keeps a config built in code from failing deep inside a GEMM.
absl::Status validate(const Float8LinearConfig& config);

}  // namespace fp8::engine
