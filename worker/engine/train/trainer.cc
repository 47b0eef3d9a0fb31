#include "worker/engine/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <array>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "worker/engine/train/amax_histories.h"
#include "worker/engine/checkpoint/commit_marker.h"
#include "worker/engine/checkpoint/discovery.h"
#include "worker/engine/checkpoint/layout.h"
#include "worker/engine/checkpoint/shard_reader.h"
#include "worker/engine/train/init_from.h"
#include "worker/engine/checkpoint/retention.h"
#include "worker/engine/checkpoint/save.h"
#include "worker/engine/status_macros.h"
#include "worker/engine/train/train_state_io.h"

namespace fp8::engine {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

LrDecay decay_of(v1::TrainSpec::Schedule s) {
  switch (s) {
    case v1::TrainSpec::CONSTANT:
      return LrDecay::kConstant;
    case v1::TrainSpec::LINEAR:
      return LrDecay::kLinear;
    default:
      return LrDecay::kCosine;
  }
}

std::string recipe_name(v1::Fp8Spec::Recipe r) {
  if (r == v1::Fp8Spec::RECIPE_UNSPECIFIED) r = v1::Fp8Spec::TENSORWISE;
  return absl::AsciiStrToLower(v1::Fp8Spec::Recipe_Name(r));
}

// The job's tokenizer (data.tokenizer, data.tokenizer_model), whose vocabulary must fit
// the model's (a token outside it would be refused at its first batch, long after start).
absl::StatusOr<std::unique_ptr<data::Tokenizer>> make_tokenizer(const v1::JobSpec& spec) {
  std::unique_ptr<data::Tokenizer> tokenizer;
  if (spec.data().tokenizer() == v1::DataSpec::SENTENCEPIECE) {
    absl::StatusOr<std::unique_ptr<data::Tokenizer>> spm =
        data::Tokenizer::sentence_piece_facts(spec.data().tokenizer_model(), "data.tokenizer_model");
    if (!spm.ok()) return spm.status();
    tokenizer = *std::move(spm);
  } else {
    tokenizer = data::Tokenizer::bytes();
  }
  if (tokenizer->vocab_size() > static_cast<uint64_t>(spec.model().vocab_size())) {
    return absl::InvalidArgumentError(absl::StrCat("model.vocab_size: ", spec.model().vocab_size(),
                                                   " is smaller than the vocabulary of data.tokenizer ",
                                                   tokenizer->name(), " (", tokenizer->vocab_size(), ")"));
  }
  return tokenizer;
}

}  // namespace


