// A Llama-style decoder trained with fp8 linear layers:
//   tokens → embedding → N × TransformerBlock → RMSNorm → output projection → logits
// fp32 master weights, fp32 compute; the linears' GEMMs run per the job's fp8 section.
//
// One object holds the parameters and their gradients, one Float8Linear per linear layer
// (with its fp8 scaling state), and the activations of the last micro-batch.
#pragma once

#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "fp8/v1/job.pb.h"
#include "worker/engine/data/token_batch.h"
#include "worker/engine/model/activations.h"
#include "worker/engine/model/linear_unit.h"
#include "worker/engine/model/llama_config.h"
#include "worker/engine/model/parameter_hooks.h"
#include "worker/engine/model/parameters.h"
#include "worker/engine/model/split_weight_casts.h"
#include "worker/engine/model/transformer_block.h"

namespace fp8::engine {

class LlamaModel {
 public:
  // Parameters initialised from `seed` (init_parameters), or, with kDeferred, shaped but
  // neither allocated nor initialised (FSDP makes each rank's rows: fsdp_model.h). Fails on
  // a device without model kernels, or for an fp8 config a layer cannot take.
  // With `tensor_parallel` (not owned; must outlive the model), this rank's part of a model
  // split across its ranks (tensor_parallel.h), config.tensor_parallel set to their number.
  static absl::StatusOr<std::unique_ptr<LlamaModel>> create(const Device& device, const LlamaConfig& config,
                                                            const v1::Fp8Spec& fp8, uint64_t seed,
                                                            ParameterStorage storage = ParameterStorage::kAllocated,
                                                            TensorParallelComm* tensor_parallel = nullptr);

  const LlamaConfig& config() const { return config_; }
  // The seed of the parameters' initial values (initial_values).
  uint64_t seed() const { return seed_; }
  const Device& device() const { return device_; }
  ParameterSet& parameters() { return params_; }
  const ParameterSet& parameters() const { return params_; }
  // Every linear layer: block by block (wq, wk, wv, wo, w1, w3, w2), then output.
  const std::vector<const LinearUnit*>& linears() const { return linears_; }
  // The same, for FSDP to point a linear at its gathered fp8 weight.
  const std::vector<LinearUnit*>& mutable_linears() { return mutable_linears_; }

  // FSDP's hooks (parameter_hooks.h), or null for a single process; not owned.
  void set_parameter_hooks(ParameterHooks* hooks) { hooks_ = hooks; }

  // Forward and backward of one micro-batch; returns its mean loss. Parameter gradients
  // ACCUMULATE the gradient of `grad_scale · loss` (1 / grad_accum averages micro-batches).
  absl::StatusOr<float> forward_backward(const data::TokenBatch& batch, float grad_scale);
  // The same without reading the loss: the micro-batch's mean loss is copied, queued, to
  // `loss_out` (one float of device memory). A step of several micro-batches reads all of
  // their losses at its end, so the host never waits for the device between them.
  absl::Status queue_forward_backward(const data::TokenBatch& batch, float grad_scale, float* loss_out);
  // The mean loss of a batch without gradients or fp8 scaling updates.
  absl::StatusOr<float> evaluate(const data::TokenBatch& batch);
  // The batch's logits, [rows * seq_len, vocab_size] row-major, the same way (targets are
  // read only for the loss, which is computed but not returned).
  absl::StatusOr<std::vector<float>> logits(const data::TokenBatch& batch);
  // Ends an optimizer step for every Float8Linear (delayed scaling records the step's
  // amaxes and derives next step's scales). Call after the last micro-batch's backward.
  // One host read for the whole model (finish_delayed_step).
  absl::Status finish_step();

  // ---- weight row amaxes from the optimizer ----------------------------------------------
  // A weight's dynamic fp8 casts take its row amaxes from the optimizer's update, which
  // reads every weight anyway, instead of a pass of their own over the fp32 weight.
  struct WeightRowAmaxes {
    Parameter* weight;
    RowAmaxes out;  // [out_features] fp32, owned by the model
  };
  // The weights whose casts take them (LinearUnit::reads_weight_row_amax), and where an
  // update should write each one's (AdamW::write_row_amaxes).
  absl::StatusOr<std::vector<WeightRowAmaxes>> weight_row_amax_outputs();
  // Whether those buffers hold the row amaxes of the weights as they are now. Set true
  // only right after an update that wrote them, false whenever weights change any other
  // way: a stale amax below the weight's would clip its cast. While true, every forward
  // hands them to the casts; false (the default) casts read the weights themselves.
  void set_weight_row_amaxes_current(bool current);
  // The weights changed (set_weight_row_amaxes_current says so too): under tensor
  // parallelism the split weights' reduced amaxes are made again before their next use.
  void split_weights_changed() {
    for (SplitWeightAmaxes& b : split_weight_amaxes_by_block_) b.stale = true;
  }

