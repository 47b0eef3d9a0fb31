// The training loop of one process: a job spec in, a trained model and checkpoints out.
//
//   Trainer::create(spec, device)      load the corpus, build the model (model.init_from's
//                                      weights when given: init_from.h), optimizer, data
//   trainer->resume(observer)          optional: continue from the newest good checkpoint
//   trainer->run(observer, control)    train to the job's last step (or until stopped)
//
// One optimizer step: zero gradients; grad_accum micro-batches of forward + backward
// (each loss scaled by 1 / grad_accum); finish the fp8 step (delayed scaling); clip the
// global grad norm; AdamW at the scheduled learning rate. Every eval_every steps the
// validation loss; every checkpoint.every steps (and at the end) a checkpoint.
//
// Reports (observer.on_step) come every log_every steps, at the first and the last step,
// and with each evaluation; each is followed by on_cast_numerics: every fp8 cast's amax,
// scale, range use and saturation / underflow ratios for that step. The ratios take a
// counting pass per cast, so only steps foreseen to report are measured (run()).
//
// Deterministic: the same spec and thread count give the same bits, and a run stopped
// after a checkpoint and resumed gives the bits of a run that never stopped.
//
// Tensor parallelism (parallel.tensor > 1): the group's ranks split the model instead
// (model/tensor_parallel.h), read the same batches, and sum the split parameters' squared
// gradients and their stop votes across the group. Their checkpoints hold the whole model,
// as one process's do (save_tensor_parallel_checkpoint), so any job resumes from them.
//
// Distributed: given a process group, the trainer is one rank of an FSDP job
// (fsdp/fsdp_model.h). Each rank reads its share of every global batch (batcher.h), the
// loss is scaled by 1 / (grad_accum x world_size) so that reduce-scattered gradients are
// means, and one all-reduce per step carries the loss, the squared grad norm and whether
// any rank was asked to stop (so that all ranks stop after the same step). Checkpoints are
// sharded: every rank writes its shard, rank 0 commits once all of them are durable. A
// step's collectives wait for a peer as long as train.collective_timeout_seconds says
// (collective_timeout.h).
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "fp8/v1/job.pb.h"
#include "worker/engine/data/batcher.h"
#include "worker/engine/data/corpus.h"
#include "worker/engine/data/validation_set.h"
#include "worker/engine/collectives/process_group.h"
#include "worker/engine/fsdp/fsdp_model.h"
#include "worker/engine/lr_schedule.h"
#include "worker/engine/model/llama.h"
#include "worker/engine/optim/adamw.h"
#include "worker/engine/train/collective_timeout.h"
#include "worker/engine/train/mesh.h"
#include "worker/engine/train/step_stats.h"
#include "worker/engine/train/tensor_parallel_group.h"
#include "worker/engine/train/train_observer.h"
#include "worker/engine/train/train_state_io.h"

namespace fp8::engine {

struct RunControl {
  // Set from another thread or a signal handler: the loop finishes the step in flight,
  // writes a checkpoint (when the job has a checkpoint dir) and returns. Under FSDP a stop
  // on any rank stops every rank after the same step.
  const std::atomic<bool>* stop = nullptr;
  // Stop after this step (checkpointing as above); 0 runs to train.steps.
  int64_t stop_after_step = 0;
};

// How the engine trains, where the job spec leaves it open (same results either way).
struct TrainerOptions {
  // Under FSDP: how a unit's parameters travel (fsdp_model.h).
  fsdp::UnitCollectives collectives = fsdp::UnitCollectives::kPacked;
  // data.path's files when the caller found them (a pattern's matches, opened beneath the
  // data root); empty: the trainer reads data.path itself.
  std::vector<std::string> data_files;
  // model.init_from was opened beneath a root: a symbolic link among its files is refused
  // (init_from.h).
  bool init_from_follow_links = true;
  // How the trainer forms the groups of a mesh (mesh.h) when the job has data parallelism
  // beside tensor parallelism (resources.world_size > parallel.tensor > 1): the caller
  // knows the rendezvous and the backend. Unused otherwise.
  MakeProcessGroup make_group;
};

// Whether a run failed because its loss or grad norm stopped being finite: a bit-exact
// trainer repeats that from the same checkpoint, so it is not worth a restart.
bool is_divergence(const absl::Status& s);

class Trainer {
 public:
  // `spec` must be resolved and valid (jobspec::load_job_spec_file does both).
  // With `group` (not owned; must outlive the trainer), this process is rank
  // group->rank() of an FSDP job of group->size() ranks; resources.world_size must match.
  static absl::StatusOr<std::unique_ptr<Trainer>> create(const v1::JobSpec& spec, const Device& device,
                                                         collectives::ProcessGroup* group = nullptr,
                                                         const TrainerOptions& options = {});

  // Loads the newest good checkpoint under checkpoint.dir, reporting skipped ones through
  // observer.on_warning. Returns the step it resumed from; 0 (and nothing loaded) when
  // there is no checkpoint. A damaged checkpoint is never loaded. One written by another
  // number of ranks (or by one process) is cut anew for this job's ranks, which
  // observer.on_warning also says.
  absl::StatusOr<int64_t> resume(TrainObserver& observer);

