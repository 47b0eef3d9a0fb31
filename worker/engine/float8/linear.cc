#include "worker/engine/float8/linear.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "worker/engine/float8/linear_state.h"

namespace fp8::engine {

const char* tensor_kind_name(TensorKind t) {
  switch (t) {
    case TensorKind::kInput:
      return "input";
    case TensorKind::kWeight:
      return "weight";
    case TensorKind::kGradOutput:
      return "grad_output";
  }
  return "?";
}

// ---- Float8Linear -------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<Float8Linear>> Float8Linear::create(Backend& backend, int64_t in_features,
                                                                   int64_t out_features,
                                                                   const Float8LinearConfig& config,
                                                                   const LinearActivations& activations,
                                                                   SharedCastCopies* shared_copies) {
  if (in_features <= 0 || out_features <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("Float8Linear: in_features and out_features must be positive, got ",
                                                   in_features, " and ", out_features));
  }
  if (auto s = validate(config); !s.ok()) return s;
  for (const auto& [what, dtype] : {std::pair{"input", activations.input}, std::pair{"output", activations.output}}) {
    if (!is_activation_dtype(dtype)) {
      return absl::InvalidArgumentError(
          absl::StrCat("Float8Linear: activations.", what, " must be float32 or bfloat16, got ", dtype_name(dtype)));
    }
  }
  if (backend.is_cuda() && config.any_fp8_gemm() &&
      (in_features % kGpuFp8GemmMultiple != 0 || out_features % kGpuFp8GemmMultiple != 0)) {
    // The job validator rejects such layers first (or pads them); this is defence in depth.
    return absl::InvalidArgumentError(
        absl::StrCat("Float8Linear(in_features=", in_features, ", out_features=", out_features, ") on ", backend.name(),
                     ": fp8 GEMMs on a GPU need both dimensions to be multiples of ", kGpuFp8GemmMultiple,
                     " (cuBLASLt fp8 needs 16-aligned K-contiguous operands); keep this layer in high precision"));
  }

  // Block-scaled GEMMs (the job validator checks the same first): K in whole 128-wide
  // blocks, on every backend.
  const bool output_block = config.output_runs_in_fp8() && config.output.input.granularity == ScaleGranularity::kBlock;
  const bool grad_input_block =
      config.grad_input_runs_in_fp8() && config.grad_input.grad_output.granularity == ScaleGranularity::kBlock;
  const bool grad_weight_block =
      config.grad_weight_runs_in_fp8() && config.grad_weight.grad_output.granularity == ScaleGranularity::kBlock;
  if (output_block || grad_input_block || grad_weight_block) {
    if ((output_block && in_features % kScaleBlock != 0) || (grad_input_block && out_features % kScaleBlock != 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("Float8Linear(in_features=", in_features, ", out_features=", out_features,
                       "): block-scaled GEMMs contract in 128-wide blocks, so the dimensions they contract (",
                       output_block ? "in_features" : "", output_block && grad_input_block ? " and " : "",
                       grad_input_block ? "out_features" : "", ") must be multiples of ", kScaleBlock));
    }
  }

  auto state = std::make_unique<State>(backend, in_features, out_features, config, activations);
  const Float8LinearConfig& c = state->info.config;
  state->plans.reserve(6);  // at most two casts per tensor; CastPlan is not copied after this
  state->plan_tensor(TensorKind::kInput, c.output.input, c.output_runs_in_fp8(), "output", c.grad_weight.input,
                     c.grad_weight_runs_in_fp8(), "grad_weight");
  state->plan_tensor(TensorKind::kWeight, c.output.weight, c.output_runs_in_fp8(), "output", c.grad_input.weight,
                     c.grad_input_runs_in_fp8(), "grad_input");
  state->plan_tensor(TensorKind::kGradOutput, c.grad_input.grad_output, c.grad_input_runs_in_fp8(), "grad_input",
                     c.grad_weight.grad_output, c.grad_weight_runs_in_fp8(), "grad_weight");
  state->plan_delayed_scaling();
  if (shared_copies != nullptr) {
    for (size_t i = 0; i < state->plans.size(); ++i) state->plans[i].copies = shared_copies->of_cast(i);
  }
  for (TensorKind t : {TensorKind::kInput, TensorKind::kWeight, TensorKind::kGradOutput}) {
    state->info.needs.row_amax[static_cast<int>(t)] = state->reads_row_amax(t);
    for (int plan : state->use[static_cast<int>(t)]) {
      if (plan < 0) continue;
      const Granularity g = state->plans[static_cast<size_t>(plan)].granularity;
      if (g == Granularity::kTensorwise || g == Granularity::kRowwise) {
        state->info.needs.scaled_over_rows[static_cast<int>(t)] = true;
      }
      if (g == Granularity::kRowwise || g == Granularity::kColumnwise) state->info.needs.axiswise = true;
    }
  }
  state->info.needs.input_in_backward = state->reads_raw(TensorKind::kInput, kTransposed);
  state->info.needs.fp8_weight = state->takes_fp8_weight();
  if (state->info.needs.fp8_weight) {
    Float8LinearNeeds& needs = state->info.needs;
    needs.weight_output = state->weight_cast(kAsStored);
    needs.weight_grad_input = state->weight_cast(kTransposed);
    // A transposed block cast's blocks are the weight's (the codes transpose exactly); a
    // row and a column scale never coincide.
    const bool one_plan = state->use[static_cast<int>(TensorKind::kWeight)][kAsStored] ==
                          state->use[static_cast<int>(TensorKind::kWeight)][kTransposed];
    needs.weight_codes_shared =
        one_plan || (needs.weight_output == needs.weight_grad_input &&
                     needs.weight_output.granularity == Granularity::kBlock128x128);
  }
  std::vector<DelayedScaling> fresh;
  for (int i : state->delayed_plans) {
    const CastConfig& cast = state->plans[static_cast<size_t>(i)].config;
    fresh.emplace_back(state->delayed_history_len(), cast.format(), cast.pow2_scale);
  }
  if (auto s = state->upload_delayed(fresh); !s.ok()) return s;
  return std::unique_ptr<Float8Linear>(new Float8Linear(std::move(state)));
}