 private:
  LlamaModel(const Device& device, ModelOps& ops, const LlamaConfig& config, uint64_t seed)
      : device_(device), ops_(ops), config_(config), seed_(seed) {}
  absl::Status build(const v1::Fp8Spec& fp8, ParameterStorage storage);
  // Under tensor parallelism: the split weights' row amaxes, reduced across the ranks, for
  // their casts (tensor_parallel.h), or their casts (SplitWeightCasts); per block, after
  // the weights changed.
  absl::Status prepare_split_weight_amaxes();
  absl::Status refresh_split_weight_amaxes(size_t block);
  // The first of this rank's tokens in the micro-batch (sequence parallelism), else 0.
  int64_t local_token_offset(const Activations& a) const;
  // Activations shaped for `batch` (rebuilt when the shape or the mode changes).
  absl::StatusOr<Activations*> activations_for(const data::TokenBatch& batch, bool for_backward);
  // Queues the forward; the loss stays in device memory (read_loss) so that a training
  // step queues its backward before the host waits for anything.
  absl::StatusOr<Activations*> forward(const data::TokenBatch& batch, bool training);
  static absl::StatusOr<float> read_loss(const Activations& a);
  // Queues the forward and backward of one micro-batch (forward_backward without the read).
  absl::Status queue_training_pass(const data::TokenBatch& batch, float grad_scale);
  // hooks_ calls that do nothing without hooks.
  absl::Status hook_before_forward(int unit) { return hooks_ ? hooks_->before_forward(unit) : absl::OkStatus(); }
  absl::Status hook_after_forward(int unit, bool training) {
    return hooks_ ? hooks_->after_forward(unit, training) : absl::OkStatus();
  }
  absl::Status hook_before_backward(int unit) { return hooks_ ? hooks_->before_backward(unit) : absl::OkStatus(); }
  absl::Status hook_after_backward(int unit) { return hooks_ ? hooks_->after_backward(unit) : absl::OkStatus(); }

  const Device& device_;
  ModelOps& ops_;
  LlamaConfig config_;
  uint64_t seed_;
  ParameterSet params_;
  Parameter* embeddings_ = nullptr;
  Parameter* final_norm_ = nullptr;
  std::vector<TransformerBlock> blocks_;
  LinearUnit output_;
  std::vector<const LinearUnit*> linears_;
  std::vector<LinearUnit*> mutable_linears_;
  ParameterHooks* hooks_ = nullptr;
  TensorParallelComm* tp_ = nullptr;
  // Per block: its split weights whose casts scale over rows, with where their row amaxes
  // lie in split_weight_amaxes_ (the block's are contiguous), and its column-parallel
  // weights cast per row or column; stale until refreshed after the weights last changed.
  // Per block, because under FSDP a block's weights exist only while it runs.
  struct SplitWeightAmaxes {
    std::vector<std::pair<LinearUnit*, int64_t>> units;
    int64_t offset = 0, count = 0;
    // The block's column-parallel weights cast per row or column, cast here (null: none),
    // made at the first refresh from `cast_here`, less those that FSDP's fp8 all-gather
    // casts with the whole weight's scales already (it sets gathered_fp8 on creation).
    std::vector<LinearUnit*> cast_here;
    std::unique_ptr<SplitWeightCasts> casts;
    bool stale = true;
  };
  std::vector<SplitWeightAmaxes> split_weight_amaxes_by_block_;
  Tensor split_weight_amaxes_;
  std::optional<Activations> train_acts_, eval_acts_;
  Tensor delayed_amaxes_;  // finish_step()'s packed amaxes, reused step to step
  // weight_row_amax_outputs()'s buffers, one per unit of mutable_linears_ that reads them.
  std::vector<std::pair<LinearUnit*, Tensor>> weight_row_amaxes_;
};

}  // namespace fp8::engine
