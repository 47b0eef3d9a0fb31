// The sigmoid of bench_linear's ln -> linear -> sigmoid step on the GPU (bench_cuda.h).
// Plain CUDA with no absl in sight: bench_cuda.cc turns the errors into absl::Status.
//
// Both kernels are memory-bound streams (one read and one write of 4 bytes per value), as
// torch's eager sigmoid and sigmoid_backward are: 16-byte loads where the pointers allow,
// a grid-stride loop so that any n takes one launch.
#include <cuda_runtime.h>

#include <cstdint>

namespace fp8::bench::kernels {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float sigmoid(float y) { return 1.0f / (1.0f + __expf(-y)); }
// d sigmoid(y) / dy from the output s = sigmoid(y).
__device__ __forceinline__ float sigmoid_grad(float s) { return s * (1.0f - s); }

template <bool kForward>
__device__ __forceinline__ float apply(float v) {
  if constexpr (kForward) {
    return sigmoid(v);
  } else {
    return sigmoid_grad(v);
  }
}

template <bool kForward>
__global__ void __launch_bounds__(kThreads) map4_kernel(const float4* in, float4* out, int64_t n4) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n4; i += stride) {
    const float4 v = in[i];
    out[i] = make_float4(apply<kForward>(v.x), apply<kForward>(v.y), apply<kForward>(v.z), apply<kForward>(v.w));
  }
}

template <bool kForward>
__global__ void __launch_bounds__(kThreads) map1_kernel(const float* in, float* out, int64_t begin, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t i = begin + static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n; i += stride) {
    out[i] = apply<kForward>(in[i]);
  }
}

// Enough blocks to fill the GPU several times over; the loop covers the rest.
unsigned grid_for(int64_t items) {
  const int64_t blocks = (items + kThreads - 1) / kThreads;
  constexpr int64_t kMaxBlocks = 132 * 16;  // H100: 132 SMs, 16 resident blocks of 256 per SM at most
  return static_cast<unsigned>(blocks < 1 ? 1 : blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

template <bool kForward>
cudaError_t launch(const float* in, float* out, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  const bool aligned = ((reinterpret_cast<uintptr_t>(in) | reinterpret_cast<uintptr_t>(out)) & 15u) == 0;
  const int64_t n4 = aligned ? n / 4 : 0;
  if (n4 > 0) {
    map4_kernel<kForward><<<grid_for(n4), kThreads, 0, stream>>>(reinterpret_cast<const float4*>(in),
                                                                 reinterpret_cast<float4*>(out), n4);
  }
  if (4 * n4 < n) map1_kernel<kForward><<<grid_for(n - 4 * n4), kThreads, 0, stream>>>(in, out, 4 * n4, n);
  return cudaGetLastError();
}

}  // namespace

cudaError_t sigmoid_forward(const float* y, int64_t n, float* s, cudaStream_t stream) {
  return launch<true>(y, s, n, stream);
}

cudaError_t sigmoid_backward_of_sum(const float* s, int64_t n, float* grad_y, cudaStream_t stream) {
  return launch<false>(s, grad_y, n, stream);
}

}  // namespace fp8::bench::kernels