Float8Linear::Float8Linear(std::unique_ptr<State> state) : s_(std::move(state)), delayed_(s_.get()) {}
Float8Linear::~Float8Linear() = default;

const Float8LinearInfo& Float8Linear::info() const { return s_->info; }

absl::Status Float8Linear::forward(const void* input, int64_t tokens, LinearWeight weight, const float* bias,
                                   void* output, const ForwardOptions& options) {
  return run_forward(input, tokens, weight, bias, output, /*for_backward=*/true, options);
}

absl::Status Float8Linear::forward_no_grad(const void* input, int64_t tokens, LinearWeight weight, const float* bias,
                                           void* output, const ForwardOptions& options) {
  return run_forward(input, tokens, weight, bias, output, /*for_backward=*/false, options);
}

absl::Status Float8Linear::rebind_weight(LinearWeight weight) {
  if (weight.fp8() != nullptr) return rebind_fp8_weight(*weight.fp8());
  if (s_->tokens == 0) return absl::FailedPreconditionError("Float8Linear::rebind_weight: no forward() to rebind");
  if (weight.f32() == nullptr) return absl::InvalidArgumentError("Float8Linear::rebind_weight: null weight");
  s_->weight = weight.f32();
  return absl::OkStatus();
}

absl::Status Float8Linear::rebind_fp8_weight(const Fp8Weight& weight) {
  State& s = *s_;
  if (s.tokens == 0) return absl::FailedPreconditionError("Float8Linear::rebind_weight: no forward() to rebind");
  if (!s.takes_fp8_weight()) {
    return absl::InvalidArgumentError("Float8Linear::rebind_weight: this layer's config takes no fp8 weight");
  }
  if (!s.plans[static_cast<size_t>(s.weight_plan())].external) {
    return absl::FailedPreconditionError(
        "Float8Linear::rebind_weight: the last forward() cast the weight itself; rebind it with fp32 values");
  }
  // The same values in new memory (a delayed amax was recorded by the forward).
  return s.adopt_fp8_weight(weight, /*slot_row=*/-1, /*for_backward=*/true);
}

