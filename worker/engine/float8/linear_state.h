// Float8Linear's state (the pimpl behind linear.h) and what its sources share:
// linear.cc (the public API: forward, backward, sibling layers sharing an input),
// casts.cc (planning the casts, running them, the GEMMs' operands), scaling.cc (delayed
// scaling, the weight's scale for a cast made elsewhere) and numerics.cc (what each cast
// did). Internal to those files.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/engine/float8/backend_buffer.h"
#include "worker/engine/float8/cast_copies.h"
#include "worker/engine/float8/linear.h"

namespace fp8::engine {


// cuBLASLt's fp8 GEMMs need the contracted and output dimensions to be multiples of this.
constexpr int64_t kGpuFp8GemmMultiple = 16;
// cuBLASLt rejects scale pointers that are not 16-byte aligned (CUBLAS_STATUS_NOT_SUPPORTED),
// so each delayed cast's scale and inverse scale sit 16 bytes apart in their shared buffer.
constexpr int64_t kFloatsPer16Bytes = 4;
constexpr int64_t kDelayedScaleStride = 2 * kFloatsPer16Bytes;  // scale, then 1/scale

// Each tensor feeds two GEMMs: one takes it as stored, the other transposed (see the
// table in linear.h).
enum Orientation : int { kAsStored = 0, kTransposed = 1 };

inline size_t dtype_bytes(DType t, int64_t n) { return static_cast<size_t>(n) * dtype_size(t); }

// The GEMM that uses a tensor in an orientation (the table in linear.h).
enum class Gemm : uint8_t { kOutput, kGradInput, kGradWeight };
inline Gemm gemm_of(TensorKind t, Orientation o) {
  switch (t) {
    case TensorKind::kInput:
      return o == kAsStored ? Gemm::kOutput : Gemm::kGradWeight;
    case TensorKind::kWeight:
      return o == kAsStored ? Gemm::kOutput : Gemm::kGradInput;
    case TensorKind::kGradOutput:
      return o == kAsStored ? Gemm::kGradInput : Gemm::kGradWeight;
  }
  return Gemm::kOutput;
}

inline bool is_activation_dtype(DType t) { return t == DType::kFloat32 || t == DType::kBFloat16; }

// One fp8 cast of one tensor, serving one or both of the tensor's GEMM uses.
struct CastPlan {
  explicit CastPlan(Backend& b)
      : copies(std::make_shared<CastCopies>(b)), scale(b), inv_scale(b), amax(b), range_counts(b) {}

  TensorKind tensor = TensorKind::kInput;
  CastConfig config;
  // Scale granularity on the tensor as stored: an axiswise use as stored scales per row,
  // an axiswise transposed use per column (= per row of the transposed copy). A block cast
  // (1x128 for input and grad_output, 128x128 for the weight) is on the matrix it casts:
  // the tensor as stored, or with cast_transposed its transpose.
  Granularity granularity = Granularity::kTensorwise;
  // The plan casts the tensor's high-precision transpose into its transposed copy: block
  // scales along the other dimension cannot come from a cast of the tensor as stored.
  // in_use then describes the transposed matrix ([cols, rows]).
  bool cast_transposed = false;
  std::string gemms;              // the GEMMs it serves, for metrics
  bool make_out = false;          // fp8 copy as stored
  bool make_out_t = false;        // fp8 copy transposed
  bool make_dequantized = false;  // copy of the fp8 values in the compute dtype, for a mixed GEMM

  bool delayed = false;              // scaled from its amax history (State::delayed_states)
  int delayed_index = -1;            // position among the layer's delayed casts
  int delayed_column = -1;           // column in its direction's amax slots
  // The host knows that the history has a scale. Once it has one it keeps one, so the flag
  // is learnt once (State::confirm_delayed_scales); until then the cast scales dynamically.
  bool delayed_scale_ready = false;

