#include "worker/engine/model/linear_unit.h"

#include "worker/engine/status_macros.h"

namespace fp8::engine {

// Activations are of the layer's types (LinearActivations): raw pointers.
absl::Status LinearUnit::forward(const Tensor& x, int64_t tokens, Tensor& y, bool training, const float* x_row_amax,
                                 const Tensor* residual) const {
  ForwardOptions options;
  options.input_row_amax = x_row_amax;
  options.residual = residual != nullptr ? residual->raw() : nullptr;
  if (gathered_fp8 != nullptr) {
    return training ? layer->forward(x.raw(), tokens, *gathered_fp8, nullptr, y.raw(), options)
                    : layer->forward_no_grad(x.raw(), tokens, *gathered_fp8, nullptr, y.raw(), options);
  }
  options.weight_row_amax = weight_row_amax;
  const float* w = weight->value.data<float>();
  return training ? layer->forward(x.raw(), tokens, w, nullptr, y.raw(), options)
                  : layer->forward_no_grad(x.raw(), tokens, w, nullptr, y.raw(), options);
}

absl::Status LinearUnit::backward(const Tensor& grad_y, Tensor* grad_x, Store grad_x_store,
                                  const float* grad_y_row_amax) const {
  // Under FSDP the weight was freed after the forward and gathered again into new memory.
  if (gathered_fp8 != nullptr) {
    FP8_RETURN_IF_ERROR(layer->rebind_weight(*gathered_fp8));
  } else {
    FP8_RETURN_IF_ERROR(layer->rebind_weight(weight->value.data<float>()));
  }
  BackwardOptions options;
  options.grad_input = grad_x_store;
  options.grad_weight = weight->claim_grad();
  options.grad_output_row_amax = grad_y_row_amax;
  return layer->backward(grad_y.raw(), grad_x != nullptr ? grad_x->raw() : nullptr, weight->grad.data<float>(),
                         nullptr, options);
}

absl::StatusOr<LinearUnit> make_linear_unit(Backend& backend, const v1::Fp8Spec& fp8, std::string name,
                                            Parameter* weight, const LinearActivations& activations,
                                            SharedCastCopies* shared_copies) {
  LinearUnit u;
  const int64_t out_features = weight->shape.at(0), in_features = weight->shape.at(1);
  FP8_ASSIGN_OR_RETURN(u.selection, select_linear(fp8, name, in_features, out_features));
  FP8_ASSIGN_OR_RETURN(u.layer,
                       Float8Linear::create(backend, in_features, out_features, u.selection.config, activations,
                                            shared_copies));
  u.name = std::move(name);
  u.weight = weight;
  return u;
}

}  // namespace fp8::engine