absl::Status Float8Linear::run_forward(const void* input, int64_t tokens, LinearWeight weight, const float* bias,
                                       void* output, bool for_backward, const ForwardOptions& options) {
  State& s = *s_;
  if (input == nullptr || (weight.f32() == nullptr && weight.fp8() == nullptr) || output == nullptr) {
    return absl::InvalidArgumentError("Float8Linear::forward: input, weight and output must not be null");
  }
  if (weight.fp8() != nullptr && !s.info.needs.fp8_weight) {
    return absl::FailedPreconditionError(
        "Float8Linear::forward: this layer's config cannot take a weight cast elsewhere (it needs both GEMMs that "
        "read the weight in fp8)");
  }
  if (weight.fp8() != nullptr && options.weight_row_amax != nullptr) {
    return absl::InvalidArgumentError(
        "Float8Linear::forward: weight_row_amax was given with an Fp8Weight, which is cast already");
  }
  if (tokens <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("Float8Linear::forward: tokens must be positive, got ", tokens));
  }
  if (s.backend.is_cuda() && s.info.config.grad_weight_runs_in_fp8() && tokens % kGpuFp8GemmMultiple != 0) {
    return absl::InvalidArgumentError(absl::StrCat("Float8Linear::forward: tokens=", tokens, " is not a multiple of ",
                                                   kGpuFp8GemmMultiple,
                                                   ", which the fp8 grad_weight GEMM contracts over on a GPU"));
  }
  const int64_t m = tokens, k = s.info.in_features, n = s.info.out_features;
  const int row = s.forward_slots.rows_used;
  if (s.forward_slots.columns > 0) {
    if (auto st = s.forward_slots.prepare_row(); !st.ok()) return st;
  }
  if (auto st = s.cast_input({input, s.info.activations.input, m, k}, row, options.input_row_amax); !st.ok()) return st;
  if (weight.fp8() != nullptr) {
    if (auto st = s.adopt_fp8_weight(*weight.fp8(), row, /*for_backward=*/false); !st.ok()) return st;
  } else if (auto st = s.cast_tensor(TensorKind::kWeight, {weight.f32(), DType::kFloat32, n, k}, row,
                                     options.weight_row_amax);
             !st.ok()) {
    return st;
  }
  // The weight in the compute dtype, for the high-precision GEMMs that read it as is: this
  // forward's, and (converted here once) its backward's. An Fp8Weight has none
  // (info.needs.fp8_weight).
  const void* weight_raw = weight.f32();
  if (weight.f32() != nullptr && (s.reads_raw(TensorKind::kWeight, kAsStored) ||
                                (for_backward && s.reads_raw(TensorKind::kWeight, kTransposed)))) {
    absl::StatusOr<const void*> w = s.in_compute_dtype(weight.f32(), DType::kFloat32, n * k, s.weight_compute);
    if (!w.ok()) return w.status();
    weight_raw = *w;
  }

  absl::Status st;
  if (s.info.config.output_runs_in_fp8()) {
    ScaledGemmArgs g;
    g.m = m;
    g.n = n;
    g.k = k;
    g.a = s.scaled(TensorKind::kInput, kAsStored);
    g.b = s.scaled(TensorKind::kWeight, kAsStored);
    g.out_dtype = s.info.activations.output;
    g.out = output;
    g.bias = bias;
    g.addend = options.residual;
    g.fast_accum = s.info.config.output.fast_accum;
    st = s.backend.scaled_gemm(g);
  } else {
    GemmArgs g;
    g.m = m;
    g.n = n;
    g.k = k;
    g.a = s.high_precision(TensorKind::kInput, kAsStored, input);
    g.b = s.high_precision(TensorKind::kWeight, kAsStored, weight_raw);
    g.in_dtype = s.compute_dtype();
    g.trans_b = true;  // W is stored [N, K]
    g.out_dtype = s.info.activations.output;
    g.out = output;
    g.bias = bias;
    g.addend = options.residual;
    g.beta = options.residual != nullptr ? 1.0f : 0.0f;
    st = s.backend.gemm(g);
  }
  if (!st.ok()) return st;
  if (!for_backward) {
    // The amax slot row this pass wrote stays uncounted, so the next training forward
    // overwrites it and delayed scaling never sees evaluation data; and the fp8 copies it
    // made no longer belong to the last training forward, so backward() must refuse.
    s.input = nullptr;
    s.weight = nullptr;
    s.tokens = 0;
    return absl::OkStatus();
  }
  s.input = input;
  s.weight = weight.f32();
  s.tokens = tokens;
  if (s.forward_slots.columns > 0) ++s.forward_slots.rows_used;
  return absl::OkStatus();
}