  // The plan's own copies, or copies shared with other layers' same plan (cast_copies.h).
  std::shared_ptr<CastCopies> copies;
  BackendBuffer scale, inv_scale, amax;
  // What the GEMMs after the last cast read: the plan's own copies and scales, a sibling's
  // (`shared`), or, when `external`, a weight cast outside the layer (an Fp8Tensor it was
  // handed, until it casts this tensor itself again). rows is 0 until the first cast. A null
  // code pointer was not made or not provided: the GEMM that needs it refuses to run. The
  // amax of a delayed cast is not here but in its step's slots (last_amax_row).
  Fp8Tensor in_use;
  bool external = false;
  // The same cast made by a sibling layer from the same input (share_input_casts_from):
  // its dequantized copy and range counts serve this layer until it casts again.
  const CastPlan* shared = nullptr;
  // Copies and statistics in use: the plan's own, or the sibling's.
  const CastPlan& holder() const { return shared != nullptr ? *shared : *this; }
  int last_amax_row = -1;  // delayed casts: the slot row it wrote

  // The last cast's saturation / underflow counts (a CastRangeCounts in backend memory),
  // valid when it ran while the layer was measuring.
  BackendBuffer range_counts;
  bool range_counted = false;
};

// Amaxes of one direction's delayed casts (forward: input and weight; backward:
// grad_output), one row per micro-batch of the current step, one column per cast.
// Reduced to one value per cast by DelayedCasts::write_step_amaxes().
struct AmaxSlots {
  explicit AmaxSlots(Backend& b) : buffer(b) {}
  BackendBuffer buffer;
  int columns = 0;
  int rows_used = 0;

  // Room for the row the coming micro-batch writes (it is counted once the pass
  // succeeds). Grows to 8 rows, then doubles, so that only the first steps allocate.
  absl::Status prepare_row() {
    if (float_bytes(static_cast<int64_t>(rows_used + 1) * columns) <= buffer.capacity()) return absl::OkStatus();
    const int64_t rows = std::max<int64_t>(8, 2 * static_cast<int64_t>(rows_used));
    return buffer.grow(float_bytes(rows * columns), static_cast<int64_t>(rows_used) * columns);
  }
  float* at(int row, int column) const { return buffer.as<float>() + static_cast<int64_t>(row) * columns + column; }
};

struct Float8Linear::State {
  State(Backend& b, int64_t in, int64_t out, const Float8LinearConfig& c, const LinearActivations& a)
      : backend(b),
        info{in, out, c, a, {}},
        forward_slots(b),
        backward_slots(b),
        delayed_states(b),
        delayed_scales(b),
        step_amaxes(b),
        numerics_staging(b),
        f32_ones(b),
        bf16_ones(b),
        weight_compute(b),
        grad_output_compute(b),
        transposed_input(b),
        transpose_scratch(b) {}

  Backend& backend;
  // Float8Linear::info(): in_features (K), out_features (N), config and activations as
  // create() got them; create() fills in needs from the plans. Fixed from then on.
  Float8LinearInfo info;
  bool measuring = false;  // set_measuring()

  // High-precision GEMMs run in the input's dtype, as autocast runs a bf16 linear: both
  // GEMM operands must share a dtype, and a bf16 input is where bf16 compute pays off.
  DType compute_dtype() const { return info.activations.input; }

  std::vector<CastPlan> plans;
  // use[tensor][orientation]: the plan that casts it for that GEMM, -1 for high precision.
  std::array<std::array<int, 2>, 3> use{{{-1, -1}, {-1, -1}, {-1, -1}}};
  std::vector<int> delayed_plans;  // indices into plans, in delayed_index order
  AmaxSlots forward_slots, backward_slots;
  // Each delayed cast's history and scale, fp8/delayed_state.h's layout (delayed_state_floats()
  // each, in delayed_index order): they live in backend memory and each step records into
  // them there (Backend::record_delayed_amaxes), so no step waits for its amaxes.
  BackendBuffer delayed_states;
  // Two halves, each kDelayedScaleStride floats per delayed cast: its scale, then 1/scale
  // 16 bytes on. The casts read half scale_half; a step's record writes the other one and
  // flips, so the scales the step's casts used stay readable (numerics()) until the next
  // step's record.
  BackendBuffer delayed_scales;
  int scale_half = 0;
  BackendBuffer step_amaxes;       // scratch of finish_step()
  BackendBuffer numerics_staging;  // numerics() gathers what it reads here
  // Constant vectors of fp32 or bf16 ones (grad_output's dtype), grown to the largest size
  // asked for: they sum grad_output's rows for grad_bias with one GEMM.
  BackendBuffer f32_ones, bf16_ones;
  int64_t f32_ones_count = 0, bf16_ones_count = 0;

