#include "worker/engine/fsdp/fsdp_model.h"

#include <algorithm>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "fp8/arith.h"
#include "worker/engine/model/delayed_step.h"
#include "worker/engine/status_macros.h"

namespace fp8::engine::fsdp {

namespace {

// The unit of a parameter name: block i for "layers.<i>.…", else the root.
int unit_of(const std::string& name) {
  const std::vector<std::string> parts = absl::StrSplit(name, '.');
  int block = 0;
  if (parts.size() > 2 && parts[0] == "layers" && absl::SimpleAtoi(parts[1], &block)) return block;
  return ParameterHooks::kRootUnit;
}

uint8_t* bytes(const Tensor& t) { return static_cast<uint8_t*>(t.raw()); }

// Each parameter's block in a unit's flat buffers starts 16-byte aligned (fp32 and fp8
// views of it, and cuBLASLt's operands, stay aligned).
constexpr int64_t kAlignBytes = 16;
int64_t align_up(int64_t n) { return (n + kAlignBytes - 1) / kAlignBytes * kAlignBytes; }

}  // namespace

struct FsdpModel::Param {
  Parameter* full = nullptr;   // the model's: value / grad defined only while gathered
  Parameter* shard = nullptr;  // in shards_
  ShardLayout layout;
  TensorShape shape;           // the full shape
  int unit = ParameterHooks::kRootUnit;
  int fp8 = -1;                // index into fp8_ when it travels as fp8 codes
  bool bf16 = false;           // travels as bf16 (FsdpOptions::param_dtype)
  Tensor shard_bf16;           // bf16: the shard rounded, in its unit's gather_send
  Tensor gathered_bf16;        // bf16: where the all-gather lands, until widened into gathered
  Tensor gathered;             // padded fp32 values, while gathered
  Tensor grad_padded;          // padded fp32 gradient, from before_backward to the reduce-scatter
  // Where this parameter's shard sits in its unit's flat buffers.
  int64_t gather_offset = 0;   // bytes, in the flat shard that is all-gathered
  int section = 0;             // the Section that gather_offset lies in
  int64_t grad_input_offset = -1;  // bytes: an fp8 weight's grad_input codes of their own, in kBackwardOnly
  int64_t reduce_offset = 0;   // floats, in the flat gradient slice that is reduce-scattered
  size_t shard_bytes() const;  // as gathered: fp8 codes or fp32
};

struct FsdpModel::Fp8State {
  LinearUnit* linear = nullptr;
  int param = -1;
  bool own_grad_input_codes = false;  // Fp8WeightScales::has_grad_input_codes
  // This rank's shard cast with the whole weight's scales for each GEMM (in its unit's
  // gather_send): the output GEMM's codes, and the grad_input GEMM's when they differ.
  Tensor shard_codes, shard_codes_grad_input;
  bool shard_cast = false;  // they match the current shard and scales
  Tensor gathered;             // [padded rows, in] output codes, while gathered
  Tensor gathered_grad_input;  // [padded rows, in] grad_input codes of their own, while gathered
  Tensor gathered_t;           // [in, out] grad_input codes, for the backward
  // What the linear reads (linear->gathered_fp8 points here): the gathered codes, and the
  // scales and amaxes weight_scales_ computes (Fp8WeightScales::bind).
  Fp8Weight weight;
};

// What a gather moves, in three consecutive sections of a unit's flat shard, so that each
// pass gathers one contiguous range: a forward gathers kForwardOnly and kBoth, a backward
// kBoth and kBackwardOnly (and kForwardOnly too when full activation checkpointing runs
// the forward again). The output GEMM's codes of a weight whose grad_input GEMM reads
// codes of their own (the rowwise recipes) are forward-only, those grad_input codes
// backward-only; everything else (fp32 and bf16 parameters, codes both GEMMs read) both.
enum Section : int { kForwardOnly = 0, kBoth = 1, kBackwardOnly = 2, kSections = 3 };

// A unit's parameters travel together: ONE call of the group gathers their shards, ONE
// reduce-scatters their gradients (UnitCollectives: packed, or a collective a parameter
// grouped), so a block costs two calls per pass instead of two per parameter (on Gloo
// each collective is a round trip).
struct FsdpModel::Unit {
  std::vector<int> params;
  int64_t gather_bytes = 0;   // flat shard size, per rank
  int64_t section_begin[kSections + 1] = {};  // bytes: section i is [begin[i], begin[i + 1])
  int64_t reduce_floats = 0;  // flat gradient slice, per rank
  Tensor gather_send;         // this rank's shards, packed (bytes)
  int64_t bf16_version = -1;  // the shards_version_ gather_send's bf16 shards were rounded from
  Tensor gather_recv;         // packed: every rank's, while a gather is in flight or unpacked
  Tensor reduce_recv;         // this rank's slice of the summed gradients, when added to the shards'
  Tensor shard_grads;         // the shards' gradients themselves, laid out as reduce_recv
  CommStream::Handle gather;  // queued, not yet waited for
  int gather_first = 0, gather_end = 0;  // the sections it moves
  bool present[kSections] = {};  // gathered and unpacked
};

absl::StatusOr<UnitCollectives> parse_unit_collectives(std::string_view text, std::string_view where) {
  if (text == "packed") return UnitCollectives::kPacked;
  if (text == "per_parameter") return UnitCollectives::kPerParameter;
  return absl::InvalidArgumentError(
      absl::StrCat(std::string(where), ": '", std::string(text), "' is not packed or per_parameter"));
}

namespace {

absl::Status check_wire_dtype(DType dtype, const char* field) {
  if (dtype == DType::kFloat32 || dtype == DType::kBFloat16) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("FSDP: ", field, " must be fp32 or bf16, not ", dtype_name(dtype)));
}

}  // namespace

