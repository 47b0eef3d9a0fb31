// The end of a training step for every layer with delayed scaling, done once for the whole
// model: each layer writes its step amaxes into one packed device vector, the caller may
// reduce it (ranks: one all-reduce MAX), and each layer records its share into its
// histories and derives its next scales, in backend memory: the host waits for nothing.
#pragma once

#include <functional>
#include <span>

#include "absl/status/status.h"
#include "worker/engine/model/linear_unit.h"
#include "worker/engine/tensor/tensor.h"

namespace fp8::engine {

// `reduce` (may be empty) runs on the packed amaxes (`count` floats of device memory)
// before they are read; `packed` is the caller's scratch, (re)allocated as needed so that
// steps reuse it.
using ReducePackedAmaxes = std::function<absl::Status(float* packed, int64_t count)>;
absl::Status finish_delayed_step(std::span<LinearUnit* const> linears, const Device& device, Tensor& packed,
                                 const ReducePackedAmaxes& reduce = {});

}  // namespace fp8::engine
