// Every ModelOps method that takes activations, as one call each with the activation type
// as a parameter: the table the bad-type tests (CPU and CUDA) walk, so that a method added
// to ModelOps is added here once and checked by both.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "fp8/model_ops.h"

namespace fp8::ops_test {

// Buffers in the implementation's memory: `in` (read: activations, and fp32 parameters,
// inv_rms and lse alike) and `out` (activation outputs) of at least 4096 floats, `f32_out`
// (fp32 outputs: parameter gradients, inv_rms, lse, loss) of at least 4096 floats, `ids` 4
// token ids / targets in [0, 8). With a valid type every call is a valid one.
struct ActivationCall {
  const char* method;
  std::function<absl::Status(ModelOps&, DType act, void* in, void* out, float* f32_out, const int32_t* ids)> call;
};

std::vector<ActivationCall> every_activation_call();

}  // namespace fp8::ops_test