namespace {
// FSDP's fp8 all-gather beside tensor parallelism: a split weight cast per tensor, row or
// column needs its amaxes reduced across the tensor-parallel ranks too; one cast per
// 128x128 block needs nothing more (a block lies whole on one rank), and its grids must not
// be reduced together, so the two kinds cannot share the one reduction.
absl::Status check_fp8_gather_beside_tensor_parallel(const LlamaModel& model, fsdp::FsdpOptions& options) {
  if (!options.all_gather_fp8) return absl::OkStatus();
  bool reduced = false, block = false;
  for (const LinearUnit* u : model.linears()) {
    const Float8LinearNeeds& needs = u->layer->info().needs;
    if (!needs.fp8_weight) continue;
    for (const Fp8WeightCast& cast : {needs.weight_output, needs.weight_grad_input}) {
      (cast.granularity == Granularity::kBlock128x128 ? block : reduced) = true;
    }
  }
  if (reduced && block) {
    return absl::InvalidArgumentError(
        "fp8.all_gather_fp8 with parallel.tensor > 1: weights cast per tensor, row or column beside weights cast "
        "per block");
  }
  options.weight_amaxes_across_tensor_parallel = reduced;
  return absl::OkStatus();
}
}  // namespace

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::create(const v1::JobSpec& spec, const Device& device,
                                                         collectives::ProcessGroup* group,
                                                         const TrainerOptions& trainer_options) {
  std::unique_ptr<Trainer> t(new Trainer());
  t->spec_ = spec;
  const v1::DataSpec& d = spec.data();
  const v1::TrainSpec& tr = spec.train();
  const int group_size = group != nullptr ? group->size() : 1;
  if (group_size != spec.resources().world_size()) {
    return absl::InvalidArgumentError(absl::StrCat("resources.world_size is ", spec.resources().world_size(),
                                                   " but this rank's process group has ", group_size, " ranks"));
  }
  // Tensor-parallel ranks split the model and read the same data. With data parallelism
  // beside them, the job's ranks form a mesh (mesh.h) whose two groups FSDP and the model use.
  const int tensor = std::max(1, spec.parallel().tensor());
  if (tensor > 1) {
    if (group_size % tensor != 0) {
      return absl::InvalidArgumentError(absl::StrCat("resources.world_size ", group_size,
                                                     " is not a multiple of parallel.tensor ", tensor));
    }
    if (group_size == tensor) {
      t->tensor_parallel_ = std::make_unique<TensorParallelGroup>(*group, 0, device.backend());
      group = nullptr;  // no FSDP
    } else {
      FP8_ASSIGN_OR_RETURN(MeshGroups mesh, make_mesh_groups(group->rank(), group_size, tensor,
                                                             trainer_options.make_group));
      t->mesh_ = std::move(mesh);
      t->tensor_parallel_ =
          std::make_unique<TensorParallelGroup>(*t->mesh_.tensor, group->rank() / tensor * tensor, device.backend());
      group = t->mesh_.data.get();
    }
  }
  const int rank = group != nullptr ? group->rank() : 0;
  const int world = group != nullptr ? group->size() : 1;

  FP8_ASSIGN_OR_RETURN(const std::unique_ptr<data::Tokenizer> tokenizer, make_tokenizer(spec));
  const data::CorpusOptions corpus_options{d.seq_len(), d.val_fraction(), d.val_path(), tokenizer.get()};
  FP8_ASSIGN_OR_RETURN(t->corpus_, trainer_options.data_files.empty()
                                       ? data::Corpus::load(d.path(), corpus_options)
                                       : data::Corpus::load_files(d.path(), trainer_options.data_files, corpus_options));
  data::BatcherOptions batching{d.seq_len(), tr.batch_size(), tr.grad_accum(), d.seed(), rank, world};
  FP8_ASSIGN_OR_RETURN(t->batcher_, data::Batcher::create(*t->corpus_, batching));
  if (tr.eval_every() > 0 && (d.val_fraction() > 0 || d.has_val_path())) {
    const data::ValidationOptions eval{d.seq_len(), tr.batch_size(), tr.eval_batches(), rank, world};
    FP8_ASSIGN_OR_RETURN(t->validation_, data::ValidationSet::create(*t->corpus_, eval));
  }
  const LrScheduleOptions lr{tr.lr(), tr.min_lr(), tr.warmup_steps(), tr.steps(), decay_of(tr.schedule())};
  FP8_ASSIGN_OR_RETURN(t->schedule_, LrSchedule::create(lr));

  FP8_ASSIGN_OR_RETURN(LlamaConfig config, llama_config_from_spec(spec.model(), spec.train()));
  config.sequence_parallel = tensor > 1 && spec.parallel().sequence();
  // Under FSDP no rank holds the whole model, not even at start: each draws its own rows.
  FP8_ASSIGN_OR_RETURN(t->model_, LlamaModel::create(device, config, spec.fp8(), tr.seed(),
                                                     group != nullptr ? ParameterStorage::kDeferred
                                                                      : ParameterStorage::kAllocated,
                                                     t->tensor_parallel_.get()));
  t->trained_ = &t->model_->parameters();
  if (group != nullptr) {
    fsdp::FsdpOptions options;
    options.all_gather_fp8 = spec.fp8().all_gather_fp8();
    options.collectives = trainer_options.collectives;
    options.param_dtype = spec.fsdp().param_dtype() == v1::FsdpSpec::BF16 ? DType::kBFloat16 : DType::kFloat32;
    options.reduce_dtype = spec.fsdp().reduce_dtype() == v1::FsdpSpec::BF16 ? DType::kBFloat16 : DType::kFloat32;
    if (t->tensor_parallel_) {
      TensorParallelGroup* tp = t->tensor_parallel_.get();
      options.reduce_amaxes_across_tensor_parallel = [tp](float* amaxes, int64_t count) {
        return tp->max(amaxes, count);
      };
      FP8_RETURN_IF_ERROR(check_fp8_gather_beside_tensor_parallel(*t->model_, options));
    }
    FP8_ASSIGN_OR_RETURN(t->fsdp_, fsdp::FsdpModel::create(*t->model_, *group, options));
    t->trained_ = &t->fsdp_->shards();
  }
  if (spec.model().has_init_from()) {
    // Before any checkpoint: resume() then replaces these with the job's own, if any.
    const InitFromOptions init{spec.model().init_from(), trainer_options.init_from_follow_links, rank, world};
    FP8_RETURN_IF_ERROR(init_from_hf(spec.model(), init, *t->trained_));
    if (t->fsdp_) t->fsdp_->shards_changed();
  }
  t->collective_timeout_.emplace(
      std::vector<collectives::ProcessGroup*>{group, t->tensor_parallel_ ? &t->tensor_parallel_->group() : nullptr},
      tr.collective_timeout_seconds());
  FP8_ASSIGN_OR_RETURN(ModelOps * ops, device.model_ops());
  AdamWHyperparams hyper;
  hyper.beta1 = static_cast<float>(tr.beta1());
  hyper.beta2 = static_cast<float>(tr.beta2());
  hyper.eps = static_cast<float>(tr.eps());
  hyper.weight_decay = static_cast<float>(tr.weight_decay());
  FP8_ASSIGN_OR_RETURN(t->optimizer_, AdamW::create(*ops, *t->trained_, hyper));
  // The update writes the row amaxes of each fp8 weight (under FSDP: of each fp8-gathered
  // weight's shard), which its casts (the gathered codes' scale) then take instead of a
  // pass over the weight.
  FP8_ASSIGN_OR_RETURN(std::vector<LlamaModel::WeightRowAmaxes> outputs,
                       t->fsdp_ ? t->fsdp_->shard_row_amax_outputs() : t->model_->weight_row_amax_outputs());
  for (const LlamaModel::WeightRowAmaxes& o : outputs) {
    FP8_RETURN_IF_ERROR(t->optimizer_->write_row_amaxes(*o.weight, o.out));
  }
  return t;
}

