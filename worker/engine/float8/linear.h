// Float8Linear: y = x·Wᵀ (+ bias) with each of its three GEMMs cast per a
// Float8LinearConfig (config.h) and run through fp8::Backend alone, so the same code
// serves the CPU backend (what tests use) and CUDA.
//
//   output      [M, N] = x [M, K] · W [N, K]ᵀ      A = x,      B = W     (as [N, K])
//   grad_input  [M, K] = g [M, N] · W [N, K]       A = g,      B = Wᵀ    (as [K, N])
//   grad_weight [N, K] = g [M, N]ᵀ · x [M, K]      A = gᵀ,     B = xᵀ    (as [K, M])
//
// fp8 GEMMs take both operands K-contiguous, so every tensor is needed once as stored and
// once transposed. When both uses cast the same way (tensorwise, same format and scaling:
// the tensorwise and delayed recipes), one fused cast+transpose pass makes both fp8
// copies and both GEMMs share its scale. Axiswise scales differ between the two
// orientations (per row of x vs per column of x), so those are two casts.
//
// Activation dtypes (LinearActivations): input and output are fp32 or bf16, fixed when the
// layer is created; grad_output has the output's dtype, grad_input the input's. The weight
// (the fp32 master), bias, grad_weight and grad_bias are always fp32. Casts read each
// activation in its own dtype; fp8 GEMMs write output and grad_input in their activation's
// dtype and accumulate grad_weight in fp32. GEMMs kept in high precision run in the
// compute dtype, the input's, as torch.autocast runs a bf16 nn.Linear: with bf16 the layer
// converts the weight to bf16 once per forward (into memory of its own, which the backward
// reuses) and converts a grad_output of the other dtype into scratch first.
//
// Memory contract (like autograd's saved tensors): forward() keeps pointers to input,
// weight and bias; they must stay valid until backward() returns and hold forward()'s
// values while it runs (activation checkpointing writes an input over in between, and
// writes it again before the backward). Backward reads them only where a GEMM consumes
// them in high precision; fp8 copies it needs were made by forward().
//
// Host synchronisation: forward(), backward() and finish_step() queue backend work only
// (they read no device value on the host), apart from one-off buffer growth when the token
// count first grows, and a read of the amax histories at the end of each step until every
// delayed cast has a scale (normally the first step only). numerics(), delayed().states()
// and save_scaling_state() each read the layer once (numerics() also the range counts of
// casts run while measuring: set_measuring()).
//
// Delayed scaling, per training step (one optimizer step, any number of micro-batches):
//   forward/backward × micro-batches   each cast records its amax into its own slot
//   delayed().write_step_amaxes(dst)   per delayed cast: max over the step's micro-batches,
//                                      into backend memory (the distributed engine packs
//                                      every layer's into one vector and all-reduces MAX once)
//   finish_step(reduced amaxes)        records them into the histories and derives the next
//                                      step's scales, all in backend memory (one small
//                                      kernel that the host does not wait for)
// finish_step() without arguments does the last two for a single process.
//
// Not thread-safe: one layer is driven by one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "fp8/fp8.h"
#include "worker/engine/float8/cast_copies.h"
#include "worker/engine/float8/config.h"
#include "worker/engine/float8/fp8_tensor.h"
#include "worker/engine/float8/scaling.h"

namespace fp8::engine {

// The three tensors a linear layer casts.
enum class TensorKind : uint8_t { kInput, kWeight, kGradOutput };
const char* tensor_kind_name(TensorKind t);

// What one fp8 cast did the last time it ran: the numbers the product exports as metrics.
//
// `range_use` is free: it is ≤ 1 when nothing was clipped, and when > 1 the largest value
// was clipped by that factor. Dynamic scaling keeps it ≤ 1 by construction; delayed
// scaling exceeds 1 when a tensor grows faster than its history.
//
// How many values were clipped or flushed to zero is counted by the cast itself
// (CastArgs::range_counts: on the GPU in the same pass, on the CPU in one more), only for
// casts that ran while the layer was measuring (Float8Linear::set_measuring), since
// reading the counts back costs a copy per cast; `measured` says whether this one did. Both
// counts follow fp8::CastRangeArgs: Inf saturates, NaN counts as neither, a value within
// half an fp8 ulp of max rounds to max and is not saturated (so dynamic scaling, whose
// amax·scale is max up to fp32 rounding, counts 0 by construction).
struct CastNumerics {
  TensorKind tensor = TensorKind::kInput;
  std::string gemms;  // which GEMMs use this cast: "output", "output+grad_weight", ...
  CastConfig config;
  float amax = 0.0f;       // largest |value| of the tensor at the cast
  float scale = 0.0f;      // the scale (axiswise: the smallest of the row scales)
  float range_use = 0.0f;  // max over scales of amax·scale / fp8_max

