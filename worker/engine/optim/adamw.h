// AdamW over a ParameterSet (torch.optim.AdamW's update, ModelOps::adamw_step), with the
// per-parameter weight-decay choice of Parameter::weight_decay, and global grad-norm
// clipping.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "fp8/model_ops.h"
#include "worker/engine/model/parameters.h"

namespace fp8::engine {

class AdamW {
 public:
  // Moments start at zero. `hyper.lr` is ignored: step() takes the scheduled rate.
  static absl::StatusOr<AdamW> create(ModelOps& ops, ParameterSet& params, const AdamWHyperparams& hyper);

  // One update of every parameter from its gradient times `grad_scale` (e.g. a clipping
  // factor) at learning rate `lr`. The gradients themselves are
  // left as they are.
  absl::Status step(float lr, float grad_scale = 1.0f);
  // The same with the factor read from the device (one float, e.g. ModelOps::
  // queue_grad_norm's clip_scale), so that the host need not wait for the grad norm; NaN
  // there leaves every parameter as it was (AdamWHyperparams::grad_scale_in).
  absl::Status step(float lr, const float* grad_scale_in);

  // From now on every step() also writes the rows' amaxes of p's updated value to `out`
  // (ModelOps::adamw_step's param_row_amax), for its fp8 casts (LlamaModel's weight row
  // amaxes). p must be one of the optimized parameters and out.row_length divide its size.
  absl::Status write_row_amaxes(const Parameter& p, RowAmaxes out);

  // Updates taken so far (the step number the bias correction of the last one used).
  int64_t steps_taken() const { return steps_taken_; }
  // For checkpoints: the moments of params.all()[i], and the step count.
  const Tensor& first_moment(size_t i) const { return m_[i]; }
  const Tensor& second_moment(size_t i) const { return v_[i]; }
  Tensor& first_moment(size_t i) { return m_[i]; }
  Tensor& second_moment(size_t i) { return v_[i]; }
  void set_steps_taken(int64_t steps) { steps_taken_ = steps; }

 private:
  AdamW(ModelOps& ops, ParameterSet& params, const AdamWHyperparams& hyper)
      : ops_(&ops), params_(&params), hyper_(hyper) {}
  absl::Status update(float lr, float grad_scale, const float* grad_scale_in);

  ModelOps* ops_;
  ParameterSet* params_;
  AdamWHyperparams hyper_;
  std::vector<Tensor> m_, v_;
  std::vector<RowAmaxes> row_amaxes_;  // per parameter, {} for none
  int64_t steps_taken_ = 0;
};

// Gradient clipping, queued on the device (ModelOps::queue_grad_norm): the global L2 norm
// of every gradient (as if they were one vector) is the square root of *sum_of_squares,
// accumulated in double in parameter order; *clip_scale gets the factor AdamW::step(lr,
// clip_scale) applies to every gradient as it reads it: max_norm / norm where the norm
// exceeds max_norm > 0, else 1 (max_norm <= 0 only measures), NaN for a non-finite norm
// (the update is skipped). The host waits for neither. FSDP passes max_norm 0 for its
// shards' sum, sums the ranks' sums and derives the factor with ModelOps::queue_clip_scale.
// `split_only`: only the parameters split across tensor-parallel ranks (Parameter::split),
// for the ranks that must not count the whole parameters a second time.
absl::Status queue_grad_norm(ModelOps& ops, const ParameterSet& params, double max_norm, double* sum_of_squares,
                             float* clip_scale, bool split_only = false);

}  // namespace fp8::engine