  // Operands of high-precision GEMMs converted to a bf16 compute dtype (unused in fp32):
  // the weight, converted by the forward and reused by its backward (the weight cannot
  // change in between: forward()'s contract), and grad_output when it is fp32.
  BackendBuffer weight_compute, grad_output_compute;
  // A block cast's transposed tensor in high precision, and the byte planes that make it
  // (transpose_high_precision).
  BackendBuffer transposed_input, transpose_scratch;

  // Saved by forward() for backward().
  const void* input = nullptr;  // info.activations.input
  const float* weight = nullptr;
  int64_t tokens = 0;

  // What the input plans hold now, for siblings that share them: the input they cast (or
  // took from input_source) and a count of the layer's own input casts, which a sharing
  // sibling checks before its backward reads them.
  const void* input_cast_of = nullptr;
  int64_t input_cast_tokens = 0;
  uint64_t input_casts = 0;
  // share_input_casts_from(): the sibling whose input casts this layer takes, and that
  // sibling's input_casts when this layer's forward took them.
  const State* input_source = nullptr;
  uint64_t adopted_input_cast = 0;
  bool input_adopted = false;  // the last forward took input_source's casts
  Float8LinearObserver* observer = nullptr;  // Float8Linear::set_observer()

  // ---- construction ----
  void plan_tensor(TensorKind t, const CastConfig& as_stored, bool as_stored_fp8_gemm, const char* as_stored_gemm,
                   const CastConfig& transposed, bool transposed_fp8_gemm, const char* transposed_gemm);
  int add_plan(TensorKind t, const CastConfig& c, Orientation o, const char* gemm);
  void plan_delayed_scaling();