  bool measured = false;         // the cast ran while measuring; the fields below are 0 otherwise
  int64_t elements = 0;          // values the cast covered (rows·cols)
  int64_t saturated = 0;         // of which clipped to ±fp8 max (or ±Inf)
  int64_t underflow = 0;         // of which nonzero values that became zero
  float saturated_ratio = 0.0f;  // saturated / elements
  float underflow_ratio = 0.0f;  // underflow / elements
};

// The dtypes of a layer's activations: each DType::kFloat32 or DType::kBFloat16.
// grad_output has the output's dtype and grad_input the input's. Mixed-precision training
// keeps activations in bf16; a model's output projection takes bf16 input and writes fp32
// logits for the loss.
struct LinearActivations {
  DType input = DType::kFloat32;
  DType output = DType::kFloat32;
};

// What forward() is handed besides input, weight and bias. All may be null.
struct ForwardOptions {
  // [tokens] fp32 in backend memory, max |input[r, :]| of each row as stored, when whoever
  // wrote the input has them (ModelOps::rmsnorm_forward writes them). Dynamically scaled
  // input casts at tensorwise or rowwise granularity then take their amax from these
  // instead of reading the input once more (QuantizeArgs::row_amax); everything computed
  // is bit for bit the same. They must be exact (a smaller value clips the cast). See
  // Float8Linear::info().needs.
  const float* input_row_amax = nullptr;
  // The same for an fp32 weight, [out] fp32, max |weight[o, :]| (AdamW writes them as it
  // updates the weight: ModelOps::adamw_step's param_row_amax). See
  // Float8Linear::info().needs. Not with an Fp8Weight (it is cast already).
  const float* weight_row_amax = nullptr;
  // [tokens, out] in the output's dtype, added to the output in the GEMM's epilogue (the
  // addend of ScaledGemmArgs / GemmArgs): output = input · weightᵀ (+ bias) + residual,
  // rounded once. A residual connection this way costs no pass of its own. May be output
  // itself; must not otherwise overlap it. backward() is unchanged: the residual's gradient
  // is grad_output, which the caller routes.
  const void* residual = nullptr;
};

// How backward() stores its gradients, and what it is handed besides grad_output.
struct BackwardOptions {
  // grad_input: written, or added to what the buffer holds (the GEMM's beta = 1, rounded
  // once), so that layers reading one input sum their input gradients in place.
  Store grad_input = Store::kOverwrite;
  // grad_weight and grad_bias: added to, so that gradients add up over micro-batches, or
  // written by the step's first producer of them, which then needs no zeroed buffer (and
  // its GEMM no read of one).
  Store grad_weight = Store::kAccumulate;
  // May be null: max |grad_output[r, :]| per row, like forward()'s input_row_amax, from
  // the op that made grad_output (see Float8Linear::info().needs).
  const float* grad_output_row_amax = nullptr;
};

// The weight forward() multiplies by: the fp32 master, which the layer casts itself, or
// an Fp8Weight cast elsewhere (FSDP's fp8 all-gather: weight_scales.h), which it takes as
// given (Float8LinearNeeds::fp8_weight must hold). Either converts implicitly (an Fp8Tensor
// as the one tensorwise cast serving both GEMMs), so a call passes what it has.
class LinearWeight {
 public:
  LinearWeight(const float* values) : f32_(values) {}
  LinearWeight(const Fp8Weight& cast) : fp8_(cast), has_fp8_(true) {}
  LinearWeight(const Fp8Tensor& both) : fp8_(both), has_fp8_(true) {}
  const float* f32() const { return f32_; }
  const Fp8Weight* fp8() const { return has_fp8_ ? &fp8_ : nullptr; }

