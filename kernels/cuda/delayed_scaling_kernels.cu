// Launches the delayed-scaling kernel (delayed_scaling_device.cuh) for
// Backend::record_delayed_amaxes.
#include <cstdint>

#include "cuda/delayed_scaling_device.cuh"
#include "cuda/delayed_scaling_kernels.h"

namespace fp8::cuda {

LaunchResult launch_record_delayed(float* states, int64_t count, int history_len, const float* amaxes, float* scales,
                                   int64_t scale_stride, int64_t inverse_offset, cudaStream_t stream) {
  using delayed_device::kThreads;
  if (count == 0) return {};
  const int64_t blocks = (count + kThreads - 1) / kThreads;
  if (blocks > INT32_MAX) return {cudaErrorInvalidConfiguration, "record_delayed kernel (too many casts)"};
  delayed_device::record_delayed_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      states, count, history_len, amaxes, scales, scale_stride, inverse_offset);
  const cudaError_t e = cudaGetLastError();
  return {e, e == cudaSuccess ? nullptr : "record_delayed kernel"};
}

}  // namespace fp8::cuda
