#include "worker/engine/float8_linear.h"

#include <algorithm>
#include <array>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"

namespace fp8::engine {
namespace {

// cuBLASLt's fp8 GEMMs need the contracted and output dimensions to be multiples of this.
constexpr int64_t kGpuFp8GemmMultiple = 16;
// cuBLASLt rejects scale pointers that are not 16-byte aligned (CUBLAS_STATUS_NOT_SUPPORTED),
// so each delayed cast's scale and inverse scale sit 16 bytes apart in their shared buffer.
constexpr int64_t kFloatsPer16Bytes = 4;
constexpr int64_t kDelayedScaleStride = 2 * kFloatsPer16Bytes;  // scale, then 1/scale

// Each tensor feeds two GEMMs: one takes it as stored, the other transposed (see the
// table in float8_linear.h).
enum Orientation : int { kAsStored = 0, kTransposed = 1 };

// Backend memory owned by one layer. It grows on demand and never shrinks, so steps after
// the first allocate nothing.
class BackendBuffer {
 public:
  explicit BackendBuffer(Backend& backend) : backend_(&backend) {}
  ~BackendBuffer() { release(); }
  BackendBuffer(BackendBuffer&& o) noexcept
      : backend_(o.backend_), data_(std::exchange(o.data_, nullptr)), capacity_(std::exchange(o.capacity_, 0)) {}
  BackendBuffer& operator=(BackendBuffer&&) = delete;
  BackendBuffer(const BackendBuffer&) = delete;
  BackendBuffer& operator=(const BackendBuffer&) = delete;

  // At least `bytes`; the contents are lost when it grows.
  absl::Status reserve(size_t bytes) { return grow(bytes, 0); }

  // At least `bytes`, keeping the first `keep_floats` fp32 values when it grows.
  absl::Status grow(size_t bytes, int64_t keep_floats) {
    if (bytes <= capacity_) return absl::OkStatus();
    absl::StatusOr<void*> fresh = backend_->allocate(bytes);
    if (!fresh.ok()) return fresh.status();
    if (keep_floats > 0) {
      // A same-type convert is the backend's device-to-device copy.
      if (auto s = backend_->convert(data_, DType::kFloat32, *fresh, DType::kFloat32, keep_floats); !s.ok()) {
        backend_->deallocate(*fresh);
        return s;
      }
    }
    release();
    data_ = *fresh;
    capacity_ = bytes;
    return absl::OkStatus();
  }

  size_t capacity() const { return capacity_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  void release() {
    if (data_ != nullptr) backend_->deallocate(data_);
    data_ = nullptr;
    capacity_ = 0;
  }

  Backend* backend_;
  void* data_ = nullptr;
  size_t capacity_ = 0;
};

size_t float_bytes(int64_t n) { return static_cast<size_t>(n) * sizeof(float); }
size_t dtype_bytes(DType t, int64_t n) { return static_cast<size_t>(n) * dtype_size(t); }

// The GEMM that uses a tensor in an orientation (the table in float8_linear.h).
enum class Gemm : uint8_t { kOutput, kGradInput, kGradWeight };
Gemm gemm_of(TensorKind t, Orientation o) {
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

bool is_activation_dtype(DType t) { return t == DType::kFloat32 || t == DType::kBFloat16; }

// One fp8 cast of one tensor, serving one or both of the tensor's GEMM uses.
struct CastPlan {
  explicit CastPlan(Backend& b)
      : out(b), out_t(b), dequantized(b), scale(b), inv_scale(b), amax(b), range_counts(b) {}

  TensorKind tensor = TensorKind::kInput;
  CastConfig config;
  // Scale granularity on the tensor as stored: an axiswise use as stored scales per row,
  // an axiswise transposed use per column (= per row of the transposed copy).
  Granularity granularity = Granularity::kTensorwise;
  std::string gemms;              // the GEMMs it serves, for metrics
  bool make_out = false;          // fp8 copy as stored
  bool make_out_t = false;        // fp8 copy transposed
  bool make_dequantized = false;  // copy of the fp8 values in the compute dtype, for a mixed GEMM

  std::optional<DelayedScaling> delayed;
  int delayed_index = -1;            // position among the layer's delayed casts
  int delayed_column = -1;           // column in its direction's amax slots
  bool delayed_scale_ready = false;  // finish_step() uploaded a scale for the next cast

  BackendBuffer out, out_t, dequantized, scale, inv_scale, amax;
  // Codes cast outside the layer (Fp8Weight) in place of out / out_t, when `external`
  // (until the layer casts this tensor itself again). A null one was not provided: the GEMM
  // that needs it refuses to run rather than read the layer's own, stale codes.
  bool external = false;
  const uint8_t* external_out = nullptr;
  const uint8_t* external_out_t = nullptr;
  // The same cast made by a sibling layer from the same input (share_input_casts_from):
  // its copies, scales, amax and range counts serve this layer until it casts again.
  const CastPlan* shared = nullptr;
  // Copies and statistics in use: the plan's own, or the sibling's.
  const CastPlan& holder() const { return shared != nullptr ? *shared : *this; }

  // What the last cast used, for the GEMMs that follow it and for numerics().
  const float* inv_scale_in_use = nullptr;
  const float* scale_in_use = nullptr;     // dynamic casts: the scale the backend computed
  std::optional<float> host_scale_in_use;  // delayed casts: the scale, known on the host
  int64_t rows = 0, cols = 0;              // 0 until the first cast
  int last_amax_row = -1;                  // delayed casts: the slot row it wrote

  // The last cast's saturation / underflow counts (a CastRangeCounts in backend memory),
  // valid when it ran while the layer was measuring.
  BackendBuffer range_counts;
  bool range_counted = false;
};

// Amaxes of one direction's delayed casts (forward: input and weight; backward:
// grad_output), one row per micro-batch of the current step, one column per cast.
// Reduced to one value per cast by write_step_amaxes().
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

}  // namespace

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

struct Float8Linear::State {
  State(Backend& b, int64_t in, int64_t out, const Float8LinearConfig& c, const LinearActivations& a)
      : backend(b),
        in_features(in),
        out_features(out),
        config(c),
        activations(a),
        forward_slots(b),
        backward_slots(b),
        delayed_scales(b),
        step_amaxes(b),
        f32_ones(b),
        bf16_ones(b),
        weight_compute(b),
        grad_output_compute(b) {}

