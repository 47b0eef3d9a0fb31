// The engine device a benchmark runs on (--device cpu|cuda), for the benchmarks that drive
// model ops or whole layers through fp8::engine rather than a bare Backend.
#pragma once

#include <memory>

#include "worker/engine/tensor/device.h"

namespace fp8::bench {

// FP8_CUDA_ATTENTION, as fp8-train reads it (exits on a bad value): the options of the
// CUDA model ops a benchmark opens.
CudaModelOpsOptions cuda_model_ops_options_from_environment();

// CUDA device 0 (its model ops' options from the environment), opened into `owner` (which
// must outlive every use of it), when `cuda`; else the CPU. Exits with the reason when the
// GPU cannot be opened.
const engine::Device& open_engine_device(bool cuda, std::unique_ptr<engine::Device>& owner);

}  // namespace fp8::bench
