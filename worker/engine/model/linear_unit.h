// One linear layer of the model: its weight parameter and the Float8Linear that runs its
// three GEMMs (fp8 or, for layers the module filter keeps in high precision, the `none`
// recipe), so that model code treats every linear the same way.
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/engine/float8/linear.h"
#include "worker/engine/model/linear_selection.h"
#include "worker/engine/model/parameters.h"

namespace fp8::engine {

struct LinearUnit {
  std::string name;  // "layers.0.attention.wq"
  Parameter* weight = nullptr;  // [out_features, in_features]
  std::unique_ptr<Float8Linear> layer;
  LinearSelection selection;
  // Set by FSDP when this weight travels as fp8 codes: the layer takes them instead of
  // weight->value, which is then never gathered.
  const Fp8Weight* gathered_fp8 = nullptr;
  // Set by LlamaModel::set_weight_row_amaxes_current: max |weight[o, :]| per row, as the
  // optimizer's last update left the weight, which forward() hands the layer's weight casts
  // (Float8Linear::forward's weight_row_amax); null while none are known to be current.
  const float* weight_row_amax = nullptr;

  // y [tokens, out] = x [tokens, in] · weightᵀ (+ residual). `training` keeps what
  // backward() needs. x_row_amax (may be null): max |x[r, :]| per row, fp32 [tokens], for
  // the fp8 casts of x to skip their amax pass (ForwardOptions::input_row_amax). residual
  // (may be null): [tokens, out], added in the GEMM's epilogue (ForwardOptions::residual).
  absl::Status forward(const Tensor& x, int64_t tokens, Tensor& y, bool training, const float* x_row_amax = nullptr,
                       const Tensor* residual = nullptr) const;
  // Whether forward() has a use for x_row_amax (backward() for grad_y_row_amax).
  bool reads_input_row_amax() const { return layer->info().needs.row_amax_of(TensorKind::kInput); }
  bool reads_weight_row_amax() const {
    return gathered_fp8 == nullptr && layer->info().needs.row_amax_of(TensorKind::kWeight);
  }
  bool reads_grad_output_row_amax() const { return layer->info().needs.row_amax_of(TensorKind::kGradOutput); }
  // Where the op that makes this unit's grad_y writes grad_y's row amaxes: `buffer` (fp32
  // [tokens]) when backward() takes them, else nowhere (null: the op skips them).
  float* grad_output_row_amax_in(const Tensor& buffer) const {
    return reads_grad_output_row_amax() ? buffer.data<float>() : nullptr;
  }
  // Writes grad_x (skipped when undefined; adds to it with Store::kAccumulate) and the
  // weight's gradient: added to it, or written as the step's first (Parameter::claim_grad).
  // grad_y_row_amax (may be null): max |grad_y[r, :]| per row, for the fp8 casts of grad_y
  // (BackwardOptions::grad_output_row_amax).
  absl::Status backward(const Tensor& grad_y, Tensor* grad_x, Store grad_x_store = Store::kOverwrite,
                        const float* grad_y_row_amax = nullptr) const;
};

// The unit for `name` with weight `weight`, per the module filter of `fp8`, reading and
// writing activations of the given types.
// `shared_copies`: see Float8Linear::create.
absl::StatusOr<LinearUnit> make_linear_unit(Backend& backend, const v1::Fp8Spec& fp8, std::string name,
                                            Parameter* weight, const LinearActivations& activations = {},
                                            SharedCastCopies* shared_copies = nullptr);

}  // namespace fp8::engine