TrainStateRefs Trainer::state_refs() { return {&spec_, model_.get(), trained_, &*optimizer_, &*batcher_}; }

std::string Trainer::sharding_summary() const {
  if (!fsdp_) return "";
  const std::vector<std::string> fp8 = fsdp_->fp8_gathered_linears();
  return absl::StrCat("fsdp over ", fsdp_->world_size(), " ranks; all-gather of ", fp8.size(),
                      fp8.size() == 1 ? " weight" : " weights", " in fp8, the rest in fp32");
}

absl::Status Trainer::agree(bool ok, int64_t step, const char* what) {
  if (!fsdp_ && !tensor_parallel_) return absl::OkStatus();
  // MAX of (failed, step, -step): any failure, and the largest and smallest step.
  std::array<double, 3> v{ok ? 0.0 : 1.0, static_cast<double>(step), -static_cast<double>(step)};
  if (fsdp_) FP8_RETURN_IF_ERROR(fsdp_->all_reduce(v, collectives::ReduceOp::kMax));
  if (tensor_parallel_) {
    FP8_RETURN_IF_ERROR(tensor_parallel_->all_reduce(v, collectives::ReduceOp::kMax));
  }
  if (v[0] != 0) return absl::AbortedError(absl::StrCat(what, " failed on another rank (see its log)"));
  if (v[1] != -v[2]) {
    return absl::FailedPreconditionError(absl::StrCat(what, ": ranks disagree on the step (from ", -v[2], " to ",
                                                      v[1], "); the ranks' checkpoint directories differ"));
  }
  return absl::OkStatus();
}

std::string Trainer::fp8_summary() const {
  int fp8 = 0;
  std::map<std::string, std::vector<std::string>> high_precision;  // reason -> layers
  for (const LinearUnit* u : model_->linears()) {
    if (u->selection.fp8) {
      ++fp8;
    } else {
      high_precision[u->selection.reason].push_back(u->name);
    }
  }
  std::string out = absl::StrCat(recipe_name(spec_.fp8().recipe()), ": ", fp8, " of ", model_->linears().size(),
                                 " linears in fp8");
  for (const auto& [reason, names] : high_precision) {
    const std::string shown = names.size() <= 3 ? absl::StrJoin(names, ", ") : absl::StrCat(names.size(), " layers");
    absl::StrAppend(&out, "; high precision: ", shown, " (", reason, ")");
  }
  return out;
}

absl::Status Trainer::load_checkpoint(const checkpoint::CommittedCheckpoint& found) {
  std::string read_from;
  bool read = false;
  // (Tensor-parallel jobs write whole tensors: a shard of world_size() ranks is FSDP's alone.)
  if (found.world_size() == world_size() && world_size() > 1 && !tensor_parallel_) {
    // Every rank reads its own shard, as written, unless the shard's vocabulary rows were
    // written before they were padded.
    FP8_ASSIGN_OR_RETURN(checkpoint::ShardReader reader, checkpoint::open_committed_shard(found, rank()));
    if (!written_without_padding(reader)) {
      read_from = reader.path().string();
      FP8_RETURN_IF_ERROR(read_train_state(reader, state_refs()));
      read = true;
    }
  }
  if (!read) {
    // Another world size, one rank whose checkpoint may hold whole tensors (a single
    // process's) or flat ones (FSDP's), or unpadded vocabulary rows: each rank reads its
    // rows from the shards that hold them.
    FP8_ASSIGN_OR_RETURN(CheckpointRows rows, CheckpointRows::open(found));
    read_from = rows.first().path().string();
    RankPart part{.sharded = fsdp_ != nullptr, .rank = rank(), .world_size = world_size(), .full_shapes = {}};
    if (fsdp_) {
      part.full_shapes = fsdp_->full_shapes();
    } else {
      for (const Parameter& p : trained_->all()) part.full_shapes.push_back(p.shape);
    }
    // A tensor-parallel rank reads its part of each split parameter (under FSDP, its rows of it).
    for (const Parameter& p : trained_->all()) part.splits.push_back(p.split);
    part.padding_rows = padding_rows();
    FP8_RETURN_IF_ERROR(read_train_state(rows, state_refs(), part));
  }
  if (optimizer_->steps_taken() != found.step()) {
    return absl::DataLossError(absl::StrCat(read_from, ": records step ", optimizer_->steps_taken(),
                                            " but sits in the directory of step ", found.step()));
  }
  return absl::OkStatus();
}

std::vector<int64_t> Trainer::padding_rows() const {
  std::map<std::string, int64_t> by_name;
  for (const Parameter& p : model_->parameters().all()) by_name[p.name] = p.padding_rows;
  std::vector<int64_t> out;
  for (const Parameter& p : trained_->all()) out.push_back(by_name[p.name]);
  return out;
}

bool Trainer::written_without_padding(const checkpoint::ShardReader& reader) const {
  const std::vector<int64_t> padding = padding_rows();
  const auto& trained = trained_->all();
  for (size_t i = 0; i < trained.size(); ++i) {
    if (padding[i] == 0) continue;
    const checkpoint::RecordInfo* info = reader.find_record("params/" + trained[i].name);
    const TensorShape& shape = trained[i].value.shape();
    if (info != nullptr && info->shape != checkpoint::Shape(shape.begin(), shape.end())) return true;
  }
  return false;
}