 private:
  const float* f32_ = nullptr;
  Fp8Weight fp8_;  // pointers into memory the caller keeps
  bool has_fp8_ = false;
};

// What a layer's casts can take from its callers, fixed by its config at create().
struct Float8LinearNeeds {
  // Per TensorKind: some cast of the tensor is dynamically scaled at tensorwise or rowwise
  // granularity, so its row amaxes (ForwardOptions' input_row_amax and weight_row_amax,
  // BackwardOptions' grad_output_row_amax) spare the cast a read. Columnwise casts (the
  // rowwise recipe's copies for the GEMMs that contract over rows) need column amaxes, and
  // delayed casts measure theirs while casting, so neither counts.
  bool row_amax[3] = {false, false, false};
  // Per TensorKind: some cast of the tensor scales per tensor or per row, dynamically or
  // delayed (a delayed cast scales dynamically until its history holds an amax), so its
  // rows' amaxes give its scales. Where a tensor is split across ranks along its rows
  // (tensor parallelism), such casts need those amaxes reduced across the ranks.
  bool scaled_over_rows[3] = {false, false, false};
  // Some cast of any tensor scales per row or per column.
  bool axiswise = false;
  // forward() can take an Fp8Weight: both GEMMs that read the weight run in fp8, so no
  // GEMM reads it in high precision (every recipe but none; a long form that keeps either
  // GEMM in high precision or mixed does not).
  bool fp8_weight = false;
  // How such a weight must be cast for each GEMM (meaningful when fp8_weight).
  Fp8WeightCast weight_output;
  Fp8WeightCast weight_grad_input;
  // One cast serves both GEMMs (tensorwise, or 128x128 blocks, alike for both): the
  // grad_input GEMM's codes are the output GEMM's transposed, its block scales the grid
  // transposed. Otherwise each GEMM's codes are a cast of their own.
  bool weight_codes_shared = false;
  // backward() reads the input as the caller stored it (its grad_weight GEMM runs in high
  // precision on no cast copy of it), so the caller must keep it until then; otherwise the
  // layer's own fp8 copies serve the backward and the input is dead after forward().
  bool input_in_backward = false;

  bool row_amax_of(TensorKind t) const { return row_amax[static_cast<int>(t)]; }
  bool scaled_over_rows_of(TensorKind t) const { return scaled_over_rows[static_cast<int>(t)]; }
};

// What a layer is, fixed at create(): the arguments it was built with and what its casts
// can take from callers (Float8Linear::info()).
struct Float8LinearInfo {
  int64_t in_features = 0;   // K: the weight is [out_features, in_features]
  int64_t out_features = 0;  // N
  Float8LinearConfig config;
  LinearActivations activations;
  Float8LinearNeeds needs;
};

// Told how a layer's casts ran, for tests and benches to count (Float8Linear::
// set_observer); nothing the layer computes depends on it. Each call is one cast.
class Float8LinearObserver {
 public:
  virtual ~Float8LinearObserver() = default;
  // A forward took a sibling's input casts rather than casting (share_input_casts_from).
  virtual void on_shared_input_cast() {}
  // A cast took its amax from the caller's row amaxes (ForwardOptions' input_row_amax and
  // weight_row_amax, BackwardOptions' grad_output_row_amax).
  virtual void on_row_amax_cast() {}
  // A tensor's rowwise and columnwise casts (the rowwise recipe's, for the GEMMs that
  // contract over columns and over rows) ran as one quantize, which reads the tensor twice
  // instead of four times on a GPU.
  virtual void on_cast_both_ways() {}
};

class Float8Linear {
 private:
  struct State;