  Backend& backend;
  const int64_t in_features;   // K
  const int64_t out_features;  // N
  const Float8LinearConfig config;
  const LinearActivations activations;
  bool measuring = false;  // set_measuring()

  // High-precision GEMMs run in the input's dtype, as autocast runs a bf16 linear: both
  // GEMM operands must share a dtype, and a bf16 input is where bf16 compute pays off.
  DType compute_dtype() const { return activations.input; }

  std::vector<CastPlan> plans;
  // use[tensor][orientation]: the plan that casts it for that GEMM, -1 for high precision.
  std::array<std::array<int, 2>, 3> use{{{-1, -1}, {-1, -1}, {-1, -1}}};
  std::vector<int> delayed_plans;  // indices into plans, in delayed_index order
  AmaxSlots forward_slots, backward_slots;
  // Per delayed cast, kDelayedScaleStride floats: its scale, then 1/scale 16 bytes on.
  BackendBuffer delayed_scales;
  BackendBuffer step_amaxes;  // scratch of finish_step()
  // Constant vectors of fp32 or bf16 ones (grad_output's dtype), grown to the largest size
  // asked for: they sum grad_output's rows for grad_bias with one GEMM.
  BackendBuffer f32_ones, bf16_ones;
  int64_t f32_ones_count = 0, bf16_ones_count = 0;

  // Operands of high-precision GEMMs converted to a bf16 compute dtype (unused in fp32):
  // the weight, converted by the forward and reused by its backward (the weight cannot
  // change in between: forward()'s contract), and grad_output when it is fp32.
  BackendBuffer weight_compute, grad_output_compute;

  // Saved by forward() for backward().
  const void* input = nullptr;  // activations.input
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
  int64_t shared_input_casts = 0;
  int64_t row_amax_casts = 0;  // casts that took their amax from the caller's row amaxes

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
  // The input's casts for a forward: taken from input_source when it holds this input,
  // else cast here.
  absl::Status cast_input(const MatrixRef& data, int slot_row, const float* known_row_amax);
  bool can_share_input_with(const State& source) const;
  // The weight plan adopts codes cast elsewhere (takes_fp8_weight()); records their amax.
  absl::Status adopt_fp8_weight(const Fp8Weight& w, int slot_row);
  int weight_plan() const { return use[static_cast<int>(TensorKind::kWeight)][kAsStored]; }
  bool takes_fp8_weight() const;
  absl::Status run_cast(CastPlan& p, const MatrixRef& input, int slot_row, const float* known_row_amax);
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

