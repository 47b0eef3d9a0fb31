// Where FSDP steps into the model. The model announces when a unit of parameters is about
// to be used and when it is done with it; FSDP gathers the unit's shards before and frees
// the full tensors (and reduce-scatters their gradients) after. A single process sets no
// hooks and its parameters simply stay in place.
//
// Units: kRootUnit (token embeddings, final norm, output projection: used at both ends of
// the model, so gathered for the whole micro-batch) and the decoder blocks 0 .. n-1.
#pragma once

#include "absl/status/status.h"

namespace fp8::engine {

class ParameterHooks {
 public:
  static constexpr int kRootUnit = -1;

  virtual ~ParameterHooks() = default;

  // On return the unit's Parameter::value tensors hold the full values.
  virtual absl::Status before_forward(int unit) = 0;
  // The unit's forward is done. With `training` its backward follows in this micro-batch.
  virtual absl::Status after_forward(int unit, bool training) = 0;
  // On return the values are present again and Parameter::grad tensors exist, zeroed.
  virtual absl::Status before_backward(int unit) = 0;
  // The unit's gradients for this micro-batch are complete.
  virtual absl::Status after_backward(int unit) = 0;
};

}  // namespace fp8::engine