  // ---- casts ----
  // known_row_amax: the amax of each row of data, when the caller has them (any tensor
  // kind). reads_row_amax: whether some cast of t would take them.
  absl::Status cast_tensor(TensorKind t, const MatrixRef& data, int slot_row, const float* known_row_amax = nullptr);
  bool reads_row_amax(TensorKind t) const;
  // Whether p's cast can take the rows' amaxes: dynamic, tensorwise or rowwise.
  bool reads_row_amax(const CastPlan& p) const;
  // The input's casts for a forward: taken from input_source when it holds this input,
  // else cast here.
  absl::Status cast_input(const MatrixRef& data, int slot_row, const float* known_row_amax);
  bool can_share_input_with(const State& source) const;
  // The weight plans adopt a weight cast elsewhere (takes_fp8_weight()): for a forward,
  // where a delayed one records its amax, or (for_backward) again in its new memory.
  absl::Status adopt_fp8_weight(const Fp8Weight& w, int slot_row, bool for_backward);
  // InvalidArgument unless w is this layer's weight as the plan of `orientation` casts it,
  // with scales and, when needs_codes, the codes that plan's GEMM reads.
  absl::Status check_fp8_weight(int orientation, const Fp8Tensor& w, bool needs_codes) const;
  int weight_plan() const { return use[static_cast<int>(TensorKind::kWeight)][kAsStored]; }
  bool takes_fp8_weight() const;
  // How the weight plan of `orientation` casts (takes_fp8_weight() must hold).
  Fp8WeightCast weight_cast(int orientation) const;
  absl::Status run_cast(CastPlan& p, const MatrixRef& input, int slot_row, const float* known_row_amax);
  // A cast_transposed plan's cast: input's transpose into transposed_input, then a
  // quantize of it whose codes are the plan's transposed copy.
  absl::Status run_block_cast_transposed(CastPlan& p, const MatrixRef& input);
  absl::Status transpose_high_precision(const MatrixRef& input);
  // Whether t's two plans are a rowwise cast as stored and a columnwise one transposed that
  // one quantize makes together (QuantizeArgs::columnwise; the rowwise recipe's casts):
  // both dynamic, of one format and scale rounding, each making its fp8 copy alone.
  bool casts_both_ways(TensorKind t) const;
  absl::Status run_casts_both_ways(CastPlan& rows, CastPlan& cols, const MatrixRef& input,
                                   const float* known_row_amax);
  // Readies p for a cast of `input` (its buffers reserved, codes adopted from elsewhere
  // dropped); returns where the cast writes its range counts (range_counts_for).
  absl::StatusOr<CastRangeCounts*> prepare_cast(CastPlan& p, const MatrixRef& input);
  // Records what a cast of p just made as in use: its own copies, the scales at `scale`
  // (inverses at `inv_scale`) and, unless delayed, its own amax.
  void finish_cast(CastPlan& p, const MatrixRef& input, const float* scale, const float* inv_scale);
  // Where the cast about to run writes what it saturated and flushed (its range_counts):
  // p.range_counts when measuring, else nowhere (the plan is then unmeasured).
  absl::StatusOr<CastRangeCounts*> range_counts_for(CastPlan& p);
  // `count` ones of fp32 or bf16.
  absl::StatusOr<const void*> hp_ones(DType dtype, int64_t count);
  AmaxSlots& slots_of(TensorKind t) { return t == TensorKind::kGradOutput ? backward_slots : forward_slots; }

  // ---- GEMM operands ----
  ScaledOperand scaled(TensorKind t, Orientation o) const;
  bool gemm_runs_in_fp8(Gemm g) const;
  // Whether the high-precision GEMM of this use reads the tensor itself (rather than its
  // dequantized fp8 copy, or an fp8 copy in an fp8 GEMM).
  bool reads_raw(TensorKind t, Orientation o) const {
    return !gemm_runs_in_fp8(gemm_of(t, o)) && use[static_cast<int>(t)][o] < 0;
  }
  // `data` (n values of `from`) in the compute dtype: itself, or converted into `scratch`.
  absl::StatusOr<const void*> in_compute_dtype(const void* data, DType from, int64_t n, BackendBuffer& scratch);
  // The operand of a high-precision GEMM, in the compute dtype: `raw` (the tensor itself,
  // already in the compute dtype), or its dequantized fp8 copy when this use is cast.
  const void* high_precision(TensorKind t, Orientation o, const void* raw) const;

  // ---- delayed scaling ----
  int delayed_history_len() const;
  int64_t delayed_state_floats() const;
  // OutOfRange unless i names a delayed cast.
  absl::Status check_delayed_index(int i) const;
  float* delayed_scale_entry(int delayed_index) const {
    return delayed_scales.as<float>() +
           (static_cast<int64_t>(scale_half) * static_cast<int64_t>(delayed_plans.size()) + delayed_index) *
               kDelayedScaleStride;
  }
  // The states as the host sees them (one wait for the backend).
  absl::StatusOr<std::vector<DelayedScaling>> read_delayed() const;
  // Uploads `states` (one per delayed cast) and the scales they give into the half the next
  // casts read, queued; notes which have a scale.
  absl::Status upload_delayed(const std::vector<DelayedScaling>& states);
  // Records amaxes (backend memory, one per delayed cast) into the states, queued.
  absl::Status record_delayed(const float* amaxes);
  // Learns which histories have a scale; reads the states only while some cast has none.
  absl::Status confirm_delayed_scales();
};

}  // namespace fp8::engine
