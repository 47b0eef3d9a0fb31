// Delayed scaling's end of a step on the device (Backend::record_delayed_amaxes): one
// thread per cast runs the host's own rule (fp8/delayed_state.h), so the state and the
// next scales never travel to the host during training.
#include "cuda/delayed_scaling_kernels.h"

#include "fp8/delayed_state.h"

namespace fp8::cuda {
namespace {

constexpr int kThreads = 128;

__global__ void __launch_bounds__(kThreads)
    record_delayed_kernel(float* states, int64_t count, int history_len, const float* amaxes, float* scales,
                          int64_t scale_stride, int64_t inverse_offset) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= count) return;
  float* state = states + i * delayed::state_floats(history_len);
  delayed::record(state, amaxes[i]);
  const float scale = state[delayed::kHasScale] != 0.0f ? state[delayed::kScale] : 1.0f;
  scales[i * scale_stride] = scale;
  scales[i * scale_stride + inverse_offset] = inverse_scale(scale);
}

}  // namespace

LaunchResult launch_record_delayed(float* states, int64_t count, int history_len, const float* amaxes, float* scales,
                                   int64_t scale_stride, int64_t inverse_offset, cudaStream_t stream) {
  if (count == 0) return {};
  const int64_t blocks = (count + kThreads - 1) / kThreads;
  if (blocks > 65535) return {cudaErrorInvalidConfiguration, "record_delayed kernel (too many casts)"};
  record_delayed_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      states, count, history_len, amaxes, scales, scale_stride, inverse_offset);
  const cudaError_t e = cudaGetLastError();
  return {e, e == cudaSuccess ? nullptr : "record_delayed kernel"};
}

}  // namespace fp8::cuda