  absl::StatusOr<TrainSummary> run(TrainObserver& observer, const RunControl& control = {});

  // Writes a checkpoint of the current state now; returns its directory.
  absl::StatusOr<std::filesystem::path> save_checkpoint();
  // Mean loss over the validation batches; FailedPrecondition without a validation split.
  absl::StatusOr<double> validation_loss();

  int64_t steps_done() const { return optimizer_->steps_taken(); }
  LlamaModel& model() { return *model_; }
  // What the optimizer trains: the model's parameters, or under FSDP this rank's shards.
  ParameterSet& trained_parameters() { return *trained_; }
  // Null for a single process.
  fsdp::FsdpModel* fsdp() { return fsdp_.get(); }
  // This rank among the data-parallel ranks (FSDP's), and their number: tensor-parallel
  // ranks read the same data and count as one.
  int rank() const { return fsdp_ ? fsdp_->rank() : 0; }
  int world_size() const { return fsdp_ ? fsdp_->world_size() : 1; }
  // The tensor-parallel ranks' number (1 without tensor parallelism).
  int tensor_parallel() const { return tensor_parallel_ ? tensor_parallel_->size() : 1; }
  const v1::JobSpec& spec() const { return spec_; }
  // "tensorwise: 14 of 15 linears in fp8 (high precision: output, excluded by ...)".
  std::string fp8_summary() const;

 private:
  Trainer() = default;
  // One optimizer step; returns its report without timing and validation filled in.
  // Sets *stop_everywhere when a stop was requested (on any rank, under FSDP).
  absl::StatusOr<StepReport> train_step(const RunControl& control, bool* stop_everywhere);
  // Reads the steps' values kept on the device since the last read (one wait; under FSDP
  // every rank reads at the same steps, so all see the same) and fails naming the first
  // that diverged. Keeps the last step's values (last_read_).
  absl::Status settle_step_stats();
  // The values of `step` if the last read included it (settle first).
  std::optional<StepStats::StepValues> values_of(int64_t step) const;
  // InternalError naming the first step whose loss or grad norm is not finite.
  absl::Status check_finite(const std::vector<StepStats::StepValues>& steps) const;
  absl::Status maybe_checkpoint(int64_t step, bool force, TrainObserver& observer, TrainSummary& summary);
  absl::Status report_amax_histories(int64_t step, TrainObserver& observer);
  // Whether `step` is sure to report, so that its casts are measured while it runs (the
  // report is decided after the step; see run()).
  bool measures_step(int64_t step, int64_t first_step, const RunControl& control) const;
  absl::StatusOr<std::filesystem::path> save_sharded_checkpoint();
  absl::StatusOr<std::filesystem::path> save_tensor_parallel_checkpoint();
  // This rank's part of `found` into the model, optimizer and batcher.
  absl::Status load_checkpoint(const checkpoint::CommittedCheckpoint& found);
  // Each trained parameter's padding rows (Parameter::padding_rows), in trained order.
  std::vector<int64_t> padding_rows() const;
  // Whether `reader` holds a padded parameter without its padding rows (a checkpoint
  // written before the vocabulary was padded to a multiple of 64).
  bool written_without_padding(const checkpoint::ShardReader& reader) const;
  // Under FSDP: fails on every rank unless every rank's `ok` holds and all report the same
  // `step` (what they resumed from, or checkpointed).
  absl::Status agree(bool ok, int64_t step, const char* what);
  TrainStateRefs state_refs();
  std::string sharding_summary() const;

  v1::JobSpec spec_;
  std::optional<data::Corpus> corpus_;
  std::optional<data::Batcher> batcher_;
  std::optional<data::ValidationSet> validation_;
  std::optional<LrSchedule> schedule_;
  // Beside data parallelism: this rank's two groups (the caller's group is the world's).
  MeshGroups mesh_;
  // Under tensor parallelism (parallel.tensor > 1): the group the model is split across.
  // Before model_, which holds a pointer to it.
  std::unique_ptr<TensorParallelGroup> tensor_parallel_;
  std::unique_ptr<LlamaModel> model_;
  std::unique_ptr<fsdp::FsdpModel> fsdp_;  // after model_: unhooks from it first
  ParameterSet* trained_ = nullptr;
  std::optional<AdamW> optimizer_;
  data::TokenBatch batch_;  // reused between micro-batches
  std::optional<StepStats> step_stats_;  // the steps' losses and norms, read when reporting
  std::optional<StepStats::StepValues> last_read_;
  // Under FSDP a stop (a signal, a cancel) reaches the ranks at different steps: each rank
  // votes with its step's values, the ranks sum the votes on the device, and each reads
  // the sum of the step before (this read, queued then) once the next step is queued.
  std::unique_ptr<QueuedRead> pending_votes_;
  std::optional<std::filesystem::path> resumed_from_;
  int64_t last_checkpoint_step_ = -1;
  std::optional<CollectiveTimeout> collective_timeout_;  // set by create()
};

}  // namespace fp8::engine