  absl::Status upload_delayed_scales();
};

// ---- construction -------------------------------------------------------------------------

int Float8Linear::State::add_plan(TensorKind t, const CastConfig& c, Orientation o, const char* gemm) {
  CastPlan& p = plans.emplace_back(backend);
  p.tensor = t;
  p.config = c;
  if (c.granularity == ScaleGranularity::kTensorwise) {
    p.granularity = Granularity::kTensorwise;
  } else {
    p.granularity = o == kAsStored ? Granularity::kRowwise : Granularity::kColumnwise;
  }
  p.gemms = gemm;
  return static_cast<int>(plans.size()) - 1;
}

void Float8Linear::State::plan_tensor(TensorKind t, const CastConfig& as_stored, bool as_stored_fp8_gemm,
                                      const char* as_stored_gemm, const CastConfig& transposed,
                                      bool transposed_fp8_gemm, const char* transposed_gemm) {
  auto& u = use[static_cast<int>(t)];
  if (as_stored.is_fp8()) u[kAsStored] = add_plan(t, as_stored, kAsStored, as_stored_gemm);
  if (transposed.is_fp8()) {
    // A tensorwise scale is the same for both orientations, so one fused cast+transpose
    // pass serves both GEMMs when they cast alike.
    const bool shared =
        u[kAsStored] >= 0 && transposed == as_stored && as_stored.granularity == ScaleGranularity::kTensorwise;
    if (shared) {
      u[kTransposed] = u[kAsStored];
      plans[static_cast<size_t>(u[kTransposed])].gemms += std::string("+") + transposed_gemm;
    } else {
      u[kTransposed] = add_plan(t, transposed, kTransposed, transposed_gemm);
    }
  }
  // An fp8 GEMM takes the fp8 copy in its orientation; a mixed GEMM takes the dequantized
  // copy as stored (the high-precision GEMM transposes by itself).
  if (u[kAsStored] >= 0) {
    CastPlan& p = plans[static_cast<size_t>(u[kAsStored])];
    p.make_out = true;
    p.make_dequantized = p.make_dequantized || !as_stored_fp8_gemm;
  }
  if (u[kTransposed] >= 0) {
    CastPlan& p = plans[static_cast<size_t>(u[kTransposed])];
    if (transposed_fp8_gemm) {
      p.make_out_t = true;
    } else {
      p.make_out = true;
      p.make_dequantized = true;
    }
  }
}

void Float8Linear::State::plan_delayed_scaling() {
  for (size_t i = 0; i < plans.size(); ++i) {
    CastPlan& p = plans[i];
    if (p.config.scaling != ScalingMode::kDelayed) continue;
    p.delayed.emplace(config.amax_history_len, p.config.format(), p.config.pow2_scale);
    p.delayed_index = static_cast<int>(delayed_plans.size());
    p.delayed_column = slots_of(p.tensor).columns++;
    delayed_plans.push_back(static_cast<int>(i));
  }
}

// ---- casts ----------------------------------------------------------------------------------

namespace {

// Grows `buffer` to hold at least `count` copies of `one` (T's bit pattern of 1.0).
template <class T>
absl::Status fill_ones(Backend& backend, BackendBuffer& buffer, int64_t& filled, int64_t count, T one) {
  if (count <= filled) return absl::OkStatus();
  if (auto s = buffer.reserve(static_cast<size_t>(count) * sizeof(T)); !s.ok()) return s;
  const std::vector<T> host(static_cast<size_t>(count), one);
  if (auto s = backend.copy_from_host(buffer.as<void>(), host.data(), host.size() * sizeof(T)); !s.ok()) return s;
  filled = count;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<const void*> Float8Linear::State::hp_ones(DType dtype, int64_t count) {
  if (dtype == DType::kBFloat16) {
    if (auto s = fill_ones(backend, bf16_ones, bf16_ones_count, count, float_to_bf16(1.0f)); !s.ok()) return s;
    return bf16_ones.as<const void>();
  }
  if (auto s = fill_ones(backend, f32_ones, f32_ones_count, count, 1.0f); !s.ok()) return s;
  return f32_ones.as<const void>();
}

absl::Status Float8Linear::State::run_cast(CastPlan& p, const MatrixRef& input, int slot_row,
                                           const float* known_row_amax) {
  const int64_t rows = input.rows, cols = input.cols, n = input.size();
  const int64_t scales = scale_count(p.granularity, rows, cols);
  absl::Status reserved;  // keeps the first error
  if (p.make_out) reserved.Update(p.out.reserve(static_cast<size_t>(n)));
  if (p.make_out_t) reserved.Update(p.out_t.reserve(static_cast<size_t>(n)));
  if (p.make_dequantized) reserved.Update(p.dequantized.reserve(dtype_bytes(compute_dtype(), n)));
  reserved.Update(p.scale.reserve(float_bytes(scales)));
  reserved.Update(p.inv_scale.reserve(float_bytes(scales)));
  reserved.Update(p.amax.reserve(float_bytes(scales)));
  if (!reserved.ok()) return reserved;
  absl::StatusOr<CastRangeCounts*> range_counts = range_counts_for(p);
  if (!range_counts.ok()) return range_counts.status();
  p.external = false;
  p.external_out = nullptr;
  p.external_out_t = nullptr;
  p.shared = nullptr;
  uint8_t* out = p.make_out ? p.out.as<uint8_t>() : nullptr;
  uint8_t* out_t = p.make_out_t ? p.out_t.as<uint8_t>() : nullptr;
  float* delayed_amax = p.delayed ? slots_of(p.tensor).at(slot_row, p.delayed_column) : nullptr;

  if (p.delayed && p.delayed_scale_ready) {
    // The scale was derived from the history before this cast; the cast measures this
    // step's amax in the same pass, for finish_step() to record.
    const float* scale = delayed_scales.as<float>() + p.delayed_index * kDelayedScaleStride;
    CastArgs c;
    c.input = input;
    c.format = p.config.format();
    c.granularity = Granularity::kTensorwise;
    c.scale = scale;
    c.out = out;
    c.out_t = out_t;
    c.amax_out = delayed_amax;
    c.range_counts = *range_counts;
    if (auto s = backend.cast(c); !s.ok()) return s;
    p.scale_in_use = scale;
    p.inv_scale_in_use = scale + kFloatsPer16Bytes;
    p.host_scale_in_use = p.delayed->next_scale();
  } else {
    // Dynamic scaling. A delayed cast comes here while its history holds no usable amax
    // (its first step): TransformerEngine would cast with scale 1 then, which can clip or
    // flush a whole tensor; measuring costs one amax pass, once.
    QuantizeArgs q;
    q.input = input;
    q.format = p.config.format();
    q.granularity = p.granularity;
    q.pow2_scale = p.config.pow2_scale;
    q.out = out;
    q.out_t = out_t;
    q.scale_out = p.scale.as<float>();
    q.inv_scale_out = p.inv_scale.as<float>();  // the GEMM's factors, in the same kernel as the scales
    q.amax_out = delayed_amax != nullptr ? delayed_amax : p.amax.as<float>();
    // The rows' amaxes give the tensor's and each row's, not a column's.
    if (known_row_amax != nullptr && p.granularity != Granularity::kColumnwise) q.row_amax = known_row_amax;
    q.range_counts = *range_counts;
    if (auto s = backend.quantize(q); !s.ok()) return s;
    if (q.row_amax != nullptr) ++row_amax_casts;
    p.scale_in_use = p.scale.as<float>();
    p.inv_scale_in_use = p.inv_scale.as<float>();
    p.host_scale_in_use.reset();
  }

  if (p.make_dequantized) {
    DequantizeArgs d;
    d.input = out;
    d.format = p.config.format();
    d.rows = rows;
    d.cols = cols;
    d.granularity = p.granularity;
    d.scale = p.scale_in_use;
    d.out_dtype = compute_dtype();
    d.out = p.dequantized.as<void>();
    if (auto s = backend.dequantize(d); !s.ok()) return s;
  }
  p.rows = rows;
  p.cols = cols;
  p.last_amax_row = p.delayed ? slot_row : -1;
  return absl::OkStatus();
}

absl::StatusOr<CastRangeCounts*> Float8Linear::State::range_counts_for(CastPlan& p) {
  p.range_counted = measuring;
  if (!measuring) return nullptr;
  if (auto s = p.range_counts.reserve(sizeof(CastRangeCounts)); !s.ok()) return s;
  return p.range_counts.as<CastRangeCounts>();
}

absl::Status Float8Linear::State::cast_tensor(TensorKind t, const MatrixRef& data, int slot_row,
                                              const float* known_row_amax) {
  const auto& u = use[static_cast<int>(t)];
  for (int o : {kAsStored, kTransposed}) {
    if (u[o] < 0 || (o == kTransposed && u[kTransposed] == u[kAsStored])) continue;
    if (auto s = run_cast(plans[static_cast<size_t>(u[o])], data, slot_row, known_row_amax); !s.ok()) return s;
  }
  return absl::OkStatus();
}

bool Float8Linear::State::can_share_input_with(const State& source) const {
  if (&source == this || &source.backend != &backend || source.input_source != nullptr ||
      source.in_features != in_features || source.activations.input != activations.input) {
    return false;
  }
  const auto& mine = use[static_cast<int>(TensorKind::kInput)];
  const auto& theirs = source.use[static_cast<int>(TensorKind::kInput)];
  if (mine[kAsStored] < 0 && mine[kTransposed] < 0) return false;  // nothing to share
  for (int o : {kAsStored, kTransposed}) {
    if ((mine[o] < 0) != (theirs[o] < 0)) return false;
    if (mine[o] < 0) continue;
    // One plan for both orientations on either side, or two on both.
    if ((mine[kTransposed] == mine[kAsStored]) != (theirs[kTransposed] == theirs[kAsStored])) return false;
    const CastPlan& a = plans[static_cast<size_t>(mine[o])];
    const CastPlan& b = source.plans[static_cast<size_t>(theirs[o])];
    // Dynamic scaling on both sides, the same cast, and the source makes every copy this
    // layer's GEMMs read.
    if (a.delayed || b.delayed || !(a.config == b.config) || a.granularity != b.granularity ||
        (a.make_out && !b.make_out) || (a.make_out_t && !b.make_out_t) ||
        (a.make_dequantized && !b.make_dequantized)) {
      return false;
    }
  }
  return true;
}

absl::Status Float8Linear::State::cast_input(const MatrixRef& data, int slot_row, const float* known_row_amax) {
  const State* src = input_source;
  if (src == nullptr || src->input_cast_of != data.data || src->input_cast_tokens != data.rows) {
    if (auto s = cast_tensor(TensorKind::kInput, data, slot_row, known_row_amax); !s.ok()) return s;
    input_adopted = false;
    input_cast_of = data.data;
    input_cast_tokens = data.rows;
    ++input_casts;
    return absl::OkStatus();
  }
  const auto& mine = use[static_cast<int>(TensorKind::kInput)];
  const auto& theirs = src->use[static_cast<int>(TensorKind::kInput)];
  for (int o : {kAsStored, kTransposed}) {
    if (mine[o] < 0) continue;
    CastPlan& p = plans[static_cast<size_t>(mine[o])];
    const CastPlan& from = src->plans[static_cast<size_t>(theirs[o])];
    p.external = false;
    p.external_out = nullptr;
    p.external_out_t = nullptr;
    p.shared = &from;
    p.scale_in_use = from.scale_in_use;
    p.inv_scale_in_use = from.inv_scale_in_use;
    p.host_scale_in_use = from.host_scale_in_use;
    p.range_counted = from.range_counted;
    p.rows = from.rows;
    p.cols = from.cols;
    p.last_amax_row = -1;
  }
  input_adopted = true;
  adopted_input_cast = src->input_casts;
  input_cast_of = data.data;
  input_cast_tokens = data.rows;
  ++shared_input_casts;
  return absl::OkStatus();
}

bool Float8Linear::State::takes_fp8_weight() const {
  const auto& u = use[static_cast<int>(TensorKind::kWeight)];
  if (u[kAsStored] < 0 || u[kTransposed] != u[kAsStored]) return false;
  const CastPlan& p = plans[static_cast<size_t>(u[kAsStored])];
  return p.granularity == Granularity::kTensorwise && !p.make_dequantized && config.output_runs_in_fp8() &&
         config.grad_input_runs_in_fp8();
}

absl::Status Float8Linear::State::adopt_fp8_weight(const Fp8Weight& w, int slot_row) {
  if (w.data == nullptr || w.scale == nullptr || w.inv_scale == nullptr || w.amax == nullptr) {
    return absl::InvalidArgumentError("Float8Linear: an Fp8Weight needs data, scale, inv_scale and amax");
  }
  CastPlan& p = plans[static_cast<size_t>(weight_plan())];
  // The amax goes where the layer's own cast would have written it: numerics() reads it
  // from there, and delayed scaling records it with the step's other amaxes.
  float* amax_dst = nullptr;
  if (p.delayed) {
    amax_dst = slots_of(p.tensor).at(slot_row, p.delayed_column);
  } else {
    if (auto st = p.amax.reserve(sizeof(float)); !st.ok()) return st;
    amax_dst = p.amax.as<float>();
  }
  if (auto st = backend.copy(amax_dst, w.amax, sizeof(float)); !st.ok()) return st;
  // The scales are copied into the layer's own buffers: numerics() reads them after the
  // caller may have freed its Fp8Weight.
  absl::Status reserved = p.scale.reserve(sizeof(float));
  reserved.Update(p.inv_scale.reserve(sizeof(float)));
  if (!reserved.ok()) return reserved;
  if (auto st = backend.copy(p.scale.as<float>(), w.scale, sizeof(float)); !st.ok()) return st;
  if (auto st = backend.copy(p.inv_scale.as<float>(), w.inv_scale, sizeof(float)); !st.ok()) return st;
  p.external = true;
  p.external_out = w.data;
  p.external_out_t = w.data_t;
  p.range_counted = false;  // the layer never sees these values in high precision
  p.scale_in_use = p.scale.as<float>();
  p.inv_scale_in_use = p.inv_scale.as<float>();
  p.host_scale_in_use.reset();
  p.rows = out_features;
  p.cols = in_features;
  p.last_amax_row = p.delayed ? slot_row : -1;
  return absl::OkStatus();
}

ScaledOperand Float8Linear::State::scaled(TensorKind t, Orientation o) const {
  const CastPlan& p = plans[static_cast<size_t>(use[static_cast<int>(t)][o])];
  ScaledOperand op;
  if (o == kAsStored) {
    op.data = p.external ? p.external_out : p.holder().out.as<uint8_t>();
  } else {
    op.data = p.external ? p.external_out_t : p.holder().out_t.as<uint8_t>();
  }
  op.format = p.config.format();
  // Either orientation's scales run along the rows of the K-contiguous copy the GEMM reads.
  op.granularity = p.granularity == Granularity::kTensorwise ? Granularity::kTensorwise : Granularity::kRowwise;
  op.inv_scale = p.inv_scale_in_use;
  return op;
}

bool Float8Linear::State::gemm_runs_in_fp8(Gemm g) const {
  switch (g) {
    case Gemm::kOutput:
      return config.output_runs_in_fp8();
    case Gemm::kGradInput:
      return config.grad_input_runs_in_fp8();
    case Gemm::kGradWeight:
      return config.grad_weight_runs_in_fp8();
  }
  return false;
}

absl::StatusOr<const void*> Float8Linear::State::in_compute_dtype(const void* data, DType from, int64_t n,
                                                                  BackendBuffer& scratch) {
  const DType to = compute_dtype();
  if (from == to) return data;
  if (auto s = scratch.reserve(dtype_bytes(to, n)); !s.ok()) return s;
  if (auto s = backend.convert(data, from, scratch.as<void>(), to, n); !s.ok()) return s;
  return scratch.as<const void>();
}

const void* Float8Linear::State::high_precision(TensorKind t, Orientation o, const void* raw) const {
  const int plan = use[static_cast<int>(t)][o];
  return plan < 0 ? raw : plans[static_cast<size_t>(plan)].holder().dequantized.as<const void>();
}

absl::Status Float8Linear::State::upload_delayed_scales() {
  const int64_t n = static_cast<int64_t>(delayed_plans.size());
  if (n == 0) return absl::OkStatus();
  std::vector<float> host(static_cast<size_t>(n * kDelayedScaleStride), 1.0f);
  for (int64_t i = 0; i < n; ++i) {
    CastPlan& p = plans[static_cast<size_t>(delayed_plans[static_cast<size_t>(i)])];
    const std::optional<float> scale = p.delayed->next_scale();
    p.delayed_scale_ready = scale.has_value();
    float* entry = host.data() + i * kDelayedScaleStride;
    entry[0] = scale.value_or(1.0f);
    entry[kFloatsPer16Bytes] = 1.0f / entry[0];
  }
  if (auto s = delayed_scales.reserve(float_bytes(n * kDelayedScaleStride)); !s.ok()) return s;
  // Queued: the step's casts that read the old scales run first; the next step's read these.
  return backend.queue_copy_from_host(delayed_scales.as<void>(), host.data(), float_bytes(n * kDelayedScaleStride));
}

// ---- Float8Linear -------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<Float8Linear>> Float8Linear::create(Backend& backend, int64_t in_features,
                                                                   int64_t out_features,
                                                                   const Float8LinearConfig& config,
                                                                   const LinearActivations& activations) {
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

  auto state = std::make_unique<State>(backend, in_features, out_features, config, activations);
  const Float8LinearConfig& c = state->config;
  state->plans.reserve(6);  // at most two casts per tensor; CastPlan is not copied after this
  state->plan_tensor(TensorKind::kInput, c.output.input, c.output_runs_in_fp8(), "output", c.grad_weight.input,
                     c.grad_weight_runs_in_fp8(), "grad_weight");
  state->plan_tensor(TensorKind::kWeight, c.output.weight, c.output_runs_in_fp8(), "output", c.grad_input.weight,
                     c.grad_input_runs_in_fp8(), "grad_input");
  state->plan_tensor(TensorKind::kGradOutput, c.grad_input.grad_output, c.grad_input_runs_in_fp8(), "grad_input",
                     c.grad_weight.grad_output, c.grad_weight_runs_in_fp8(), "grad_weight");
  state->plan_delayed_scaling();
  if (auto s = state->upload_delayed_scales(); !s.ok()) return s;
  return std::unique_ptr<Float8Linear>(new Float8Linear(std::move(state)));
}

Float8Linear::Float8Linear(std::unique_ptr<State> state) : s_(std::move(state)) {}
Float8Linear::~Float8Linear() = default;

int64_t Float8Linear::in_features() const { return s_->in_features; }
int64_t Float8Linear::out_features() const { return s_->out_features; }
const Float8LinearConfig& Float8Linear::config() const { return s_->config; }
const LinearActivations& Float8Linear::activations() const { return s_->activations; }

absl::Status Float8Linear::forward(const void* input, int64_t tokens, const float* weight, const float* bias,
                                   void* output, const ForwardOptions& options) {
  return run_forward(input, tokens, {weight, nullptr}, bias, output, /*for_backward=*/true, options);
}

absl::Status Float8Linear::forward(const void* input, int64_t tokens, const Fp8Weight& weight, const float* bias,
                                   void* output, const ForwardOptions& options) {
  if (!s_->takes_fp8_weight()) {
    return absl::FailedPreconditionError(
        "Float8Linear::forward: this layer's config cannot take a weight cast elsewhere (it needs one tensorwise "
        "fp8 cast shared by the output and grad_input GEMMs)");
  }
  return run_forward(input, tokens, {nullptr, &weight}, bias, output, /*for_backward=*/true, options);
}

absl::Status Float8Linear::forward_no_grad(const void* input, int64_t tokens, const float* weight, const float* bias,
                                           void* output, const ForwardOptions& options) {
  return run_forward(input, tokens, {weight, nullptr}, bias, output, /*for_backward=*/false, options);
}

absl::Status Float8Linear::forward_no_grad(const void* input, int64_t tokens, const Fp8Weight& weight,
                                           const float* bias, void* output, const ForwardOptions& options) {
  if (!s_->takes_fp8_weight()) {
    return absl::FailedPreconditionError("Float8Linear::forward_no_grad: this layer cannot take a weight cast elsewhere");
  }
  return run_forward(input, tokens, {nullptr, &weight}, bias, output, /*for_backward=*/false, options);
}

bool Float8Linear::takes_fp8_weight() const { return s_->takes_fp8_weight(); }

Format Float8Linear::weight_format() const { return s_->config.output.weight.format(); }

float Float8Linear::fp8_weight_scale(float amax) const {
  const State& s = *s_;
  const int plan = s.weight_plan();
  if (plan < 0) return 1.0f;
  const CastPlan& p = s.plans[static_cast<size_t>(plan)];
  if (p.delayed && p.delayed_scale_ready) return *p.delayed->next_scale();
  return scale_from_amax(amax, p.config.format(), p.config.pow2_scale);
}

absl::Status Float8Linear::rebind_weight(const float* weight) {
  if (s_->tokens == 0) return absl::FailedPreconditionError("Float8Linear::rebind_weight: no forward() to rebind");
  if (weight == nullptr) return absl::InvalidArgumentError("Float8Linear::rebind_weight: null weight");
  s_->weight = weight;
  return absl::OkStatus();
}

absl::Status Float8Linear::rebind_weight(const Fp8Weight& weight) {
  State& s = *s_;
  if (s.tokens == 0) return absl::FailedPreconditionError("Float8Linear::rebind_weight: no forward() to rebind");
  if (!s.takes_fp8_weight() || weight.data == nullptr || weight.data_t == nullptr || weight.scale == nullptr ||
      weight.inv_scale == nullptr) {
    return absl::InvalidArgumentError(
        "Float8Linear::rebind_weight: needs a layer that takes fp8 weights and an Fp8Weight with data, data_t, "
        "scale and inv_scale");
  }
  CastPlan& p = s.plans[static_cast<size_t>(s.weight_plan())];
  if (!p.external) {
    return absl::FailedPreconditionError(
        "Float8Linear::rebind_weight: the last forward() cast the weight itself; rebind it with fp32 values");
  }
  // Same codes in new memory: the scales the forward copied stay valid.
  p.external_out = weight.data;
  p.external_out_t = weight.data_t;
  return absl::OkStatus();
}

absl::Status Float8Linear::run_forward(const void* input, int64_t tokens, const WeightSource& weight, const float* bias,
                                       void* output, bool for_backward, const ForwardOptions& options) {
  State& s = *s_;
  if (input == nullptr || (weight.f32 == nullptr && weight.fp8 == nullptr) || output == nullptr) {
    return absl::InvalidArgumentError("Float8Linear::forward: input, weight and output must not be null");
  }
  if (weight.fp8 != nullptr && options.weight_row_amax != nullptr) {
    return absl::InvalidArgumentError(
        "Float8Linear::forward: weight_row_amax was given with an Fp8Weight, which is cast already");
  }
  if (tokens <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("Float8Linear::forward: tokens must be positive, got ", tokens));
  }
  if (s.backend.is_cuda() && s.config.grad_weight_runs_in_fp8() && tokens % kGpuFp8GemmMultiple != 0) {
    return absl::InvalidArgumentError(absl::StrCat("Float8Linear::forward: tokens=", tokens, " is not a multiple of ",
                                                   kGpuFp8GemmMultiple,
                                                   ", which the fp8 grad_weight GEMM contracts over on a GPU"));
  }
  const int64_t m = tokens, k = s.in_features, n = s.out_features;
  const int row = s.forward_slots.rows_used;
  if (s.forward_slots.columns > 0) {
    if (auto st = s.forward_slots.prepare_row(); !st.ok()) return st;
  }
  if (auto st = s.cast_input({input, s.activations.input, m, k}, row, options.input_row_amax); !st.ok()) return st;
  if (weight.fp8 != nullptr) {
    if (auto st = s.adopt_fp8_weight(*weight.fp8, row); !st.ok()) return st;
  } else if (auto st =
                 s.cast_tensor(TensorKind::kWeight, {weight.f32, DType::kFloat32, n, k}, row, options.weight_row_amax);
             !st.ok()) {
    return st;
  }
  // The weight in the compute dtype, for the high-precision GEMMs that read it as is: this
  // forward's, and (converted here once) its backward's. An Fp8Weight has none
  // (takes_fp8_weight()).
  const void* weight_raw = weight.f32;
  if (weight.f32 != nullptr && (s.reads_raw(TensorKind::kWeight, kAsStored) ||
                                (for_backward && s.reads_raw(TensorKind::kWeight, kTransposed)))) {
    absl::StatusOr<const void*> w = s.in_compute_dtype(weight.f32, DType::kFloat32, n * k, s.weight_compute);
    if (!w.ok()) return w.status();
    weight_raw = *w;
  }

