#include "worker/engine/train/trainer.h"

#include <chrono>
#include <cmath>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "worker/engine/checkpoint/discovery.h"
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

}  // namespace

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::create(const v1::JobSpec& spec, const Device& device) {
  std::unique_ptr<Trainer> t(new Trainer());
  t->spec_ = spec;
  const v1::DataSpec& d = spec.data();
  const v1::TrainSpec& tr = spec.train();

  FP8_ASSIGN_OR_RETURN(t->corpus_, data::Corpus::Load(d.path(), {d.seq_len(), d.val_fraction()}));
  data::BatcherOptions batching{d.seq_len(), tr.batch_size(), tr.grad_accum(), d.seed(), 0, 1};
  FP8_ASSIGN_OR_RETURN(t->batcher_, data::Batcher::Create(*t->corpus_, batching));
  if (tr.eval_every() > 0 && d.val_fraction() > 0) {
    const data::ValidationOptions eval{d.seq_len(), tr.batch_size(), tr.eval_batches(), 0, 1};
    FP8_ASSIGN_OR_RETURN(t->validation_, data::ValidationSet::Create(*t->corpus_, eval));
  }
  const LrScheduleOptions lr{tr.lr(), tr.min_lr(), tr.warmup_steps(), tr.steps(), decay_of(tr.schedule())};
  FP8_ASSIGN_OR_RETURN(t->schedule_, LrSchedule::Create(lr));

  FP8_ASSIGN_OR_RETURN(LlamaConfig config, llama_config_from_spec(spec.model()));
  FP8_ASSIGN_OR_RETURN(t->model_, LlamaModel::create(device, config, spec.fp8(), tr.seed()));
  FP8_ASSIGN_OR_RETURN(ModelOps * ops, device.model_ops());
  AdamWHyperparams hyper;
  hyper.beta1 = static_cast<float>(tr.beta1());
  hyper.beta2 = static_cast<float>(tr.beta2());
  hyper.eps = static_cast<float>(tr.eps());
  hyper.weight_decay = static_cast<float>(tr.weight_decay());
  FP8_ASSIGN_OR_RETURN(t->optimizer_, AdamW::create(*ops, t->model_->parameters(), hyper));
  return t;
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

absl::StatusOr<int64_t> Trainer::resume(TrainObserver& observer) {
  const std::string& dir = spec_.checkpoint().dir();
  if (dir.empty()) return 0;
  FP8_ASSIGN_OR_RETURN(checkpoint::ResumePoint point, checkpoint::FindLatestGood(dir, 1));
  for (const std::string& w : point.warnings) observer.on_warning(w);
  if (!point.checkpoint) return 0;
  FP8_ASSIGN_OR_RETURN(checkpoint::ShardReader reader, checkpoint::OpenCommittedShard(*point.checkpoint, 0));
  FP8_RETURN_IF_ERROR(read_train_state(reader, {&spec_, model_.get(), &*optimizer_, &*batcher_}));
  if (optimizer_->steps_taken() != point.checkpoint->step()) {
    return absl::DataLossError(absl::StrCat(reader.path().string(), ": records step ", optimizer_->steps_taken(),
                                            " but sits in the directory of step ", point.checkpoint->step()));
  }
  resumed_from_ = point.checkpoint->dir;
  last_checkpoint_step_ = point.checkpoint->step();
  return point.checkpoint->step();
}

absl::StatusOr<StepReport> Trainer::train_step() {
  const int64_t step = optimizer_->steps_taken() + 1;
  const int64_t micro_batches = spec_.train().grad_accum();
  FP8_RETURN_IF_ERROR(model_->parameters().zero_grads());
  double loss_sum = 0;
  for (int64_t i = 0; i < micro_batches; ++i) {
    batcher_->NextMicroBatch(batch_);
    FP8_ASSIGN_OR_RETURN(float loss, model_->forward_backward(batch_, 1.0f / static_cast<float>(micro_batches)));
    loss_sum += loss;
  }
  FP8_RETURN_IF_ERROR(model_->finish_step());
  FP8_ASSIGN_OR_RETURN(ModelOps * ops, model_->device().model_ops());
  FP8_ASSIGN_OR_RETURN(double grad_norm, clip_grad_norm(*ops, model_->parameters(), spec_.train().grad_clip()));
  const double loss = loss_sum / static_cast<double>(micro_batches);
  if (!std::isfinite(loss) || !std::isfinite(grad_norm)) {
    return absl::InternalError(absl::StrCat("training diverged at step ", step, ": loss ", loss, ", grad norm ",
                                            grad_norm, " (fp8 recipe ", recipe_name(spec_.fp8().recipe()),
                                            "); lower train.lr or resume from an earlier checkpoint"));
  }
  const double lr = schedule_->LrAt(step);
  FP8_RETURN_IF_ERROR(optimizer_->step(static_cast<float>(lr)));
  StepReport r;
  r.step = step;
  r.total_steps = spec_.train().steps();
  r.loss = loss;
  r.lr = lr;
  r.grad_norm = grad_norm;
  return r;
}

absl::StatusOr<double> Trainer::validation_loss() {
  if (!validation_) {
    return absl::FailedPreconditionError("no validation split: set data.val_fraction > 0 and train.eval_every > 0");
  }
  double sum = 0;
  for (int64_t b = 0; b < validation_->num_batches(); ++b) {
    validation_->Batch(b, batch_);
    FP8_ASSIGN_OR_RETURN(float loss, model_->evaluate(batch_));
    sum += loss;
  }
  return sum / static_cast<double>(validation_->num_batches());
}

absl::StatusOr<std::filesystem::path> Trainer::save_checkpoint() {
  const std::string& dir = spec_.checkpoint().dir();
  if (dir.empty()) return absl::FailedPreconditionError("the job has no checkpoint.dir");
  const int64_t step = optimizer_->steps_taken();
  TrainStateRefs refs{&spec_, model_.get(), &*optimizer_, &*batcher_};
  FP8_ASSIGN_OR_RETURN(checkpoint::CommittedCheckpoint saved,
                       checkpoint::SaveSingleProcessCheckpoint(
                           dir, step, [&](checkpoint::ShardWriter& w) { return write_train_state(w, refs); }));
  last_checkpoint_step_ = step;
  const int keep = spec_.checkpoint().keep();
  if (keep > 0) FP8_RETURN_IF_ERROR(checkpoint::PruneCheckpoints(dir, keep).status());
  return saved.dir;
}

absl::Status Trainer::maybe_checkpoint(int64_t step, bool force, TrainObserver& observer, TrainSummary& summary) {
  if (spec_.checkpoint().dir().empty() || step == last_checkpoint_step_) return absl::OkStatus();
  const int64_t every = spec_.checkpoint().every();
  if (!force && (every <= 0 || step % every != 0)) return absl::OkStatus();
  FP8_ASSIGN_OR_RETURN(std::filesystem::path dir, save_checkpoint());
  summary.last_checkpoint = dir;
  observer.on_checkpoint(step, dir);
  return absl::OkStatus();
}

absl::StatusOr<TrainSummary> Trainer::run(TrainObserver& observer, const RunControl& control) {
  const v1::TrainSpec& tr = spec_.train();
  const int64_t tokens_per_step = tr.batch_size() * spec_.data().seq_len();
  TrainSummary summary;
  summary.first_step = optimizer_->steps_taken() + 1;
  summary.last_step = optimizer_->steps_taken();

  TrainStart start;
  start.job = spec_.name();
  start.model = model_->config().describe();
  start.device = model_->device().name();
  start.fp8 = fp8_summary();
  start.parameters = model_->parameters().element_count();
  start.first_step = summary.first_step;
  start.total_steps = tr.steps();
  start.tokens_per_step = tokens_per_step;
  start.resumed_from = resumed_from_;
  observer.on_start(start);

  const Clock::time_point run_start = Clock::now();
  double interval_seconds = 0;
  int64_t interval_steps = 0;
  for (int64_t step = summary.first_step; step <= tr.steps(); ++step) {
    const Clock::time_point step_start = Clock::now();
    FP8_ASSIGN_OR_RETURN(StepReport report, train_step());
    interval_seconds += seconds_since(step_start);
    ++interval_steps;
    summary.last_step = step;
    summary.tokens += tokens_per_step;
    if (!summary.first_loss) summary.first_loss = report.loss;
    summary.last_loss = report.loss;

    const bool stopping = (control.stop != nullptr && control.stop->load()) || step == control.stop_after_step;
    const bool last = step == tr.steps() || stopping;
    if (validation_ && (step % tr.eval_every() == 0 || last)) {
      FP8_ASSIGN_OR_RETURN(double val, validation_loss());
      report.val_loss = val;
      summary.last_val_loss = val;
      if (!summary.best_val_loss || val < *summary.best_val_loss) summary.best_val_loss = val;
    }
    if (step % tr.log_every() == 0 || step == summary.first_step || last || report.val_loss) {
      report.step_ms = 1e3 * interval_seconds / static_cast<double>(interval_steps);
      report.tokens_per_second = static_cast<double>(interval_steps * tokens_per_step) / interval_seconds;
      observer.on_step(report);
      interval_seconds = 0;
      interval_steps = 0;
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
