// The engine device a benchmark runs on (--device cpu|cuda), for the benchmarks that drive
// model ops or whole layers through fp8::engine rather than a bare Backend.
#pragma once

#include <memory>

#include "worker/engine/tensor/device.h"

namespace fp8::bench {

// CUDA device 0, opened into `owner` (which must outlive every use of it), when `cuda`;
// else the CPU. Exits with the reason when the GPU cannot be opened.
const engine::Device& open_engine_device(bool cuda, std::unique_ptr<engine::Device>& owner);

}  // namespace fp8::bench