absl::StatusOr<int64_t> Trainer::resume(TrainObserver& observer) {
  // A checkpoint's weights come with no row amaxes: the next forward's casts measure them.
  model_->set_weight_row_amaxes_current(false);
  const std::string& dir = spec_.checkpoint().dir();
  if (dir.empty()) return 0;
  // Every rank loads the newest good checkpoint (load_checkpoint); under FSDP they then
  // agree that all of them loaded the same step, so no rank trains on while another failed.
  absl::Status loaded;
  std::optional<checkpoint::CommittedCheckpoint> found;
  absl::StatusOr<checkpoint::ResumePoint> point = checkpoint::find_latest_good(dir);
  if (point.ok()) {
    for (const std::string& w : point->warnings) observer.on_warning(w);
    found = point->checkpoint;
  } else {
    loaded = point.status();
  }
  if (loaded.ok() && found) {
    loaded = load_checkpoint(*found);
    // A tensor-parallel job's checkpoints are whole (one rank's): each rank always cuts its
    // part of them, which is no news.
    const bool whole_for_tensor_parallel = tensor_parallel_ && found->world_size() == 1;
    if (loaded.ok() && found->world_size() != world_size() && !whole_for_tensor_parallel) {
      observer.on_warning(absl::StrCat("checkpoint step ", found->step(), " was written by ", found->world_size(),
                                       found->world_size() == 1 ? " rank" : " ranks", "; its parameters and optimizer "
                                       "state are split anew over this job's ", world_size()));
    }
  }
  if (fsdp_) fsdp_->shards_changed();
  const int64_t step = found ? found->step() : 0;
  const absl::Status agreed = agree(loaded.ok(), step, "resuming");
  FP8_RETURN_IF_ERROR(loaded);
  FP8_RETURN_IF_ERROR(agreed);
  if (!found) return 0;
  resumed_from_ = found->dir;
  last_checkpoint_step_ = step;
  return step;
}

