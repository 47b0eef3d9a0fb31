// FSDP for the Llama model: every parameter sharded along dim 0 across the ranks of a
// process group (shard_layout.h), gathered unit by unit just before use and freed right
// after, with weight gradients reduce-scattered back to the shards. docs/architecture.md,
// "One training step", describes the step this takes part in:
//
//   - Shards (shards()) hold the fp32 masters; the optimizer and checkpoints work on them.
//     The model's own Parameter tensors exist only while their unit is gathered.
//   - Units are the decoder blocks plus the root (embeddings, final norm, output). Forward:
//     the root, then block by block, each block freed after its forward. Backward: each
//     block gathered again, its gradients reduce-scattered (summed: the trainer scales the
//     loss by 1 / (grad_accum x world_size), so the sum is the mean) and added to the
//     shard gradients. With prefetching the next unit's gather is queued on the
//     communication stream (comm_stream.h) while the current one computes: on GPUs NCCL's
//     stream, ordered with the compute stream by events, so the host waits for nothing.
//   - A unit's parameters travel in one call of the group each way: packed into one flat
//     collective, or one collective a parameter grouped (UnitCollectives, below).
//   - A step's losses, stop votes and gradient sum of squares are summed across ranks on
//     the device (reduce_step_values); the trainer reads them when it reports.
//   - fp8 all-gather: a linear whose weight both GEMMs that read it take in fp8
//     (Float8LinearNeeds::fp8_weight: every recipe but none) sends e4m3 codes, one byte per
//     element: each rank casts its shard with the whole weight's scales (per tensor, row,
//     column or 128x128 block, as the recipe casts the weight) and the layer uses the
//     gathered codes as they are. Where both GEMMs read one cast (tensorwise, blockwise) the
//     backward transposes the gathered codes (exact; a block grid transposes with them);
//     where the grad_input GEMM reads a cast of its own (the rowwise recipes: columns, or
//     one tensorwise scale), those codes travel too, in the backward's gather only, so each
//     pass moves one byte an element (Section, in fsdp_model.cc). All the weights' scales
//     cost ONE all-reduce(MAX) of their packed amaxes per step, after the optimizer changed
//     the shards: Fp8WeightScales (float8/weight_scales.h) computes amaxes and scales; this
//     class gathers. Other weights (layers kept in high precision, a tied output
//     projection) gather in fp32 (or bf16, param_dtype).
//   - Delayed scaling: finish_step() reduces every amax of the step in ONE
//     all-reduce(MAX), so histories and scales evolve identically on every rank.
//
// Equal to a single process: the weight codes are the bits the layer would have cast from
// the gathered fp32 weight, so fp8 all-gather on and off train identically.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/engine/collectives/process_group.h"
#include "worker/engine/float8/weight_scales.h"
#include "worker/engine/fsdp/comm_counters.h"
#include "worker/engine/fsdp/comm_stream.h"
#include "worker/engine/fsdp/shard_layout.h"
#include "worker/engine/model/llama.h"
#include "worker/engine/model/parameter_hooks.h"

