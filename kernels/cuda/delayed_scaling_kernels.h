// Host entry point of the delayed-scaling kernel (Backend::record_delayed_amaxes; see
// fp8.h's DelayedRecordArgs for what it computes). Plain C++, like cast_kernels.h, so that
// the backend's host files queue it without nvcc; the caller validated the arguments.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/cast_kernels.h"

namespace fp8::cuda {

LaunchResult launch_record_delayed(float* states, int64_t count, int history_len, const float* amaxes, float* scales,
                                   int64_t scale_stride, int64_t inverse_offset, cudaStream_t stream);

}  // namespace fp8::cuda