absl::StatusOr<StepReport> Trainer::train_step(const RunControl& control, bool* stop_everywhere) {
  const int64_t step = optimizer_->steps_taken() + 1;
  const int64_t micro_batches = spec_.train().grad_accum();
  const fsdp::CommCounters comm_before = fsdp_ ? fsdp_->counters() : fsdp::CommCounters{};
  const TensorParallelGroup::Counters tp_before =
      tensor_parallel_ ? tensor_parallel_->counters() : TensorParallelGroup::Counters{};
  Backend& backend = model_->device().backend();
  backend.reset_peak_memory();
  // Gradients restart from zero each step, lazily: each one's first producer overwrites it.
  trained_->discard_grads();
  // Averages over micro-batches and ranks: reduce-scattered sums are then means.
  const float grad_scale = 1.0f / static_cast<float>(micro_batches * world_size());
  // The step's losses and grad norm stay on the device (step_stats_) until a step reports
  // or checkpoints, so that no step waits for them; under FSDP the ranks sum them there.
  if (!step_stats_) {
    FP8_ASSIGN_OR_RETURN(step_stats_, StepStats::create(model_->device(), micro_batches, world_size()));
  }
  if (step_stats_->full()) FP8_RETURN_IF_ERROR(settle_step_stats());
  const StepStats::Slot slot = step_stats_->begin(step);
  double data_seconds = 0;
  for (int64_t i = 0; i < micro_batches; ++i) {
    // The host reads the next micro-batch while the device still runs the last one.
    const Clock::time_point data_start = Clock::now();
    batcher_->next_micro_batch(batch_);
    data_seconds += seconds_since(data_start);
    FP8_RETURN_IF_ERROR(model_->queue_forward_backward(batch_, grad_scale, slot.losses + i));
  }
  FP8_RETURN_IF_ERROR(trained_->define_grads());  // zeroes any that no op produced
  if (model_->config().sequence_parallel) {
    // The embedding and the norms saw this rank's tokens only: the ranks sum their shares.
    for (Parameter& p : trained_->all()) {
      if (p.grad_summed_across_tensor_parallel) FP8_RETURN_IF_ERROR(tensor_parallel_->sum(p.grad.data<float>(), p.grad.numel()));
    }
  }
  FP8_ASSIGN_OR_RETURN(ModelOps * ops, model_->device().model_ops());
  const bool stop_here = control.stop != nullptr && control.stop->load();
  const double lr = schedule_->lr_at(step);
  StepReport r;
  // Clipping rides on the update, its factor read on the device: no wait for the norm. A
  // non-finite norm skips the update there; the host reports it when it reads the step's
  // values (settle_step_stats).
  const double max_norm = spec_.train().grad_clip();
  if (!fsdp_ && !tensor_parallel_) {
    FP8_RETURN_IF_ERROR(model_->finish_step());
    FP8_RETURN_IF_ERROR(queue_grad_norm(*ops, *trained_, max_norm, slot.sum_of_squares, slot.clip_scale));
    *stop_everywhere = stop_here;
  } else if (tensor_parallel_ && !fsdp_) {
    FP8_RETURN_IF_ERROR(model_->finish_step());
    // Each rank's parts of the split parameters; the whole ones (alike on every rank) once.
    const bool split_only = tensor_parallel_->rank() != 0;
    FP8_RETURN_IF_ERROR(queue_grad_norm(*ops, *trained_, 0.0, slot.sum_of_squares, slot.clip_scale, split_only));
    FP8_RETURN_IF_ERROR(tensor_parallel_->sum(slot.sum_of_squares, 1));
    FP8_RETURN_IF_ERROR(ops->queue_clip_scale(slot.sum_of_squares, max_norm, slot.clip_scale));
    const float vote = stop_here ? 1.0f : 0.0f;
    FP8_RETURN_IF_ERROR(backend.queue_copy_from_host(slot.stop_vote, &vote, sizeof vote));
    FP8_RETURN_IF_ERROR(tensor_parallel_->max(slot.stop_vote, 1));
  } else {
    FP8_RETURN_IF_ERROR(fsdp_->finish_step());
    // This rank's shards' sum of squares, then the ranks' total and its factor. Beside
    // tensor parallelism, the whole (unsplit) parameters count on one tensor-parallel rank.
    const bool split_only = tensor_parallel_ && tensor_parallel_->rank() != 0;
    FP8_RETURN_IF_ERROR(queue_grad_norm(*ops, *trained_, 0.0, slot.sum_of_squares, slot.clip_scale, split_only));
    const float vote = stop_here ? 1.0f : 0.0f;
    FP8_RETURN_IF_ERROR(backend.queue_copy_from_host(slot.stop_vote, &vote, sizeof vote));
    FP8_RETURN_IF_ERROR(fsdp_->reduce_step_values(slot.losses, micro_batches + 1, slot.sum_of_squares, 1));
    if (tensor_parallel_) {
      FP8_RETURN_IF_ERROR(tensor_parallel_->sum(slot.sum_of_squares, 1));
      FP8_RETURN_IF_ERROR(tensor_parallel_->max(slot.stop_vote, 1));
    }
    FP8_RETURN_IF_ERROR(ops->queue_clip_scale(slot.sum_of_squares, max_norm, slot.clip_scale));
  }
  FP8_RETURN_IF_ERROR(optimizer_->step(static_cast<float>(lr), slot.clip_scale));
  if (fsdp_ || tensor_parallel_) {
    // The ranks stop together: each reads the summed votes of the step before, which the
    // device finishes ahead of this one, queued behind it, so the read never leaves the
    // device idle. A stop that reached any rank in step s stops every rank after s + 1.
    bool stop = false;
    if (pending_votes_) {
      float votes = 0;
      FP8_RETURN_IF_ERROR(pending_votes_->wait(&votes));
      if (fsdp_) FP8_RETURN_IF_ERROR(fsdp_->health());  // what a failed collective left is no vote
      stop = votes > 0;
    }
    FP8_ASSIGN_OR_RETURN(pending_votes_, backend.queue_read(slot.stop_vote, sizeof(float)));
    *stop_everywhere = stop;
  }
  // The update wrote the weights' row amaxes (create()); nothing changes the weights
  // between here and the next step's forwards.
  if (!fsdp_) model_->set_weight_row_amaxes_current(true);
  if (fsdp_ && tensor_parallel_) model_->split_weights_changed();
  if (fsdp_) {
    fsdp_->shards_changed(/*row_amaxes_written=*/true);
    const fsdp::CommCounters d = fsdp_->counters() - comm_before;
    StepComm c;
    c.all_gather_fp8_bytes = static_cast<double>(d.all_gather_bytes_fp8);
    c.all_gather_f32_bytes = static_cast<double>(d.all_gather_bytes_f32);
    c.all_gather_bf16_bytes = static_cast<double>(d.all_gather_bytes_bf16);
    c.reduce_scatter_f32_bytes = static_cast<double>(d.reduce_scatter_bytes_f32);
    c.reduce_scatter_bf16_bytes = static_cast<double>(d.reduce_scatter_bytes_bf16);
    c.all_reduces = static_cast<double>(d.all_reduces);
    c.all_reduce_bytes = static_cast<double>(d.all_reduce_bytes);
    c.weight_scale_all_reduces = static_cast<double>(d.weight_scale_all_reduces);
    c.comm_ms = 1e3 * d.comm_seconds;
    c.exposed_ms = 1e3 * d.exposed_seconds;
    r.comm = c;
  }
  if (tensor_parallel_) {
    // Every tensor-parallel collective runs on the compute thread: all of it is exposed.
    const TensorParallelGroup::Counters& now = tensor_parallel_->counters();
    StepComm c = r.comm.value_or(StepComm{});
    c.tensor_all_reduces = static_cast<double>(now.all_reduces - tp_before.all_reduces);
    c.tensor_all_reduce_bytes = static_cast<double>(now.bytes - tp_before.bytes);
    c.sequence_gather_fp8_bytes = static_cast<double>(now.gather_fp8_bytes - tp_before.gather_fp8_bytes);
    c.sequence_gather_bytes = static_cast<double>(now.gather_bytes - tp_before.gather_bytes);
    c.sequence_reduce_scatter_bytes = static_cast<double>(now.reduce_scatter_bytes - tp_before.reduce_scatter_bytes);
    c.tensor_ms = 1e3 * (now.seconds - tp_before.seconds);
    r.comm = c;
  }
  r.step = step;
  r.data_ms = 1e3 * data_seconds;
  r.total_steps = spec_.train().steps();
  r.lr = lr;
  const MemoryStats memory = backend.memory_stats();
  r.peak_memory_bytes = memory.peak_allocated;
  r.reserved_memory_bytes = memory.reserved;
  return r;
}

