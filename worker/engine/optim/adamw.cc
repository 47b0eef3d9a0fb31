#include "worker/engine/optim/adamw.h"

#include <cmath>
#include <deque>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/engine/status_macros.h"

namespace fp8::engine {

absl::StatusOr<AdamW> AdamW::create(ModelOps& ops, ParameterSet& params, const AdamWHyperparams& hyper) {
  AdamW opt(ops, params, hyper);
  for (const Parameter& p : params.all()) {
    FP8_ASSIGN_OR_RETURN(Tensor m, Tensor::zeros(p.value.device(), ElementType::kFloat32, p.value.shape()));
    FP8_ASSIGN_OR_RETURN(Tensor v, Tensor::zeros(p.value.device(), ElementType::kFloat32, p.value.shape()));
    opt.m_.push_back(std::move(m));
    opt.v_.push_back(std::move(v));
  }
  opt.row_amaxes_.resize(opt.m_.size());
  return opt;
}

absl::Status AdamW::write_row_amaxes(const Parameter& p, RowAmaxes out) {
  const std::deque<Parameter>& all = params_->all();
  for (size_t i = 0; i < all.size(); ++i) {
    if (&all[i] != &p) continue;
    if (out.out == nullptr || out.row_length <= 0 || p.value.numel() % out.row_length != 0) {
      return absl::InvalidArgumentError(absl::StrCat("AdamW: row amaxes of ", p.name, " need rows that divide its ",
                                                     p.value.numel(), " values, got rows of ", out.row_length));
    }
    row_amaxes_[i] = out;
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("AdamW: ", p.name, " is not a parameter it optimizes"));
}

absl::Status AdamW::step(float lr, float grad_scale) { return update(lr, grad_scale, nullptr); }

absl::Status AdamW::step(float lr, const float* grad_scale_in) { return update(lr, 1.0f, grad_scale_in); }

absl::Status AdamW::update(float lr, float grad_scale, const float* grad_scale_in) {
  const int64_t step = steps_taken_ + 1;
  size_t i = 0;
  for (Parameter& p : params_->all()) {
    AdamWHyperparams h = hyper_;
    h.lr = lr;
    h.grad_scale = grad_scale;
    h.grad_scale_in = grad_scale_in;
    if (!p.weight_decay) h.weight_decay = 0.0f;
    FP8_RETURN_IF_ERROR(ops_->adamw_step(h, step, p.value.data<float>(), p.grad.data<float>(),
                                         m_[i].data<float>(), v_[i].data<float>(), p.value.numel(), row_amaxes_[i]));
    ++i;
  }
  steps_taken_ = step;
  return absl::OkStatus();
}

namespace {
std::vector<FloatSpan> grad_spans(const ParameterSet& params, bool split_only) {
  std::vector<FloatSpan> grads;
  grads.reserve(params.all().size());
  for (const Parameter& p : params.all()) {
    if (!split_only || p.split.split()) grads.push_back({p.grad.data<float>(), p.grad.numel()});
  }
  return grads;
}
}  // namespace

absl::Status queue_grad_norm(ModelOps& ops, const ParameterSet& params, double max_norm, double* sum_of_squares,
                             float* clip_scale, bool split_only) {
  return ops.queue_grad_norm(grad_spans(params, split_only), max_norm > 0 ? max_norm : 0.0, sum_of_squares,
                             clip_scale);
}

}  // namespace fp8::engine