namespace fp8::engine::fsdp {

// How a unit's parameters travel (FsdpModel):
//   kPacked        one flat all-gather (reduce-scatter) a unit, whose buffer holds every
//                  rank's shards one after another, so that each parameter is copied out
//                  of it after a gather (its gradient into it before a reduce-scatter);
//   kPerParameter  one all-gather (reduce-scatter) a parameter, all of a unit's in one call
//                  of the group (ProcessGroup::all_gather_parts), straight into the gathered
//                  parameter (out of its gradient), with nothing to copy.
// kPerParameter is meant for NCCL, which launches a call's parts as one group (Gloo pays a
// round trip a collective); it becomes NCCL's default once it has run and been timed on
// GPUs (the tests run every FSDP case both ways).
enum class UnitCollectives { kPacked, kPerParameter };
// "packed" or "per_parameter"; InvalidArgument naming `where` and the value otherwise.
absl::StatusOr<UnitCollectives> parse_unit_collectives(std::string_view text, std::string_view where);

struct FsdpOptions {
  bool all_gather_fp8 = true;  // fp8.all_gather_fp8
  bool prefetch = true;        // gather the next unit while this one computes
  UnitCollectives collectives = UnitCollectives::kPacked;
  // What travels, as FSDP2's MixedPrecisionPolicy: kFloat32 or kBFloat16 for the parameters
  // not gathered in fp8 (fsdp.param_dtype: the layers compute with their bf16-rounded
  // values, the shards stay fp32) and for the gradients' reduce-scatter (fsdp.reduce_dtype:
  // each rank's gradient rounded to bf16, the sum rounded to bf16 again).
  DType param_dtype = DType::kFloat32;
  DType reduce_dtype = DType::kFloat32;
  // Under tensor parallelism beside FSDP (model/tensor_parallel.h): after the step's
  // delayed-scaling amaxes are reduced across the data-parallel ranks, this reduces them
  // (MAX) across the tensor-parallel ones, on the calling thread. Empty: nothing more.
  std::function<absl::Status(float* amaxes, int64_t count)> reduce_amaxes_across_tensor_parallel;
  // The fp8-gathered weights' amaxes too: set where they are cast per tensor, row or
  // column, whose amaxes a tensor-parallel rank's part gives only a share of. Each shard's
  // amaxes are then laid over the whole weight (Fp8WeightScales::Shard's placement), so
  // that one reduction across both axes gives every rank the whole weight's. (A 128x128
  // block lies whole on one rank: block-scaled weights need nothing more, and their grids,
  // which lie over different parts on different ranks, must not be reduced together.)
  bool weight_amaxes_across_tensor_parallel = false;
};

class FsdpModel final : public ParameterHooks {
 public:
  // Shards `model` (its parameters must be initialised identically on every rank, as
  // LlamaModel::create does from the seed) and installs itself as its hooks. The model and
  // the group must outlive this object.
  static absl::StatusOr<std::unique_ptr<FsdpModel>> create(LlamaModel& model, collectives::ProcessGroup& group,
                                                           const FsdpOptions& options);
  ~FsdpModel() override;
  FsdpModel(const FsdpModel&) = delete;
  FsdpModel& operator=(const FsdpModel&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  // This rank's shards, named as the model's parameters, each 1-D of shard_elements().
  ParameterSet& shards() { return shards_; }
  const ParameterSet& shards() const { return shards_; }
  // The whole shape of each shard's parameter, in shards() order.
  std::vector<TensorShape> full_shapes() const;
  // Elements of the unsharded model.
  int64_t parameter_count() const;
  // The linears whose weights travel as fp8 codes.
  std::vector<std::string> fp8_gathered_linears() const;

  // Ends an optimizer step's fp8 bookkeeping (delayed scaling, across ranks).
  absl::Status finish_step();
  // The optimizer changed the shards: the next forward recomputes the fp8 weight scales.
  // row_amaxes_written: by an update that also wrote the rows' amaxes of every fp8-gathered
  // shard (shard_row_amax_outputs()), from which the scales then come instead of a pass
  // over each shard. Anything else that changes shards (a checkpoint load) passes false.
  void shards_changed(bool row_amaxes_written = false) {
    scales_stale_ = true;
    shard_row_amaxes_current_ = row_amaxes_written;
    ++shards_version_;
  }
  // The shards of the fp8-gathered weights, and where an update should write each one's
  // row amaxes (AdamW::write_row_amaxes): [rows_per_rank] fp32 buffers owned here.
  absl::StatusOr<std::vector<LlamaModel::WeightRowAmaxes>> shard_row_amax_outputs();
  // In place across ranks (host values), through the communication stream; the host waits.
  absl::Status all_reduce(std::span<double> values, collectives::ReduceOp op);
  // A step's values summed across ranks in place, in backend memory, queued like the rest
  // of the step (the host waits for nothing): `floats` (the micro-batches' losses and the
  // stop votes) and `doubles` (the gradients' sums of squares).
  absl::Status reduce_step_values(float* floats, int64_t float_count, double* doubles, int64_t double_count);
  // Trained parameter i's whole tensor (as the model holds it: under tensor parallelism this
  // rank's part), row-major on the host, gathered from every rank's `shard` of it (the shard
  // of the parameter or of one of its AdamW moments): for checkpoints that hold whole
  // tensors. Collective.
  absl::StatusOr<std::vector<float>> gather_whole(const Tensor& shard, size_t i);
  // OK, or the process group's first failure: check it after reading on the host anything
  // a collective produced (a device-queued group that failed leaves garbage, not errors).
  absl::Status health() { return comm_.health(); }

  CommCounters counters() const { return comm_.counters(); }

  // ParameterHooks.
  absl::Status before_forward(int unit) override;
  absl::Status after_forward(int unit, bool training) override;
  absl::Status before_backward(int unit) override;
  absl::Status after_backward(int unit) override;

 private:
  struct Param;
  struct Fp8State;
  struct Unit;
  struct PendingReduction;

  FsdpModel(LlamaModel& model, collectives::ProcessGroup& group, const FsdpOptions& options);
  absl::Status shard_parameters();
  // Draws the shards of params_[i] for each i in `which`, whose model parameters have no
  // values (ParameterStorage::kDeferred), from their initial values.
  absl::Status draw_initial_shards(const std::vector<size_t>& which);
  absl::Status plan_fp8_gathers();
  // Lays out each unit's flat buffers (one all-gather and one reduce-scatter per unit).
  absl::Status pack_units();

  Unit& unit_state(int unit);
  std::string unit_name(int unit) const;
  // One shard a gather moves: a parameter's (fp8 codes for the output GEMM, or values), or
  // an fp8 weight's grad_input codes of their own.
  struct Region {
    Param* param = nullptr;
    bool grad_input_codes = false;
  };
  // Whether the unit holds that section (fsdp_model.cc's Section), gathered or empty.
  bool has_section(const Unit& u, int section) const;
  // The sections, [first, end), that the forward's or the backward's layers read and the
  // unit lacks (first == end: none).
  std::pair<int, int> missing_sections(const Unit& u, bool for_backward) const;
  std::vector<Region> regions(const Unit& u, int first, int end);
  int64_t region_offset(const Region& r) const;
  // Queues the all-gather of what the pass needs and the unit lacks (no-op when one is
  // queued already, or nothing lacks).
  absl::Status start_gather(int unit, bool for_backward);
  // The region's gathered (padded) tensor, allocated: fp8 codes, bf16 or fp32.
  absl::StatusOr<Tensor*> allocate_gathered(const Region& r);
  // Points the model (or the linear's fp8 weight) at the gathered tensor.
  absl::Status expose_gathered(const Region& r);
  // Waits for what the pass needs and points the model at the gathered tensors;
  // `for_backward` also makes the transposed fp8 copies the backward GEMMs read.
  absl::Status finish_gather(int unit, bool for_backward);
  void release(int unit);
  absl::Status allocate_grads(int unit);
  absl::Status start_reduce_scatter(int unit);
  // reduce_dtype bf16: the unit's gradients rounded to bf16 and the job that reduce-scatters
  // them into `sums` (bf16, laid out as reduce_recv).
  absl::StatusOr<CommStream::Job> bf16_reduce_scatter_job(const Unit& u, Tensor& sums);
  // kPacked: the unit's gradients in one buffer, slice r holding every parameter's rows
  // for rank r.
  absl::StatusOr<Tensor> pack_gradients(const Unit& u);
  absl::Status drain_reduce_scatters();
  absl::Status refresh_fp8_scales();
  // Casts fp8_[index]'s shard into its place in the send buffer, once per scale.
  absl::Status cast_fp8_shard(int index);
  // Rounds the unit's bf16-travelling shards into their places in the send buffer, once per
  // shards_version_.
  absl::Status round_bf16_shards(Unit& u);
  // The gradient sums a bf16 reduce-scatter wrote, widened into the shards' gradients (the
  // step's first reduction) or into reduce_recv, to be added to them.
  absl::Status widen_bf16_sums(const PendingReduction& r);

  LlamaModel& model_;
  const Device& device_;
  FsdpOptions options_;
  int rank_ = 0;
  int world_size_ = 1;
  UnitCollectives collectives_;
  // Full activation checkpointing runs a block's forward again in its backward, which then
  // gathers the forward's codes too.
  bool recomputes_forward_ = false;
  ParameterSet shards_;
  std::vector<Param> params_;
  std::vector<Fp8State> fp8_;
  std::vector<Unit> units_;  // [0] the root, [1 + i] block i
  // Units whose gradients' reduce-scatter is queued, in order, summed into the shards' once
  // the backward is done (unless it reduced into them directly).
  struct PendingReduction {
    int unit;
    CommStream::Handle handle;
    bool into_shard_grads;  // the step's first: the collective wrote the shards' gradients
    Tensor bf16_sums;       // reduce_dtype bf16: where the collective wrote, widened by the drain
  };
  std::vector<PendingReduction> pending_reductions_;
  // The fp8-gathered weights' amaxes and scales, fp8_[i]'s at i (float8/weight_scales.h);
  // null without fp8-gathered weights.
  std::unique_ptr<Fp8WeightScales> weight_scales_;
  bool shard_row_amaxes_current_ = false;  // weight_scales_'s row amaxes are the shards' own
  Tensor delayed_amaxes_;                // packed, every delayed cast of every layer
  bool scales_stale_ = true;
  int64_t shards_version_ = 0;  // counts shards_changed(): a unit's bf16 send copy is of one version
  CommStream comm_;  // last: its thread stops before the tensors its jobs reference go
};

}  // namespace fp8::engine::fsdp