 public:
  // A layer with weight [out_features, in_features] and activations of the given dtypes.
  // Fails with InvalidArgument for a bad config (validate()), an activation dtype other
  // than fp32 or bf16, or, on a GPU backend, for dimensions an fp8 GEMM cannot take
  // (cuBLASLt needs the contracted and output dimensions to be multiples of 16). With
  // `shared_copies`, the casts write copies shared with the other layers created with it
  // (cast_copies.h: only for layers that never hold their casts at the same time).
  static absl::StatusOr<std::unique_ptr<Float8Linear>> create(Backend& backend, int64_t in_features,
                                                              int64_t out_features, const Float8LinearConfig& config,
                                                              const LinearActivations& activations = {},
                                                              SharedCastCopies* shared_copies = nullptr);
  ~Float8Linear();
  Float8Linear(const Float8Linear&) = delete;
  Float8Linear& operator=(const Float8Linear&) = delete;

  // Dimensions, config and activation dtypes as create() got them, and what the casts can
  // take from callers (row amaxes, an Fp8Weight): one value, fixed for the layer's
  // life, so callers that size buffers or plan gathers read it once.
  const Float8LinearInfo& info() const;

  // output [tokens, out] = input [tokens, in] · weightᵀ (+ bias [out], may be null), in
  // backend memory: input and output in their activation dtypes, bias fp32. On a GPU with
  // an fp8 grad_weight GEMM, tokens must be a multiple of 16 (that GEMM contracts over
  // them). ForwardOptions: row amaxes the casts may take, a residual to add.
  //
  // The weight is fp32 values, or an Fp8Weight cast elsewhere (info().needs.fp8_weight
  // must hold), each GEMM's tensor cast as info().needs.weight_output and
  // weight_grad_input say: forward() reads the output tensor's codes; backward() reads the
  // grad_input tensor's codes_t, which may come with rebind_weight() instead. The layer
  // takes the scales as given and reads scales, inverses and amaxes where they are until its
  // next forward() (numerics() included); under delayed scaling it records the amax into
  // its history.
  // Cast with the scales a caller derives as weight_scales.h does, the outputs match the
  // fp32 weight's bit for bit.
  absl::Status forward(const void* input, int64_t tokens, LinearWeight weight, const float* bias, void* output,
                       const ForwardOptions& options = {});

  // The same output for evaluation: nothing is kept for a backward() (the last forward()
  // can no longer be differentiated either) and delayed scaling records none of its amaxes.
  absl::Status forward_no_grad(const void* input, int64_t tokens, LinearWeight weight, const float* bias,
                               void* output, const ForwardOptions& options = {});

  // Between forward() and backward(): the weight moved (FSDP frees it after the forward and
  // gathers it again for the backward). Same values in new memory, in the form forward() got.
  absl::Status rebind_weight(LinearWeight weight);

  // For the last forward(): by default WRITES grad_input [tokens, in] (skipped when null)
  // and ACCUMULATES (+=) grad_weight [out, in] and grad_bias [out] (skipped when null), so
  // that gradients add up over micro-batches; BackwardOptions changes either. grad_output
  // has the output's dtype, grad_input the input's; grad_weight and grad_bias are fp32.
  absl::Status backward(const void* grad_output, void* grad_input, float* grad_weight, float* grad_bias,
                        const BackwardOptions& options = {});

  // ---- sibling layers that read one input --------------------------------------------------
  // A model's q, k and v projections read the same normed activation, as do the gate and
  // up projections: casting it once serves all of them. After share_input_casts_from(src),
  // a forward() (or forward_no_grad()) whose input is the very tensor src's last forward
  // cast (same pointer and tokens; src's forward runs first) takes src's fp8 copies of it,
  // their scales and, for mixed GEMMs, their dequantized copy, instead of casting it again.
  // This needs dynamic scaling of the input (a delayed scale is each layer's own) and the
  // same input casts; with them the copies are a function of the input alone, so outputs
  // and gradients are bit for bit what this layer's own casts give. Any other input is
  // cast as usual. The copies must outlive this layer's backward(): should src cast again
  // in between (a forward_no_grad), backward() refuses.
  // numerics() reports the shared cast's values for this layer's input. Returns false,
  // changing nothing, when the two cannot share (src is this layer, casts its input
  // differently or shares another's).
  bool share_input_casts_from(const Float8Linear& source);

  // Tells `observer` (may be null: none) how the casts run from now on; it must outlive
  // the layer or be replaced first. Set after create() so that tests can watch the layers
  // a model made.
  void set_observer(Float8LinearObserver* observer);