  absl::Status st;
  if (s.config.output_runs_in_fp8()) {
    ScaledGemmArgs g;
    g.m = m;
    g.n = n;
    g.k = k;
    g.a = s.scaled(TensorKind::kInput, kAsStored);
    g.b = s.scaled(TensorKind::kWeight, kAsStored);
    g.out_dtype = s.activations.output;
    g.out = output;
    g.bias = bias;
    g.addend = options.residual;
    g.fast_accum = s.config.output.fast_accum;
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
    g.out_dtype = s.activations.output;
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
  s.weight = weight.f32;
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
  const int64_t m = s.tokens, k = s.in_features, n = s.out_features;
  const DType compute = s.compute_dtype();
  const DType grad_dtype = s.activations.output;
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
    const int wp = s.weight_plan();
    if (wp >= 0 && s.plans[static_cast<size_t>(wp)].external &&
        s.plans[static_cast<size_t>(wp)].external_out_t == nullptr) {
      return absl::FailedPreconditionError(
          "Float8Linear::backward: the forward's Fp8Weight had no transposed codes (data_t); rebind_weight() with "
          "them first");
    }
    absl::Status st;
    if (s.config.grad_input_runs_in_fp8()) {
      ScaledGemmArgs g;  // [M, K] = g [M, N] · (Wᵀ [K, N])ᵀ
      g.m = m;
      g.n = k;
      g.k = n;
      g.a = s.scaled(TensorKind::kGradOutput, kAsStored);
      g.b = s.scaled(TensorKind::kWeight, kTransposed);
      g.out_dtype = s.activations.input;
      g.out = grad_input;
      g.accumulate = options.grad_input == Store::kAccumulate;
      g.fast_accum = s.config.grad_input.fast_accum;
      st = s.backend.scaled_gemm(g);
    } else {
      GemmArgs g;  // [M, K] = g [M, N] · W [N, K]
      g.m = m;
      g.n = k;
      g.k = n;
      g.a = s.high_precision(TensorKind::kGradOutput, kAsStored, grad_output_raw);
      g.b = s.high_precision(TensorKind::kWeight, kTransposed, weight_raw);
      g.in_dtype = compute;
      g.out_dtype = s.activations.input;
      g.out = grad_input;
      g.beta = options.grad_input == Store::kAccumulate ? 1.0f : 0.0f;
      st = s.backend.gemm(g);
    }
    if (!st.ok()) return st;
  }