FsdpModel::FsdpModel(LlamaModel& model, collectives::ProcessGroup& group, const FsdpOptions& options)
    : model_(model),
      device_(model.device()),
      options_(options),
      rank_(group.rank()),
      world_size_(group.size()),
      collectives_(options.collectives),
      recomputes_forward_(model.config().checkpointing == ActivationCheckpointing::kFull),
      comm_(group, model.device().backend()) {}

FsdpModel::~FsdpModel() {
  model_.set_parameter_hooks(nullptr);
  for (Fp8State& f : fp8_) f.linear->gathered_fp8 = nullptr;
}

absl::StatusOr<std::unique_ptr<FsdpModel>> FsdpModel::create(LlamaModel& model, collectives::ProcessGroup& group,
                                                              const FsdpOptions& options) {
  FP8_RETURN_IF_ERROR(check_wire_dtype(options.param_dtype, "param_dtype"));
  FP8_RETURN_IF_ERROR(check_wire_dtype(options.reduce_dtype, "reduce_dtype"));
  std::unique_ptr<FsdpModel> f(new FsdpModel(model, group, options));
  FP8_RETURN_IF_ERROR(f->shard_parameters());
  FP8_RETURN_IF_ERROR(f->plan_fp8_gathers());
  FP8_RETURN_IF_ERROR(f->pack_units());
  model.set_parameter_hooks(f.get());
  return f;
}

absl::Status FsdpModel::shard_parameters() {
  Backend& backend = device_.backend();
  units_.resize(static_cast<size_t>(model_.config().n_layers) + 1);
  auto& all = model_.parameters().all();
  params_.reserve(all.size());
  // Those of a model created with ParameterStorage::kDeferred, which holds no values: each
  // rank draws its rows instead (draw_initial_shards).
  std::vector<size_t> deferred;
  for (Parameter& full : all) {
    Param p;
    p.full = &full;
    p.shape = full.shape;
    p.layout = shard_layout(p.shape, world_size_);
    p.unit = unit_of(full.name);
    FP8_ASSIGN_OR_RETURN(p.shard, shards_.add(device_, full.name, {p.layout.shard_elements()}, full.init,
                                              full.weight_decay));
    p.shard->split = full.split;  // FSDP's rows are of this rank's tensor-parallel part
    p.shard->grad_summed_across_tensor_parallel = full.grad_summed_across_tensor_parallel;
    // This rank's rows of an initialised parameter; padding rows stay zero.
    const int64_t real = p.layout.real_rows_of(rank_);
    if (!full.value.defined()) {
      deferred.push_back(params_.size());
    } else if (real > 0) {
      const size_t row_bytes = static_cast<size_t>(p.layout.row_elements) * sizeof(float);
      const size_t first = static_cast<size_t>(rank_ * p.layout.rows_per_rank) * row_bytes;
      FP8_RETURN_IF_ERROR(backend.copy(p.shard->value.raw(), static_cast<const uint8_t*>(full.value.raw()) + first,
                                       static_cast<size_t>(real) * row_bytes));
    }
    full.value = Tensor();  // the full tensors exist only while gathered from now on
    full.grad = Tensor();
    unit_state(p.unit).params.push_back(static_cast<int>(params_.size()));
    params_.push_back(std::move(p));
  }
  FP8_RETURN_IF_ERROR(draw_initial_shards(deferred));
  return backend.synchronize();
}

// Each parameter is drawn whole, as one process draws it (initial_values), so the shards
// hold the bits of the single process's; a few at a time, one a thread, so that only those
// few are ever whole (on the host) at once.
absl::Status FsdpModel::draw_initial_shards(const std::vector<size_t>& which) {
  const size_t threads = std::max<size_t>(init_threads(which.size()), 1);
  for (size_t start = 0; start < which.size(); start += threads) {
    const size_t count = std::min(threads, which.size() - start);
    std::vector<std::vector<float>> values(count);
    auto draw = [&](size_t k) {
      values[k] = initial_values(*params_[which[start + k]].full, model_.seed(), model_.config().n_layers);
    };
    std::vector<std::thread> helpers;
    for (size_t k = 1; k < count; ++k) helpers.emplace_back(draw, k);
    draw(0);
    for (std::thread& t : helpers) t.join();
    for (size_t k = 0; k < count; ++k) {
      Param& p = params_[which[start + k]];
      const ShardLayout& l = p.layout;
      std::vector<float> shard(static_cast<size_t>(l.shard_elements()), 0.0f);  // padding rows stay zero
      const auto first = values[k].begin() + std::min(rank_ * l.rows_per_rank, l.rows) * l.row_elements;
      std::copy(first, first + l.real_rows_of(rank_) * l.row_elements, shard.begin());
      FP8_RETURN_IF_ERROR(p.shard->value.upload<float>(shard));
    }
  }
  return absl::OkStatus();
}