namespace {
// The status payload marking a divergence (kept by whoever passes the status on).
constexpr char kDivergencePayload[] = "fp8train/divergence";
}  // namespace

bool is_divergence(const absl::Status& s) { return s.GetPayload(kDivergencePayload).has_value(); }

absl::Status Trainer::check_finite(const std::vector<StepStats::StepValues>& steps) const {
  for (const StepStats::StepValues& v : steps) {
    if (!std::isfinite(v.loss) || !std::isfinite(v.grad_norm)) {
      absl::Status diverged = absl::InternalError(
          absl::StrCat("training diverged at step ", v.step, ": loss ", v.loss, ", grad norm ", v.grad_norm,
                       " (fp8 recipe ", recipe_name(spec_.fp8().recipe()),
                       "); lower train.lr or resume from an earlier checkpoint"));
      diverged.SetPayload(kDivergencePayload, absl::Cord(absl::StrCat(v.step)));
      return diverged;
    }
  }
  return absl::OkStatus();
}

absl::Status Trainer::settle_step_stats() {
  if (!step_stats_ || step_stats_->empty()) return absl::OkStatus();
  FP8_ASSIGN_OR_RETURN(std::vector<StepStats::StepValues> steps, step_stats_->read());
  // What a failed collective left behind is not a divergence.
  if (fsdp_) FP8_RETURN_IF_ERROR(fsdp_->health());
  last_read_ = steps.back();
  return check_finite(steps);
}

std::optional<StepStats::StepValues> Trainer::values_of(int64_t step) const {
  if (last_read_ && last_read_->step == step) return last_read_;
  return std::nullopt;
}

absl::StatusOr<double> Trainer::validation_loss() {
  if (!validation_) {
    return absl::FailedPreconditionError("no validation split: set data.val_fraction > 0 and train.eval_every > 0");
  }
  // Every rank evaluates its share of each batch; shares are equal, so the mean of the
  // ranks' means is the batch mean.
  std::array<double, 1> sum{0};
  for (int64_t b = 0; b < validation_->num_batches(); ++b) {
    validation_->batch(b, batch_);
    FP8_ASSIGN_OR_RETURN(float loss, model_->evaluate(batch_));
    sum[0] += loss;
  }
  if (fsdp_) FP8_RETURN_IF_ERROR(fsdp_->all_reduce(sum, collectives::ReduceOp::kSum));
  return sum[0] / static_cast<double>(validation_->num_batches() * world_size());
}

absl::StatusOr<std::filesystem::path> Trainer::save_checkpoint() {
  const std::string& dir = spec_.checkpoint().dir();
  if (dir.empty()) return absl::FailedPreconditionError("the job has no checkpoint.dir");
  // Never a checkpoint of a run that diverged since its last read.
  FP8_RETURN_IF_ERROR(settle_step_stats());
  if (tensor_parallel_) {
    const CollectiveTimeout::Relaxed relaxed = collective_timeout_->relaxed();
    return save_tensor_parallel_checkpoint();
  }
  if (fsdp_) {
    // A rank writing to slow storage keeps its peers waiting; the group's full timeout.
    const CollectiveTimeout::Relaxed relaxed = collective_timeout_->relaxed();
    return save_sharded_checkpoint();
  }
  const int64_t step = optimizer_->steps_taken();
  TrainStateRefs refs = state_refs();
  FP8_ASSIGN_OR_RETURN(checkpoint::CommittedCheckpoint saved,
                       checkpoint::save_single_process_checkpoint(
                           dir, step, [&](checkpoint::ShardWriter& w) { return write_train_state(w, refs); }));
  last_checkpoint_step_ = step;
  const int keep = spec_.checkpoint().keep();
  if (keep > 0) FP8_RETURN_IF_ERROR(checkpoint::prune_checkpoints(dir, keep).status());
  return saved.dir;
}

absl::StatusOr<std::filesystem::path> Trainer::save_sharded_checkpoint() {
  const std::string& dir = spec_.checkpoint().dir();
  const int64_t step = optimizer_->steps_taken();
  const int world = world_size();
  TrainStateRefs refs = state_refs();
  const absl::StatusOr<checkpoint::ShardInfo> mine = checkpoint::write_rank_shard(
      dir, step, rank(), world, [&](checkpoint::ShardWriter& w) { return write_train_state(w, refs); });
  // The marker only once every shard is durable; a rank that failed leaves the step
  // uncommitted, which resume never uses and retention later removes.
  const absl::Status written = agree(mine.ok(), step, absl::StrCat("writing checkpoint step ", step).c_str());
  FP8_RETURN_IF_ERROR(mine.status());
  FP8_RETURN_IF_ERROR(written);
  absl::Status committed;
  if (rank() == 0) {
    std::vector<checkpoint::ShardInfo> shards;
    for (int r = 0; r < world && committed.ok(); ++r) {
      absl::StatusOr<checkpoint::ShardInfo> info = checkpoint::read_shard_info(checkpoint::shard_path(dir, step, r, world));
      if (info.ok()) shards.push_back(*info);
      committed = info.status();
    }
    if (committed.ok()) committed = checkpoint::write_commit_marker(checkpoint::step_directory(dir, step), step, world, shards);
    const int keep = spec_.checkpoint().keep();
    if (committed.ok() && keep > 0) committed = checkpoint::prune_checkpoints(dir, keep).status();
  }
  // Nobody goes on (or reports the checkpoint) before rank 0 committed it.
  const absl::Status agreed = agree(committed.ok(), step, absl::StrCat("committing checkpoint step ", step).c_str());
  FP8_RETURN_IF_ERROR(committed);
  FP8_RETURN_IF_ERROR(agreed);
  last_checkpoint_step_ = step;
  return checkpoint::step_directory(dir, step);
}

