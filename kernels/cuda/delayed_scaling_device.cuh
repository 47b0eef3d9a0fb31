// The delayed-scaling kernel of the CUDA backend (delayed_scaling_kernels.cu launches it),
// in a header of its own so that tests/kernels/delayed_scaling_emulation_test.cc can run it
// on the CPU under tests/ops/emulation/. One thread per cast runs the host's own rule
// (fp8/delayed_state.h), so the state and the next scales never travel to the host while
// training.
#pragma once

#include <cstdint>

#include "fp8/arith.h"
#include "fp8/delayed_state.h"

namespace fp8::cuda::delayed_device {

constexpr int kThreads = 128;

__global__ void __launch_bounds__(kThreads)
    record_delayed_kernel(float* states, int64_t count, int history_len, const float* amaxes, float* scales,
                          int64_t scale_stride, int64_t inverse_offset) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= count) return;
  float* scale = scales + i * scale_stride;
  delayed::record_and_publish(states + i * delayed::state_floats(history_len), amaxes[i], scale,
                              scale + inverse_offset);
}

}  // namespace fp8::cuda::delayed_device