absl::Status FsdpModel::plan_fp8_gathers() {
  if (!options_.all_gather_fp8) return absl::OkStatus();
  for (LinearUnit* u : model_.mutable_linears()) {
    // A tied output projection shares its weight with the embedding lookup, which needs fp32.
    if (!u->selection.fp8 || !u->layer->info().needs.fp8_weight || u->weight->name != u->name) continue;
    Fp8State f;
    f.linear = u;
    for (size_t i = 0; i < params_.size(); ++i) {
      if (params_[i].full == u->weight) f.param = static_cast<int>(i);
    }
    if (f.param < 0) return absl::InternalError(absl::StrCat("FSDP: no parameter behind linear ", u->name));
    fp8_.push_back(std::move(f));
  }
  if (fp8_.empty()) return absl::OkStatus();
  // Their amaxes and scales: float8/weight_scales.h.
  std::vector<Fp8WeightScales::Shard> shards;
  for (const Fp8State& f : fp8_) {
    const Param& p = params_[static_cast<size_t>(f.param)];
    Fp8WeightScales::Shard shard{f.linear->layer.get(), p.layout.rows_per_rank, p.layout.row_elements,
                                 rank_ * p.layout.rows_per_rank, p.layout.padded_rows()};
    // Beside tensor parallelism, where the scales are reduced across its ranks too: the
    // shard placed in the whole weight, each tensor-parallel part padded to whole shards.
    const ParameterSplit& split = p.full->split;
    if (options_.weight_amaxes_across_tensor_parallel && split.split()) {
      if (split.axis == 0) {
        shard.part_first_row = split.index * p.layout.padded_rows();
        shard.first_row += shard.part_first_row;
        shard.padded_rows *= split.parts;
      } else {
        shard.first_col = split.index * p.layout.row_elements;
        shard.padded_cols = split.parts * p.layout.row_elements;
      }
    }
    shards.push_back(shard);
  }
  FP8_ASSIGN_OR_RETURN(weight_scales_, Fp8WeightScales::create(device_.backend(), std::move(shards)));
  for (size_t i = 0; i < fp8_.size(); ++i) {
    Fp8State& f = fp8_[i];
    params_[static_cast<size_t>(f.param)].fp8 = static_cast<int>(i);
    f.own_grad_input_codes = weight_scales_->has_grad_input_codes(static_cast<int64_t>(i));
    f.weight = weight_scales_->bind(static_cast<int64_t>(i));
    f.linear->gathered_fp8 = &f.weight;
  }
  return absl::OkStatus();
}

std::vector<TensorShape> FsdpModel::full_shapes() const {
  std::vector<TensorShape> shapes;
  for (const Param& p : params_) shapes.push_back(p.shape);
  return shapes;
}

size_t FsdpModel::Param::shard_bytes() const {
  return static_cast<size_t>(layout.shard_elements()) * (fp8 >= 0 ? 1 : bf16 ? 2 : sizeof(float));
}

absl::Status FsdpModel::pack_units() {
  for (Unit& u : units_) {
    // Section by section (Section): each parameter's shard where its gathers move it.
    for (int section = 0; section < kSections; ++section) {
      u.section_begin[section] = u.gather_bytes;
      for (int i : u.params) {
        Param& p = params_[static_cast<size_t>(i)];
        const bool own = p.fp8 >= 0 && fp8_[static_cast<size_t>(p.fp8)].own_grad_input_codes;
        if (section == kBackwardOnly) {
          if (!own) continue;
          p.grad_input_offset = u.gather_bytes;
        } else {
          if ((section == kForwardOnly) != own) continue;
          p.bf16 = p.fp8 < 0 && options_.param_dtype == DType::kBFloat16;
          p.section = section;
          p.gather_offset = u.gather_bytes;
        }
        u.gather_bytes += align_up(static_cast<int64_t>(p.shard_bytes()));
      }
    }
    u.section_begin[kSections] = u.gather_bytes;
    for (int i : u.params) {
      Param& p = params_[static_cast<size_t>(i)];
      p.reduce_offset = u.reduce_floats;
      u.reduce_floats += align_up(p.layout.shard_elements() * static_cast<int64_t>(sizeof(float))) / 4;
    }
    // Bytes travel in an fp8-typed tensor: Tensor has no plain byte type.
    FP8_ASSIGN_OR_RETURN(u.gather_send, Tensor::zeros(device_, ElementType::kE4M3, {u.gather_bytes}));
    FP8_ASSIGN_OR_RETURN(u.reduce_recv, Tensor::zeros(device_, ElementType::kFloat32, {u.reduce_floats}));
    // The shards' gradients live in one buffer laid out as the reduce-scatter's output, so
    // that a step's first reduction lands in them with nothing to copy.
    FP8_ASSIGN_OR_RETURN(u.shard_grads, Tensor::zeros(device_, ElementType::kFloat32, {u.reduce_floats}));
    for (int i : u.params) {
      Param& p = params_[static_cast<size_t>(i)];
      FP8_ASSIGN_OR_RETURN(p.shard->grad, u.shard_grads.rows(p.reduce_offset, p.layout.shard_elements()));
    }
    // Nothing packs the send buffer: an fp8 weight's shard is cast straight into its place
    // (aligned: offsets are multiples of kAlignBytes), a bf16 one rounded there, and every
    // other shard lives there, the optimizer updating it in place. Gathers read it only
    // between a step's start and its optimizer (the next step's casts and updates are
    // queued after this step's gathers).
    for (int i : u.params) {
      Param& p = params_[static_cast<size_t>(i)];
      if (p.fp8 >= 0) {
        Fp8State& f = fp8_[static_cast<size_t>(p.fp8)];
        FP8_ASSIGN_OR_RETURN(f.shard_codes, u.gather_send.rows(p.gather_offset, p.layout.shard_elements()));
        if (f.own_grad_input_codes) {
          FP8_ASSIGN_OR_RETURN(f.shard_codes_grad_input,
                               u.gather_send.rows(p.grad_input_offset, p.layout.shard_elements()));
        }
        continue;
      }
      if (p.bf16) {
        FP8_ASSIGN_OR_RETURN(p.shard_bf16, u.gather_send.reinterpret(ElementType::kBFloat16, p.gather_offset,
                                                                     p.shard->value.shape()));
        continue;
      }
      FP8_ASSIGN_OR_RETURN(Tensor in_send, u.gather_send.reinterpret(ElementType::kFloat32, p.gather_offset,
                                                                     p.shard->value.shape()));
      FP8_RETURN_IF_ERROR(in_send.copy_from(p.shard->value));
      p.shard->value = std::move(in_send);
    }
  }
  return absl::OkStatus();
}