// Every rank puts the split parameters and moments together (an all-gather each); rank 0
// writes them whole, as one process's checkpoint, which a job of any world size or mesh
// resumes from (each rank cutting its part again). The writer gathers each record as it
// writes it, holding one at a time; the others gather in the same order and drop them.
absl::StatusOr<std::filesystem::path> Trainer::save_tensor_parallel_checkpoint() {
  const std::string& dir = spec_.checkpoint().dir();
  const int64_t step = optimizer_->steps_taken();
  const auto& params = trained_->all();
  const std::vector<TensorShape> parts = fsdp_ ? fsdp_->full_shapes() : std::vector<TensorShape>{};
  WholeTensors whole;
  for (size_t i = 0; i < params.size(); ++i) {
    // The whole model's shape: this rank's part times the ranks along the split axis.
    TensorShape shape = fsdp_ ? parts.at(i) : params[i].shape;
    if (params[i].split.split()) shape.at(static_cast<size_t>(params[i].split.axis)) *= params[i].split.parts;
    whole.shapes.push_back(shape);
  }
  const std::vector<WholeRecord> records = whole_records(*trained_);
  size_t gathered = 0;
  // Under FSDP the shards of this rank's part come together first, across the data-parallel ranks.
  whole.source = [&](const WholeRecord& r) -> absl::StatusOr<std::vector<float>> {
    ++gathered;
    const Tensor& t = r.kind == WholeRecord::kValue    ? params[r.param].value
                      : r.kind == WholeRecord::kExpAvg ? optimizer_->first_moment(r.param)
                                                       : optimizer_->second_moment(r.param);
    if (!fsdp_) return tensor_parallel_->whole(t, params[r.param].split);
    FP8_ASSIGN_OR_RETURN(std::vector<float> part, fsdp_->gather_whole(t, r.param));
    return tensor_parallel_->whole(std::move(part), parts.at(r.param), params[r.param].split, model_->device());
  };
  absl::Status written;
  if (tensor_parallel_->rank() == 0 && rank() == 0) {
    TrainStateRefs refs = state_refs();
    refs.whole = &whole;
    written = checkpoint::save_single_process_checkpoint(dir, step, [&](checkpoint::ShardWriter& w) {
                return write_train_state(w, refs);
              }).status();
    const int keep = spec_.checkpoint().keep();
    if (written.ok() && keep > 0) written = checkpoint::prune_checkpoints(dir, keep).status();
  }
  // The other ranks' gathers, and the writer's it never reached (a write that failed): no
  // rank waits on a peer that stopped gathering.
  for (size_t i = gathered; i < records.size(); ++i) {
    const absl::Status s = whole.source(records[i]).status();
    if (!s.ok()) {
      if (written.ok()) written = s;
      break;
    }
  }
  // Nobody goes on (or reports the checkpoint) before rank 0 committed it.
  const absl::Status agreed = agree(written.ok(), step, absl::StrCat("writing checkpoint step ", step).c_str());
  FP8_RETURN_IF_ERROR(written);
  FP8_RETURN_IF_ERROR(agreed);
  last_checkpoint_step_ = step;
  return checkpoint::step_directory(dir, step);
}

absl::Status Trainer::maybe_checkpoint(int64_t step, bool force, TrainObserver& observer, TrainSummary& summary) {
  if (spec_.checkpoint().dir().empty() || step == last_checkpoint_step_) return absl::OkStatus();
  const int64_t every = spec_.checkpoint().every();
  if (!force && (every <= 0 || step % every != 0)) return absl::OkStatus();
  FP8_ASSIGN_OR_RETURN(std::filesystem::path dir, save_checkpoint());
  summary.last_checkpoint = dir;
  observer.on_checkpoint(step, dir);
  return report_amax_histories(step, observer);
}

bool Trainer::measures_step(int64_t step, int64_t first_step, const RunControl& control) const {
  const v1::TrainSpec& tr = spec_.train();
  return step % tr.log_every() == 0 || step == first_step || step == tr.steps() || step == control.stop_after_step;
}

absl::Status Trainer::report_amax_histories(int64_t step, TrainObserver& observer) {
  FP8_ASSIGN_OR_RETURN(std::vector<AmaxHistoryRecord> histories, collect_amax_histories(*model_));
  if (!histories.empty()) observer.on_amax_histories(step, histories);
  return absl::OkStatus();
}