  // ---- finishing a step --------------------------------------------------------------------
  // Ends the optimizer step: records its amaxes into the delayed histories and resets the
  // per-step slots. Call once per step with any recipe (cheap without delayed casts).
  // Without arguments it takes this process's own amaxes (delayed().write_step_amaxes()).
  absl::Status finish_step();
  // The same with amaxes already reduced across ranks (backend memory, delayed().count()
  // floats, from write_step_amaxes()), queued; null is InvalidArgument unless the layer has
  // no delayed casts, so a lost reduction is not silently replaced by local amaxes.
  // `reduced_amaxes` may be reused once this returns: work queued later cannot overtake it.
  absl::Status finish_step(const float* reduced_amaxes);

  // Every delayed cast's state, concatenated, for checkpoints; restore needs a layer built
  // with the same config.
  absl::StatusOr<std::vector<float>> save_scaling_state() const;
  absl::Status restore_scaling_state(absl::Span<const float> state);

  // ---- delayed scaling ------------------------------------------------------------------
  // The layer's casts under delayed scaling (scaling.h: each a history in backend memory),
  // in a fixed order; named "input", "weight", "grad_output" (with the format appended
  // when one tensor is cast to two formats).
  class DelayedCasts {
   public:
    int count() const;
    std::vector<std::string> names() const;
    // This step's amax of each (max over micro-batches) into dst, count() floats of
    // backend memory, for a caller that reduces them across ranks and hands them to
    // finish_step(reduced_amaxes). Needs a forward() (and a backward(), when grad_output is delayed)
    // since the last finish_step().
    absl::Status write_step_amaxes(float* dst);
    // Every state (history and scale), read from backend memory in one copy: for reports,
    // not every step.
    absl::StatusOr<std::vector<DelayedScaling>> states() const;
    // The i-th of them alone (the same read).
    absl::StatusOr<DelayedScaling> state(int i) const;
    // Replaces the i-th history (DelayedScaling::replay).
    absl::Status replay(int i, absl::Span<const float> amaxes);
    // The scale (and inverse) the weight's history gives its next cast, in backend memory,
    // valid until the next finish_step(); nullopt unless the weight is delayed and its
    // history holds a usable amax (until then its cast scales dynamically). What FSDP casts
    // the weight's shards with (weight_scales.h).
    struct ScaleRef {
      const float* scale = nullptr;
      const float* inv_scale = nullptr;
    };
    std::optional<ScaleRef> weight_scale() const;

   private:
    friend class Float8Linear;
    explicit DelayedCasts(State* s) : s_(s) {}
    State* s_;
  };
  DelayedCasts& delayed() { return delayed_; }
  const DelayedCasts& delayed() const { return delayed_; }

  // ---- numerics ------------------------------------------------------------------------
  // One entry per fp8 cast that has run. Synchronises the backend once (what every cast
  // did is gathered in backend memory and read in one copy): call it when metrics are
  // reported, not every step.
  absl::StatusOr<std::vector<CastNumerics>> numerics();

  // While on, every cast the layer runs (forward, forward_no_grad, backward) also counts
  // the values it saturated or flushed to zero, with the very input, granularity and
  // scales it used, and numerics() reports them. It costs one more read of each cast
  // tensor and queues a little work, no host synchronisation; off (the default) it costs
  // nothing. Outputs, gradients and scaling state are bit-identical either way: the count
  // only reads. A cast run while off reports measured = false.
  //
  // Not measured: a weight taken as an Fp8Weight (FSDP's fp8 all-gather casts it outside
  // the layer, which sees only its codes, and a clipped code cannot be told from a value
  // that was max to begin with): its entry reports measured = false.
  void set_measuring(bool on);

 private:
  explicit Float8Linear(std::unique_ptr<State> state);
  absl::Status rebind_fp8_weight(const Fp8Weight& weight);
  absl::Status run_forward(const void* input, int64_t tokens, LinearWeight weight, const float* bias, void* output,
                           bool for_backward, const ForwardOptions& options);
  std::unique_ptr<State> s_;
  DelayedCasts delayed_;
};

}  // namespace fp8::engine