  const bool add_to_grad_weight = options.grad_weight == Store::kAccumulate;
  absl::Status st;
  if (s.config.grad_weight_runs_in_fp8()) {
    ScaledGemmArgs g;  // [N, K] += gᵀ [N, M] · (xᵀ [K, M])ᵀ
    g.m = n;
    g.n = k;
    g.k = m;
    g.a = s.scaled(TensorKind::kGradOutput, kTransposed);
    g.b = s.scaled(TensorKind::kInput, kTransposed);
    g.out = grad_weight;  // fp32
    g.accumulate = add_to_grad_weight;
    g.fast_accum = s.config.grad_weight.fast_accum;
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

bool Float8Linear::can_share_input_casts_with(const Float8Linear& source) const {
  return s_->can_share_input_with(*source.s_);
}

absl::Status Float8Linear::share_input_casts_from(const Float8Linear& source) {
  if (!can_share_input_casts_with(source)) {
    return absl::InvalidArgumentError(
        "Float8Linear::share_input_casts_from: the layers cast their input differently (or with delayed scaling, "
        "or on different backends, or the source shares another's), so one cannot serve the other");
  }
  s_->input_source = source.s_.get();
  return absl::OkStatus();
}

int64_t Float8Linear::shared_input_casts() const { return s_->shared_input_casts; }

bool Float8Linear::State::reads_row_amax(TensorKind t) const {
  for (int plan : use[static_cast<int>(t)]) {
    if (plan < 0) continue;
    const CastPlan& p = plans[static_cast<size_t>(plan)];
    if (!p.delayed && p.granularity != Granularity::kColumnwise) return true;
  }
  return false;
}

bool Float8Linear::reads_input_row_amax() const { return s_->reads_row_amax(TensorKind::kInput); }
bool Float8Linear::reads_weight_row_amax() const { return s_->reads_row_amax(TensorKind::kWeight); }
bool Float8Linear::reads_grad_output_row_amax() const { return s_->reads_row_amax(TensorKind::kGradOutput); }

int64_t Float8Linear::row_amax_casts() const { return s_->row_amax_casts; }

// ---- delayed scaling -------------------------------------------------------------------------

int Float8Linear::delayed_count() const { return static_cast<int>(s_->delayed_plans.size()); }

std::vector<std::string> Float8Linear::delayed_names() const {
  std::vector<std::string> names;
  for (int i : s_->delayed_plans) {
    const CastPlan& p = s_->plans[static_cast<size_t>(i)];
    const bool tensor_has_two = std::count_if(s_->delayed_plans.begin(), s_->delayed_plans.end(), [&](int j) {
                                  return s_->plans[static_cast<size_t>(j)].tensor == p.tensor;
                                }) > 1;
    names.push_back(tensor_has_two ? absl::StrCat(tensor_kind_name(p.tensor), ".", cast_dtype_name(p.config.dtype))
                                   : tensor_kind_name(p.tensor));
  }
  return names;
}

absl::Status Float8Linear::write_step_amaxes(float* dst) {
  State& s = *s_;
  if (s.delayed_plans.empty()) return absl::OkStatus();
  if (dst == nullptr) return absl::InvalidArgumentError("Float8Linear::write_step_amaxes: dst is null");
  // Forward casts come first in delayed order, then backward ones (plans are built input,
  // weight, grad_output), so each direction's reduction lands in one contiguous run.
  float* next = dst;
  for (AmaxSlots* slots : {&s.forward_slots, &s.backward_slots}) {
    if (slots->columns == 0) continue;
    if (slots->rows_used == 0) {
      return absl::FailedPreconditionError(absl::StrCat("Float8Linear: the step has no ",
                                                        slots == &s.forward_slots ? "forward()" : "backward()",
                                                        " whose amaxes delayed scaling could record"));
    }
    // Amaxes are non-negative, so the per-column amax of the slot rows is their max.
    const MatrixRef rows{slots->buffer.as<float>(), DType::kFloat32, slots->rows_used, slots->columns};
    if (auto st = s.backend.amax(rows, Granularity::kColumnwise, next); !st.ok()) return st;
    next += slots->columns;
  }
  return absl::OkStatus();
}

absl::Status Float8Linear::finish_step(absl::Span<const float> amaxes) {
  State& s = *s_;
  if (amaxes.size() != s.delayed_plans.size()) {
    return absl::InvalidArgumentError(absl::StrCat("Float8Linear::finish_step: expected ", s.delayed_plans.size(),
                                                   " amaxes (one per delayed cast), got ", amaxes.size()));
  }
  for (size_t i = 0; i < amaxes.size(); ++i) {
    s.plans[static_cast<size_t>(s.delayed_plans[i])].delayed->record(amaxes[i]);
  }
  s.forward_slots.rows_used = 0;
  s.backward_slots.rows_used = 0;
  return s.upload_delayed_scales();
}

absl::Status Float8Linear::finish_step() {
  State& s = *s_;
  const int64_t n = delayed_count();
  if (n == 0) return finish_step(absl::Span<const float>());
  if (auto st = s.step_amaxes.reserve(float_bytes(n)); !st.ok()) return st;
  if (auto st = write_step_amaxes(s.step_amaxes.as<float>()); !st.ok()) return st;
  std::vector<float> host(static_cast<size_t>(n));
  if (auto st = s.backend.copy_to_host(host.data(), s.step_amaxes.as<void>(), float_bytes(n)); !st.ok()) return st;
  return finish_step(host);
}

const DelayedScaling& Float8Linear::delayed_scaling(int i) const {
  return *s_->plans[static_cast<size_t>(s_->delayed_plans.at(static_cast<size_t>(i)))].delayed;
}

absl::Status Float8Linear::replay_delayed_history(int i, absl::Span<const float> amaxes) {
  if (i < 0 || i >= delayed_count()) {
    return absl::OutOfRangeError(absl::StrCat("Float8Linear: no delayed cast ", i, " (", delayed_count(), " of them)"));
  }
  s_->plans[static_cast<size_t>(s_->delayed_plans[static_cast<size_t>(i)])].delayed->replay(amaxes);
  return absl::OkStatus();
}

std::vector<float> Float8Linear::save_scaling_state() const {
  std::vector<float> out;
  for (int i = 0; i < delayed_count(); ++i) {
    const std::vector<float> one = delayed_scaling(i).serialize();
    out.insert(out.end(), one.begin(), one.end());
  }
  return out;
}

absl::Status Float8Linear::restore_scaling_state(absl::Span<const float> state) {
  State& s = *s_;
  const int64_t each = DelayedScaling::serialized_size(s.config.amax_history_len);
  const int64_t expected = each * delayed_count();
  if (static_cast<int64_t>(state.size()) != expected) {
    return absl::InvalidArgumentError(absl::StrCat("Float8Linear::restore_scaling_state: expected ", expected,
                                                   " floats (", delayed_count(), " delayed casts), got ",
                                                   state.size()));
  }
  // Restore into copies first so that a bad entry leaves the layer unchanged.
  std::vector<DelayedScaling> restored;
  for (int i = 0; i < delayed_count(); ++i) {
    DelayedScaling copy = delayed_scaling(i);
    if (auto st = copy.restore(state.subspan(static_cast<size_t>(i * each), static_cast<size_t>(each))); !st.ok()) {
      return st;
    }
    restored.push_back(std::move(copy));
  }
  for (int i = 0; i < delayed_count(); ++i) {
    s.plans[static_cast<size_t>(s.delayed_plans[static_cast<size_t>(i)])].delayed = restored[static_cast<size_t>(i)];
  }
  return s.upload_delayed_scales();
}

// ---- numerics ---------------------------------------------------------------------------------

absl::StatusOr<std::vector<CastNumerics>> Float8Linear::numerics() {
  State& s = *s_;
  std::vector<CastNumerics> out;
  for (const CastPlan& p : s.plans) {
    if (p.rows == 0) continue;
    const bool delayed_amax = p.last_amax_row >= 0;
    const int64_t n = scale_count(p.granularity, p.rows, p.cols);
    std::vector<float> amax(static_cast<size_t>(n)), scale(static_cast<size_t>(n));
    const float* amax_src =
        delayed_amax ? s.slots_of(p.tensor).at(p.last_amax_row, p.delayed_column) : p.holder().amax.as<float>();
    if (auto st = s.backend.copy_to_host(amax.data(), amax_src, float_bytes(n)); !st.ok()) return st;
    if (p.host_scale_in_use.has_value()) {
      // The device copy may already hold the next step's scale.
      scale.assign(1, *p.host_scale_in_use);
    } else if (auto st = s.backend.copy_to_host(scale.data(), p.scale_in_use, float_bytes(n)); !st.ok()) {
      return st;
    }
    CastNumerics c;
    c.tensor = p.tensor;
    c.gemms = p.gemms;
    c.config = p.config;
    c.amax = *std::max_element(amax.begin(), amax.end());
    c.scale = *std::min_element(scale.begin(), scale.end());
    float use = 0.0f;
    for (size_t i = 0; i < amax.size(); ++i) use = std::max(use, amax[i] * scale[i]);
    c.range_use = use / fp8_max(p.config.format());
    if (p.range_counted) {
      CastRangeCounts counts;
      if (auto st = s.backend.copy_to_host(&counts, p.holder().range_counts.as<void>(), sizeof counts); !st.ok()) {
        return st;
      }
      c.measured = true;
      c.elements = p.rows * p.cols;
      c.saturated = static_cast<int64_t>(counts.saturated);
      c.underflow = static_cast<int64_t>(counts.underflow);
      c.saturated_ratio = static_cast<float>(static_cast<double>(c.saturated) / static_cast<double>(c.elements));
      c.underflow_ratio = static_cast<float>(static_cast<double>(c.underflow) / static_cast<double>(c.elements));
    }
    out.push_back(std::move(c));
  }
  return out;
}

void Float8Linear::set_measuring(bool on) { s_->measuring = on; }
bool Float8Linear::measuring() const { return s_->measuring; }

}  // namespace fp8::engine