absl::Status Float8Linear::backward(const void* grad_output, void* grad_input, float* grad_weight, float* grad_bias,
                                    const BackwardOptions& options) {
  State& s = *s_;
  if (s.tokens == 0) return absl::FailedPreconditionError("Float8Linear::backward: no forward() to differentiate");
  if (grad_output == nullptr || grad_weight == nullptr) {
    return absl::InvalidArgumentError("Float8Linear::backward: grad_output and grad_weight must not be null");
  }
  if (s.input_adopted && s.input_source->input_casts != s.adopted_input_cast) {
    return absl::FailedPreconditionError(
        "Float8Linear::backward: the layer whose input casts the forward shared has cast again since; the forward "
        "can no longer be differentiated");
  }
  const int64_t m = s.tokens, k = s.info.in_features, n = s.info.out_features;
  const DType compute = s.compute_dtype();
  const DType grad_dtype = s.info.activations.output;
  const int row = s.backward_slots.rows_used;
  if (s.backward_slots.columns > 0) {
    if (auto st = s.backward_slots.prepare_row(); !st.ok()) return st;
  }
  if (auto st =
          s.cast_tensor(TensorKind::kGradOutput, {grad_output, grad_dtype, m, n}, row, options.grad_output_row_amax);
      !st.ok()) {
    return st;
  }
  // grad_output in the compute dtype, converted once for whichever high-precision GEMMs
  // read it as is. The weight's was made by the forward.
  const void* grad_output_raw = grad_output;
  if ((grad_input != nullptr && s.reads_raw(TensorKind::kGradOutput, kAsStored)) ||
      s.reads_raw(TensorKind::kGradOutput, kTransposed)) {
    absl::StatusOr<const void*> g = s.in_compute_dtype(grad_output, grad_dtype, m * n, s.grad_output_compute);
    if (!g.ok()) return g.status();
    grad_output_raw = *g;
  }
  const void* weight_raw = compute == DType::kFloat32 ? s.weight : s.weight_compute.as<const void>();

  if (grad_input != nullptr) {
    const int wp = s.use[static_cast<int>(TensorKind::kWeight)][kTransposed];
    if (wp >= 0 && s.plans[static_cast<size_t>(wp)].external &&
        s.plans[static_cast<size_t>(wp)].in_use.codes_t == nullptr) {
      return absl::FailedPreconditionError(
          "Float8Linear::backward: the forward's Fp8Weight had no grad_input codes (codes_t); "
          "rebind_weight() with them first");
    }
    absl::Status st;
    if (s.info.config.grad_input_runs_in_fp8()) {
      ScaledGemmArgs g;  // [M, K] = g [M, N] · (Wᵀ [K, N])ᵀ
      g.m = m;
      g.n = k;
      g.k = n;
      g.a = s.scaled(TensorKind::kGradOutput, kAsStored);
      g.b = s.scaled(TensorKind::kWeight, kTransposed);
      g.out_dtype = s.info.activations.input;
      g.out = grad_input;
      g.accumulate = options.grad_input == Store::kAccumulate;
      g.fast_accum = s.info.config.grad_input.fast_accum;
      st = s.backend.scaled_gemm(g);
    } else {
      GemmArgs g;  // [M, K] = g [M, N] · W [N, K]
      g.m = m;
      g.n = k;
      g.k = n;
      g.a = s.high_precision(TensorKind::kGradOutput, kAsStored, grad_output_raw);
      g.b = s.high_precision(TensorKind::kWeight, kTransposed, weight_raw);
      g.in_dtype = compute;
      g.out_dtype = s.info.activations.input;
      g.out = grad_input;
      g.beta = options.grad_input == Store::kAccumulate ? 1.0f : 0.0f;
      st = s.backend.gemm(g);
    }
    if (!st.ok()) return st;
  }

  const bool add_to_grad_weight = options.grad_weight == Store::kAccumulate;
  absl::Status st;
  if (s.info.config.grad_weight_runs_in_fp8()) {
    ScaledGemmArgs g;  // [N, K] += gᵀ [N, M] · (xᵀ [K, M])ᵀ
    g.m = n;
    g.n = k;
    g.k = m;
    g.a = s.scaled(TensorKind::kGradOutput, kTransposed);
    g.b = s.scaled(TensorKind::kInput, kTransposed);
    g.out = grad_weight;  // fp32
    g.accumulate = add_to_grad_weight;
    g.fast_accum = s.info.config.grad_weight.fast_accum;
    st = s.backend.scaled_gemm(g);
  } else {
    GemmArgs g;  // [N, K] += g [M, N]ᵀ · x [M, K]
    g.m = n;
    g.n = k;
    g.k = m;
    g.a = s.high_precision(TensorKind::kGradOutput, kTransposed, grad_output_raw);
    g.trans_a = true;
    g.b = s.high_precision(TensorKind::kInput, kTransposed, s.input);
    g.in_dtype = compute;
    g.out = grad_weight;  // fp32, accumulated in fp32 whatever the compute dtype
    g.beta = add_to_grad_weight ? 1.0f : 0.0f;
    st = s.backend.gemm(g);
  }
  if (!st.ok()) return st;

  if (grad_bias != nullptr) {
    // grad_bias [1, N] += ones [1, M] · g [M, N]: the column sums, as one GEMM on
    // grad_output as it came (ones are exact in bf16), accumulated in fp32.
    absl::StatusOr<const void*> ones = s.hp_ones(grad_dtype, m);
    if (!ones.ok()) return ones.status();
    GemmArgs g;
    g.m = 1;
    g.n = n;
    g.k = m;
    g.a = *ones;
    g.b = grad_output;
    g.in_dtype = grad_dtype;
    g.out = grad_bias;
    g.beta = add_to_grad_weight ? 1.0f : 0.0f;
    if (auto e = s.backend.gemm(g); !e.ok()) return e;
  }
  if (s.backward_slots.columns > 0) ++s.backward_slots.rows_used;
  return absl::OkStatus();
}

// ---- sibling layers that read one input --------------------------------------------------------

bool Float8Linear::share_input_casts_from(const Float8Linear& source) {
  if (!s_->can_share_input_with(*source.s_)) return false;
  s_->input_source = source.s_.get();
  return true;
}


bool Float8Linear::State::reads_row_amax(TensorKind t) const {
  for (int plan : use[static_cast<int>(t)]) {
    if (plan < 0) continue;
    const CastPlan& p = plans[static_cast<size_t>(plan)];
    if (reads_row_amax(p)) return true;
  }
  return false;
}

bool Float8Linear::State::reads_row_amax(const CastPlan& p) const {
  return !p.delayed && (p.granularity == Granularity::kTensorwise || p.granularity == Granularity::kRowwise);
}

void Float8Linear::set_observer(Float8LinearObserver* observer) { s_->observer = observer; }

}  // namespace fp8::engine