int64_t FsdpModel::parameter_count() const {
  int64_t n = 0;
  for (const Param& p : params_) n += p.layout.rows * p.layout.row_elements;
  return n;
}

std::vector<std::string> FsdpModel::fp8_gathered_linears() const {
  std::vector<std::string> names;
  for (const Fp8State& f : fp8_) names.push_back(f.linear->name);
  return names;
}

FsdpModel::Unit& FsdpModel::unit_state(int unit) { return units_[static_cast<size_t>(unit + 1)]; }

std::string FsdpModel::unit_name(int unit) const {
  return unit == kRootUnit ? std::string("the root parameters (embeddings, norm, output)")
                           : absl::StrCat("layers.", unit);
}

// ---- fp8 weight scales ------------------------------------------------------------------------

absl::Status FsdpModel::refresh_fp8_scales() {
  scales_stale_ = false;
  if (fp8_.empty()) return absl::OkStatus();
  std::vector<const float*> shards;
  for (const Fp8State& f : fp8_) shards.push_back(params_[static_cast<size_t>(f.param)].shard->value.data<float>());
  FP8_RETURN_IF_ERROR(weight_scales_->refresh(shards, shard_row_amaxes_current_, [this](float* amaxes, int64_t n) {
    CommCounters counts;
    counts.all_reduces = 1;
    counts.all_reduce_bytes = n * static_cast<int64_t>(sizeof(float));
    counts.weight_scale_all_reduces = 1;
    FP8_RETURN_IF_ERROR(
        comm_.run("all_reduce(max) of the fp8 weight amaxes", counts, [amaxes, n](collectives::ProcessGroup& g) {
          return g.all_reduce(amaxes, n, collectives::ReduceOp::kMax);
        }));
    return options_.weight_amaxes_across_tensor_parallel ? options_.reduce_amaxes_across_tensor_parallel(amaxes, n)
                                                         : absl::OkStatus();
  }));
  for (Fp8State& f : fp8_) f.shard_cast = false;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<LlamaModel::WeightRowAmaxes>> FsdpModel::shard_row_amax_outputs() {
  std::vector<LlamaModel::WeightRowAmaxes> outputs;
  if (fp8_.empty()) return outputs;
  FP8_ASSIGN_OR_RETURN(const std::vector<float*> rows, weight_scales_->row_amax_outputs());
  for (size_t i = 0; i < fp8_.size(); ++i) {
    const Param& p = params_[static_cast<size_t>(fp8_[i].param)];
    outputs.push_back({p.shard, RowAmaxes{rows[i], p.layout.row_elements}});
  }
  return outputs;
}

absl::Status FsdpModel::cast_fp8_shard(int index) {
  Fp8State& f = fp8_[static_cast<size_t>(index)];
  if (f.shard_cast) return absl::OkStatus();
  const Param& p = params_[static_cast<size_t>(f.param)];
  FP8_RETURN_IF_ERROR(weight_scales_->cast_shard(
      index, p.shard->value.data<float>(), bytes(f.shard_codes),
      f.own_grad_input_codes ? bytes(f.shard_codes_grad_input) : nullptr));
  f.shard_cast = true;
  return absl::OkStatus();
}

absl::Status FsdpModel::round_bf16_shards(Unit& u) {
  if (u.bf16_version == shards_version_) return absl::OkStatus();
  for (int i : u.params) {
    const Param& p = params_[static_cast<size_t>(i)];
    if (!p.bf16) continue;
    FP8_RETURN_IF_ERROR(device_.backend().convert(p.shard->value.raw(), DType::kFloat32, p.shard_bf16.raw(),
                                                  DType::kBFloat16, p.layout.shard_elements()));
  }
  u.bf16_version = shards_version_;
  return absl::OkStatus();
}

// ---- gathers ------------------------------------------------------------------------------------

bool FsdpModel::has_section(const Unit& u, int section) const {
  // An empty section is there without a gather.
  return u.present[section] || u.section_begin[section] == u.section_begin[section + 1];
}

std::pair<int, int> FsdpModel::missing_sections(const Unit& u, bool for_backward) const {
  int first = for_backward && !recomputes_forward_ ? kBoth : kForwardOnly;
  int end = for_backward ? kSections : kBackwardOnly;
  while (first < end && has_section(u, first)) ++first;
  while (end > first && has_section(u, end - 1)) --end;
  return {first, end};
}

std::vector<FsdpModel::Region> FsdpModel::regions(const Unit& u, int first, int end) {
  std::vector<Region> out;
  for (int section = first; section < end; ++section) {
    for (int i : u.params) {
      Param& p = params_[static_cast<size_t>(i)];
      if (p.section == section) out.push_back({&p, false});
      if (section == kBackwardOnly && p.grad_input_offset >= 0) out.push_back({&p, true});
    }
  }
  return out;
}

absl::Status FsdpModel::start_gather(int unit, bool for_backward) {
  Unit& u = unit_state(unit);
  if (u.gather.valid()) return absl::OkStatus();  // finish_gather gathers what it lacks after it
  const auto [first, end] = missing_sections(u, for_backward);
  if (first == end) return absl::OkStatus();
  CommCounters counts;
  // This rank's shards are in the send buffer already (fp32 values), or cast there now
  // (fp8 codes with the whole weights' scales, bf16 values), once a step: later gathers
  // reuse them.
  if (first <= kBoth && kBoth < end) FP8_RETURN_IF_ERROR(round_bf16_shards(u));
  const std::vector<Region> moved = regions(u, first, end);
  for (const Region& r : moved) {
    const Param& p = *r.param;
    if (p.fp8 >= 0) {
      FP8_RETURN_IF_ERROR(cast_fp8_shard(p.fp8));
      counts.all_gather_bytes_fp8 += p.layout.padded_elements();
    } else if (p.bf16) {
      counts.all_gather_bytes_bf16 += p.layout.padded_elements() * 2;
    } else {
      counts.all_gather_bytes_f32 += p.layout.padded_elements() * static_cast<int64_t>(sizeof(float));
    }
  }
  u.gather_first = first;
  u.gather_end = end;
  const std::string what = absl::StrCat("all_gather of ", unit_name(unit));
  if (collectives_ == UnitCollectives::kPerParameter) {
    // Each parameter's all-gather lands in its gathered tensor: rank r's shard is rows
    // [r * rows_per_rank, ...) of it. The job keeps the tensors until it ran.
    std::vector<collectives::AllGatherPart> parts;
    std::vector<Tensor> gathered;
    for (const Region& r : moved) {
      FP8_ASSIGN_OR_RETURN(Tensor * full, allocate_gathered(r));
      parts.push_back({bytes(u.gather_send) + region_offset(r), bytes(*full), r.param->shard_bytes()});
      gathered.push_back(*full);
    }
    u.gather = comm_.enqueue(what, counts,
                             [parts = std::move(parts), gathered = std::move(gathered)](collectives::ProcessGroup& g) {
                               return g.all_gather_parts(parts);
                             });
    return absl::OkStatus();
  }
  const int64_t per_rank = u.section_begin[end] - u.section_begin[first];
  FP8_ASSIGN_OR_RETURN(u.gather_recv, Tensor::empty(device_, ElementType::kE4M3, {per_rank * world_size_}));
  // Queued behind the packing (and whatever last used the receive buffer's memory).
  const void* send = bytes(u.gather_send) + u.section_begin[first];
  u.gather = comm_.enqueue(what, counts, [send, recv = u.gather_recv, per_rank](collectives::ProcessGroup& g) {
    return g.all_gather(send, recv.raw(), static_cast<size_t>(per_rank));
  });
  return absl::OkStatus();
}

int64_t FsdpModel::region_offset(const Region& r) const {
  return r.grad_input_codes ? r.param->grad_input_offset : r.param->gather_offset;
}

absl::StatusOr<Tensor*> FsdpModel::allocate_gathered(const Region& r) {
  Param& p = *r.param;
  const TensorShape padded = padded_shape(p.shape, p.layout);
  if (p.fp8 >= 0) {
    Fp8State& f = fp8_[static_cast<size_t>(p.fp8)];
    const Fp8WeightCast& cast = r.grad_input_codes ? f.linear->layer->info().needs.weight_grad_input
                                                   : f.linear->layer->info().needs.weight_output;
    const ElementType codes = cast.format == Format::kE4M3 ? ElementType::kE4M3 : ElementType::kE5M2;
    Tensor& into = r.grad_input_codes ? f.gathered_grad_input : f.gathered;
    FP8_ASSIGN_OR_RETURN(into, Tensor::empty(device_, codes, padded));
    return &into;
  }
  if (p.bf16) {
    FP8_ASSIGN_OR_RETURN(p.gathered_bf16, Tensor::empty(device_, ElementType::kBFloat16, padded));
    return &p.gathered_bf16;
  }
  FP8_ASSIGN_OR_RETURN(p.gathered, Tensor::empty(device_, ElementType::kFloat32, padded));
  return &p.gathered;
}

absl::Status FsdpModel::expose_gathered(const Region& r) {
  Param& p = *r.param;
  if (p.fp8 >= 0) {
    // grad_input codes of their own are read transposed (finish_gather's for_backward).
    Fp8State& f = fp8_[static_cast<size_t>(p.fp8)];
    if (!r.grad_input_codes) f.weight.output.codes = bytes(f.gathered);
    return absl::OkStatus();
  }
  if (p.bf16) {
    FP8_ASSIGN_OR_RETURN(p.gathered, Tensor::empty(device_, ElementType::kFloat32, p.gathered_bf16.shape()));
    FP8_RETURN_IF_ERROR(device_.backend().convert(p.gathered_bf16.raw(), DType::kBFloat16, p.gathered.raw(),
                                                  DType::kFloat32, p.layout.padded_elements()));
    p.gathered_bf16 = Tensor();
  }
  FP8_ASSIGN_OR_RETURN(p.full->value, p.gathered.rows(0, p.layout.rows));
  return absl::OkStatus();
}

absl::Status FsdpModel::finish_gather(int unit, bool for_backward) {
  Unit& u = unit_state(unit);
  Backend& backend = device_.backend();
  // A gather in flight may have been started for the other pass (a prefetch): what it
  // lacks is gathered after it.
  for (auto missing = missing_sections(u, for_backward); missing.first != missing.second;
       missing = missing_sections(u, for_backward)) {
    FP8_RETURN_IF_ERROR(start_gather(unit, for_backward));
    const absl::Status gathered = comm_.wait(u.gather);
    u.gather = CommStream::Handle();
    FP8_RETURN_IF_ERROR(gathered);
    const int64_t base = u.section_begin[u.gather_first];
    const int64_t per_rank = u.section_begin[u.gather_end] - base;
    for (const Region& r : regions(u, u.gather_first, u.gather_end)) {
      if (collectives_ == UnitCollectives::kPacked) {
        // Unpack: rank r's block of each parameter is rows [r * rows_per_rank, ...) of it,
        // every rank's block in one queued copy, each from its rank's slice of the buffer.
        FP8_ASSIGN_OR_RETURN(Tensor * full, allocate_gathered(r));
        const size_t block = r.param->shard_bytes();
        FP8_RETURN_IF_ERROR(backend.copy_rows(bytes(*full), block, bytes(u.gather_recv) + (region_offset(r) - base),
                                              static_cast<size_t>(per_rank), block,
                                              static_cast<size_t>(world_size_)));
      }
      FP8_RETURN_IF_ERROR(expose_gathered(r));
    }
    u.gather_recv = Tensor();
    for (int section = u.gather_first; section < u.gather_end; ++section) u.present[section] = true;
  }
  if (!for_backward) return absl::OkStatus();
  // The grad_input GEMM reads the weight transposed: the codes both GEMMs share, or its own.
  for (int i : u.params) {
    Param& p = params_[static_cast<size_t>(i)];
    if (p.fp8 < 0) continue;
    Fp8State& f = fp8_[static_cast<size_t>(p.fp8)];
    if (f.weight.grad_input.codes_t != nullptr) continue;
    const Tensor& codes = f.own_grad_input_codes ? f.gathered_grad_input : f.gathered;
    const int64_t out = p.layout.rows, in = p.layout.row_elements;
    FP8_ASSIGN_OR_RETURN(f.gathered_t, Tensor::empty(device_, codes.type(), {in, out}));
    FP8_RETURN_IF_ERROR(backend.transpose_bytes(bytes(codes), out, in, bytes(f.gathered_t)));
    f.weight.grad_input.codes_t = bytes(f.gathered_t);
  }
  return absl::OkStatus();
}

void FsdpModel::release(int unit) {
  Unit& u = unit_state(unit);
  for (int i : u.params) {
    Param& p = params_[static_cast<size_t>(i)];
    p.full->value = Tensor();
    p.gathered = Tensor();
    p.gathered_bf16 = Tensor();
    if (p.fp8 >= 0) {
      Fp8State& f = fp8_[static_cast<size_t>(p.fp8)];
      f.gathered = Tensor();
      f.gathered_grad_input = Tensor();
      f.gathered_t = Tensor();
      f.weight.output.codes = nullptr;
      f.weight.grad_input.codes_t = nullptr;
    }
  }
  for (bool& present : u.present) present = false;
}

// ---- gradients -------------------------------------------------------------------------------

absl::Status FsdpModel::allocate_grads(int unit) {
  for (int i : unit_state(unit).params) {
    Param& p = params_[static_cast<size_t>(i)];
    // Only the padding rows are zeroed: the backward's first producer of the gradient
    // overwrites the real rows (Parameter::claim_grad), and start_reduce_scatter zeroes
    // them should nothing have.
    FP8_ASSIGN_OR_RETURN(p.grad_padded, Tensor::empty(device_, ElementType::kFloat32, padded_shape(p.shape, p.layout)));
    FP8_ASSIGN_OR_RETURN(p.full->grad, p.grad_padded.rows(0, p.layout.rows));
    p.full->grad_discarded = true;
    const int64_t padding_rows = p.layout.padded_rows() - p.layout.rows;
    if (padding_rows > 0) {
      FP8_ASSIGN_OR_RETURN(Tensor padding, p.grad_padded.rows(p.layout.rows, padding_rows));
      FP8_RETURN_IF_ERROR(padding.zero());
    }
  }
  return absl::OkStatus();
}

absl::Status FsdpModel::start_reduce_scatter(int unit) {
  Unit& u = unit_state(unit);
  const bool bf16 = options_.reduce_dtype == DType::kBFloat16;
  CommCounters counts;
  for (int i : u.params) {
    Param& p = params_[static_cast<size_t>(i)];
    FP8_RETURN_IF_ERROR(p.full->claim_grad_for_adding());  // zeroes it if the backward made none
    (bf16 ? counts.reduce_scatter_bytes_bf16 : counts.reduce_scatter_bytes_f32) +=
        p.layout.padded_elements() * (bf16 ? 2 : static_cast<int64_t>(sizeof(float)));
  }
  // The step's first reduction (every shard's gradient stands for zero) writes the
  // gradients themselves; a later micro-batch's lands in reduce_recv, to be added to them.
  // Queued behind the gradients' last writes (and any packing): whatever read the shards'
  // gradients or reduce_recv last (the previous step's optimizer, or accumulation) was
  // queued before it too.
  bool into_shard_grads = true;
  for (int i : u.params) into_shard_grads = into_shard_grads && params_[static_cast<size_t>(i)].shard->grad_discarded;
  if (into_shard_grads) {
    for (int i : u.params) (void)params_[static_cast<size_t>(i)].shard->claim_grad();
  }
  float* recv = (into_shard_grads ? u.shard_grads : u.reduce_recv).data<float>();
  CommStream::Job job;
  Tensor bf16_sums;
  if (bf16) {
    FP8_ASSIGN_OR_RETURN(job, bf16_reduce_scatter_job(u, bf16_sums));
  } else if (collectives_ == UnitCollectives::kPerParameter) {
    // Each parameter's reduce-scatter reads its gradient where the backward left it (rank
    // r's slice is rows [r * rows_per_rank, ...)) and lands at its place in recv. The job
    // keeps the gradients until it ran.
    std::vector<collectives::ReduceScatterPart> parts;
    std::vector<Tensor> grads;
    for (int i : u.params) {
      const Param& p = params_[static_cast<size_t>(i)];
      parts.push_back({p.grad_padded.data<float>(), recv + p.reduce_offset, p.layout.shard_elements()});
      grads.push_back(p.grad_padded);
    }
    job = [parts = std::move(parts), grads = std::move(grads)](collectives::ProcessGroup& g) {
      return g.reduce_scatter_parts(parts, collectives::ReduceOp::kSum);
    };
  } else {
    FP8_ASSIGN_OR_RETURN(Tensor send, pack_gradients(u));
    const int64_t count = u.reduce_floats;
    job = [send, recv, count](collectives::ProcessGroup& g) {
      return g.reduce_scatter(send.data<float>(), recv, count, collectives::ReduceOp::kSum);
    };
  }
  for (int i : u.params) {
    Param& p = params_[static_cast<size_t>(i)];
    p.full->grad = Tensor();
    p.grad_padded = Tensor();
  }
  CommStream::Handle h =
      comm_.enqueue(absl::StrCat("reduce_scatter of the gradients of ", unit_name(unit)), counts, std::move(job));
  pending_reductions_.push_back({unit, std::move(h), into_shard_grads, std::move(bf16_sums)});
  return absl::OkStatus();
}

absl::StatusOr<CommStream::Job> FsdpModel::bf16_reduce_scatter_job(const Unit& u, Tensor& sums) {
  Backend& backend = device_.backend();
  FP8_ASSIGN_OR_RETURN(sums, Tensor::empty(device_, ElementType::kBFloat16, {u.reduce_floats}));
  auto* out = static_cast<uint16_t*>(sums.raw());
  std::vector<collectives::Bf16ReduceScatterPart> parts;
  std::vector<Tensor> sends;  // the job keeps them until it ran
  if (collectives_ == UnitCollectives::kPerParameter) {
    for (int i : u.params) {
      const Param& p = params_[static_cast<size_t>(i)];
      FP8_ASSIGN_OR_RETURN(Tensor send, Tensor::empty(device_, ElementType::kBFloat16, p.grad_padded.shape()));
      FP8_RETURN_IF_ERROR(backend.convert(p.grad_padded.raw(), DType::kFloat32, send.raw(), DType::kBFloat16,
                                          p.layout.padded_elements()));
      parts.push_back({static_cast<const uint16_t*>(send.raw()), out + p.reduce_offset, p.layout.shard_elements()});
      sends.push_back(std::move(send));
    }
  } else {
    FP8_ASSIGN_OR_RETURN(Tensor packed, pack_gradients(u));
    FP8_ASSIGN_OR_RETURN(Tensor send, Tensor::empty(device_, ElementType::kBFloat16, packed.shape()));
    FP8_RETURN_IF_ERROR(backend.convert(packed.raw(), DType::kFloat32, send.raw(), DType::kBFloat16,
                                        u.reduce_floats * world_size_));
    parts.push_back({static_cast<const uint16_t*>(send.raw()), out, u.reduce_floats});
    sends.push_back(std::move(send));
  }
  return CommStream::Job([parts = std::move(parts), sends = std::move(sends), sums](collectives::ProcessGroup& g) {
    return g.reduce_scatter_bf16_parts(parts);
  });
}

absl::Status FsdpModel::widen_bf16_sums(const PendingReduction& r) {
  const Unit& u = unit_state(r.unit);
  const Tensor& into = r.into_shard_grads ? u.shard_grads : u.reduce_recv;
  return device_.backend().convert(r.bf16_sums.raw(), DType::kBFloat16, into.raw(), DType::kFloat32, u.reduce_floats);
}

absl::StatusOr<Tensor> FsdpModel::pack_gradients(const Unit& u) {
  Backend& backend = device_.backend();
  // Slice r of the send buffer holds every parameter's rows for rank r. Not zeroed: the
  // copies below write every float that drain_reduce_scatters() reads back; the alignment
  // gaps between parameters sum whatever they hold, and nothing reads them.
  FP8_ASSIGN_OR_RETURN(Tensor send, Tensor::empty(device_, ElementType::kFloat32, {u.reduce_floats * world_size_}));
  for (int i : u.params) {
    const Param& p = params_[static_cast<size_t>(i)];
    // Every rank's block of the gradient in one queued copy, each into that rank's slice.
    const size_t block_bytes = static_cast<size_t>(p.layout.shard_elements()) * sizeof(float);
    FP8_RETURN_IF_ERROR(backend.copy_rows(send.data<float>() + p.reduce_offset,
                                          static_cast<size_t>(u.reduce_floats) * sizeof(float),
                                          p.grad_padded.data<float>(), block_bytes, block_bytes,
                                          static_cast<size_t>(world_size_)));
  }
  return send;
}

absl::Status FsdpModel::drain_reduce_scatters() {
  FP8_ASSIGN_OR_RETURN(ModelOps * ops, device_.model_ops());
  for (const PendingReduction& r : pending_reductions_) {
    FP8_RETURN_IF_ERROR(comm_.wait(r.handle));
    if (r.bf16_sums.defined()) FP8_RETURN_IF_ERROR(widen_bf16_sums(r));
    if (r.into_shard_grads) continue;
    const Unit& u = unit_state(r.unit);
    for (int i : u.params) {
      Param& p = params_[static_cast<size_t>(i)];
      const float* summed = u.reduce_recv.data<float>() + p.reduce_offset;
      const int64_t n = p.layout.shard_elements();
      // The step's first micro-batch writes the shard's gradient, later ones add to it.
      if (p.shard->claim_grad() == Store::kOverwrite) {
        FP8_RETURN_IF_ERROR(device_.backend().copy(p.shard->grad.data<float>(), summed, n * sizeof(float)));
      } else {
        FP8_RETURN_IF_ERROR(ops->accumulate(summed, n, p.shard->grad.data<float>()));
      }
    }
  }
  pending_reductions_.clear();
  return absl::OkStatus();
}

// ---- hooks ------------------------------------------------------------------------------------

absl::Status FsdpModel::before_forward(int unit) {
  const int blocks = static_cast<int>(model_.config().n_layers);
  if (unit == kRootUnit) {
    if (scales_stale_) FP8_RETURN_IF_ERROR(refresh_fp8_scales());
    FP8_RETURN_IF_ERROR(start_gather(kRootUnit, /*for_backward=*/false));
    if (options_.prefetch && blocks > 0) FP8_RETURN_IF_ERROR(start_gather(0, /*for_backward=*/false));
    return finish_gather(kRootUnit, /*for_backward=*/false);
  }
  FP8_RETURN_IF_ERROR(finish_gather(unit, /*for_backward=*/false));
  if (options_.prefetch && unit + 1 < blocks) FP8_RETURN_IF_ERROR(start_gather(unit + 1, /*for_backward=*/false));
  return absl::OkStatus();
}

absl::Status FsdpModel::after_forward(int unit, bool training) {
  // The root stays for the backward, which starts and ends with it.
  if (unit != kRootUnit || !training) release(unit);
  return absl::OkStatus();
}

absl::Status FsdpModel::before_backward(int unit) {
  const int blocks = static_cast<int>(model_.config().n_layers);
  FP8_RETURN_IF_ERROR(finish_gather(unit, /*for_backward=*/true));
  FP8_RETURN_IF_ERROR(allocate_grads(unit));
  const int next = unit == kRootUnit ? blocks - 1 : unit - 1;
  if (options_.prefetch && next >= 0) FP8_RETURN_IF_ERROR(start_gather(next, /*for_backward=*/true));
  return absl::OkStatus();
}

absl::Status FsdpModel::after_backward(int unit) {
  FP8_RETURN_IF_ERROR(start_reduce_scatter(unit));
  if (unit != kRootUnit) {
    release(unit);
    return absl::OkStatus();
  }
  FP8_RETURN_IF_ERROR(drain_reduce_scatters());
  release(kRootUnit);
  return absl::OkStatus();
}

// ---- step-level collectives ---------------------------------------------------------------------

absl::Status FsdpModel::finish_step() {
  return finish_delayed_step(model_.mutable_linears(), device_, delayed_amaxes_, [this](float* packed, int64_t total) {
    CommCounters counts;
    counts.all_reduces = 1;
    counts.all_reduce_bytes = total * static_cast<int64_t>(sizeof(float));
    counts.amax_all_reduces = 1;
    FP8_RETURN_IF_ERROR(comm_.run("all_reduce(max) of the delayed-scaling amaxes", counts,
                     [packed, total](collectives::ProcessGroup& g) { return g.all_reduce(packed, total, collectives::ReduceOp::kMax); }));
    return options_.reduce_amaxes_across_tensor_parallel ? options_.reduce_amaxes_across_tensor_parallel(packed, total)
                                                         : absl::OkStatus();
  });
}

absl::StatusOr<std::vector<float>> FsdpModel::gather_whole(const Tensor& shard, size_t i) {
  const Param& p = params_.at(i);
  const size_t bytes = static_cast<size_t>(p.layout.shard_elements()) * sizeof(float);
  FP8_ASSIGN_OR_RETURN(Tensor gathered,
                       Tensor::empty(device_, ElementType::kFloat32, {p.layout.padded_elements()}));
  CommCounters counts;
  counts.all_gather_bytes_f32 = static_cast<int64_t>(bytes) * world_size_;
  const void* send = shard.raw();
  void* recv = gathered.raw();
  FP8_RETURN_IF_ERROR(comm_.run(absl::StrCat("all_gather of ", p.full->name, " for a checkpoint"), counts,
                                [send, recv, bytes](collectives::ProcessGroup& g) { return g.all_gather(send, recv, bytes); }));
  FP8_RETURN_IF_ERROR(comm_.health());
  FP8_ASSIGN_OR_RETURN(std::vector<float> values, gathered.download<float>());
  values.resize(static_cast<size_t>(p.layout.rows * p.layout.row_elements));  // without the padding rows
  return values;
}

absl::Status FsdpModel::all_reduce(std::span<double> values, collectives::ReduceOp op) {
  if (values.empty()) return absl::OkStatus();
  // Staged through the device's memory: NCCL reduces device buffers.
  Backend& backend = device_.backend();
  const size_t n = values.size_bytes();
  FP8_ASSIGN_OR_RETURN(void* staging, backend.allocate(n));
  absl::Status st = backend.copy_from_host(staging, values.data(), n);
  if (st.ok()) {
    CommCounters counts;
    counts.all_reduces = 1;
    counts.all_reduce_bytes = static_cast<int64_t>(n);
    const auto count = static_cast<int64_t>(values.size());
    auto* data = static_cast<double*>(staging);
    st = comm_.run(absl::StrCat("all_reduce(", collectives::reduce_op_name(op), ") of ", count, " values"), counts,
                   [data, count, op](collectives::ProcessGroup& g) { return g.all_reduce(data, count, op); });
  }
  if (st.ok()) st = backend.copy_to_host(values.data(), staging, n);
  backend.deallocate(staging);
  // A device-queued group that failed leaves garbage behind rather than an error.
  if (st.ok()) st = comm_.health();
  return st;
}

absl::Status FsdpModel::reduce_step_values(float* floats, int64_t float_count, double* doubles,
                                           int64_t double_count) {
  CommCounters counts;
  counts.all_reduces = 2;
  counts.all_reduce_bytes = float_count * static_cast<int64_t>(sizeof(float)) +
                            double_count * static_cast<int64_t>(sizeof(double));
  return comm_.run("all_reduce(sum) of the step's losses and grad norm", counts,
                   [floats, float_count, doubles, double_count](collectives::ProcessGroup& g) {
                     FP8_RETURN_IF_ERROR(g.all_reduce(floats, float_count, collectives::ReduceOp::kSum));
                     return g.all_reduce(doubles, double_count, collectives::ReduceOp::kSum);
                   });
}

}  // namespace fp8::engine::fsdp