absl::StatusOr<TrainSummary> Trainer::run(TrainObserver& observer, const RunControl& control) {
  const v1::TrainSpec& tr = spec_.train();
  const int64_t tokens_per_step = tr.batch_size() * spec_.data().seq_len() * world_size();
  TrainSummary summary;
  summary.first_step = optimizer_->steps_taken() + 1;
  summary.last_step = optimizer_->steps_taken();

  TrainStart start;
  start.job = spec_.name();
  start.model = model_->config().describe();
  start.device = model_->device().name();
  start.fp8 = fp8_summary();
  start.parameters = fsdp_ ? fsdp_->parameter_count() : model_->parameters().element_count();
  start.world_size = world_size();
  start.sharding = sharding_summary();
  start.first_step = summary.first_step;
  start.total_steps = tr.steps();
  start.tokens_per_step = tokens_per_step;
  start.resumed_from = resumed_from_;
  observer.on_start(start);

  const Clock::time_point run_start = Clock::now();
  double interval_seconds = 0, interval_data_ms = 0;
  std::optional<StepComm> interval_comm;
  int64_t interval_steps = 0, interval_peak_memory = 0;
  for (int64_t step = summary.first_step; step <= tr.steps(); ++step) {
    // Saturation and underflow cost a pass over each cast tensor, so only steps that will
    // report are measured. Whether a step reports is known only after it ran (an
    // evaluation or a stop signal can add a report), so this is the foreseeable part:
    // steps that report only because they evaluate or were stopped by a signal report
    // their casts as unmeasured (ratios 0). Under FSDP every rank decides alike.
    set_cast_measuring(*model_, measures_step(step, summary.first_step, control));
    observer.on_step_start(step);
    const Clock::time_point step_start = Clock::now();
    collective_timeout_->begin_step();
    bool stop_everywhere = false;
    FP8_ASSIGN_OR_RETURN(StepReport report, train_step(control, &stop_everywhere));
    set_cast_measuring(*model_, false);  // an evaluation after the step need not count
    const bool stopping = stop_everywhere || step == control.stop_after_step;
    const bool last = step == tr.steps() || stopping;
    const bool evaluates = validation_ && (step % tr.eval_every() == 0 || last);
    const bool reports = step % tr.log_every() == 0 || step == summary.first_step || last || evaluates;
    // A reporting step reads its loss and grad norm (with those of the steps since the last
    // read, checked for divergence): the one wait for the device in a report interval, so
    // the interval's time is the device's too.
    bool loss_known = false;
    if (reports) {
      FP8_RETURN_IF_ERROR(settle_step_stats());
      if (const std::optional<StepStats::StepValues> values = values_of(step)) {
        report.loss = values->loss;
        report.grad_norm = values->grad_norm;
        loss_known = true;
      }
    }
    const double step_seconds = seconds_since(step_start);
    collective_timeout_->end_step(absl::Seconds(step_seconds));
    interval_seconds += step_seconds;
    interval_data_ms += report.data_ms;
    interval_peak_memory = std::max(interval_peak_memory, report.peak_memory_bytes);
    if (report.comm) {
      if (!interval_comm) interval_comm.emplace();
      *interval_comm += *report.comm;
    }
    ++interval_steps;
    summary.last_step = step;
    summary.tokens += tokens_per_step;
    if (loss_known) {
      if (!summary.first_loss) summary.first_loss = report.loss;
      summary.last_loss = report.loss;
    }

    // Read before the evaluation, whose casts would replace the training step's.
    std::vector<CastNumericsRecord> casts;
    if (reports) {
      FP8_ASSIGN_OR_RETURN(casts, collect_cast_numerics(*model_));
    }
    if (evaluates) {
      const CollectiveTimeout::Relaxed relaxed = collective_timeout_->relaxed();
      FP8_ASSIGN_OR_RETURN(double val, validation_loss());
      report.val_loss = val;
      summary.last_val_loss = val;
      if (!summary.best_val_loss || val < *summary.best_val_loss) summary.best_val_loss = val;
    }
    if (reports) {
      report.step_ms = 1e3 * interval_seconds / static_cast<double>(interval_steps);
      report.data_ms = interval_data_ms / static_cast<double>(interval_steps);
      report.comm = interval_comm;
      if (report.comm) *report.comm /= static_cast<double>(interval_steps);
      report.tokens_per_second = static_cast<double>(interval_steps * tokens_per_step) / interval_seconds;
      report.peak_memory_bytes = interval_peak_memory;
      observer.on_step(report);
      if (!casts.empty()) observer.on_cast_numerics(step, casts);
      FP8_RETURN_IF_ERROR(report_amax_histories(step, observer));
      interval_seconds = 0;
      interval_data_ms = 0;
      interval_comm.reset();
      interval_steps = 0;
      interval_peak_memory = 0;
    }
    FP8_RETURN_IF_ERROR(maybe_checkpoint(step, /*force=*/last, observer, summary));
    if (stopping) {
      summary.stopped_early = step < tr.steps();
      break;
    }
  }
  summary.seconds = seconds_since(run_start);
  observer.on_finish(summary);
  return summary;
}

}  // namespace fp8::engine
