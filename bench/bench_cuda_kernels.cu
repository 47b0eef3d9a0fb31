// The sigmoid of bench_linear's ln -> linear -> sigmoid step on the GPU (bench_cuda.h).
// Plain CUDA with no absl in sight: bench_cuda.cc turns the errors into absl::Status.
//
// Both kernels are memory-bound streams (one read and one write per value), as torch's
// eager sigmoid and sigmoid_backward are, for fp32 or bf16 values (bf16 carried as its raw
// 16 bits, as fp8/arith.h does on the host): computed in fp32, a bf16 result rounded once
// to nearest even, as torch computes a bf16 sigmoid. 16-byte loads where the pointers
// allow (4 fp32 or 8 bf16 values), a grid-stride loop so that any n takes one launch.
#include <cuda_bf16.h>
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

// Element types: float, or uint16_t holding bf16 bits. Loaded widened to fp32 (exact),
// stored rounded.
__device__ __forceinline__ float widen(float v) { return v; }
__device__ __forceinline__ float widen(uint16_t v) { return __uint_as_float(static_cast<uint32_t>(v) << 16); }
__device__ __forceinline__ uint16_t bf16_bits(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }
template <class T>
__device__ __forceinline__ T narrow(float f) {
  if constexpr (sizeof(T) == 4) {
    return f;
  } else {
    return bf16_bits(f);
  }
}

// One 32-bit word of a 16-byte vector: one fp32 value, or two bf16 values (element 2j in
// the low half, 2j + 1 in the high half: little-endian).
template <bool kForward, class T>
__device__ __forceinline__ uint32_t apply_word(uint32_t w) {
  if constexpr (sizeof(T) == 4) {
    return __float_as_uint(apply<kForward>(__uint_as_float(w)));
  } else {
    const float lo = __uint_as_float(w << 16);
    const float hi = __uint_as_float(w & 0xFFFF0000u);
    return static_cast<uint32_t>(bf16_bits(apply<kForward>(lo))) |
           (static_cast<uint32_t>(bf16_bits(apply<kForward>(hi))) << 16);
  }
}

template <bool kForward, class T>
__global__ void __launch_bounds__(kThreads) map16_kernel(const uint4* in, uint4* out, int64_t n16) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n16; i += stride) {
    const uint4 v = in[i];
    out[i] = make_uint4(apply_word<kForward, T>(v.x), apply_word<kForward, T>(v.y), apply_word<kForward, T>(v.z),
                        apply_word<kForward, T>(v.w));
  }
}

template <bool kForward, class T>
__global__ void __launch_bounds__(kThreads) map1_kernel(const T* in, T* out, int64_t begin, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t i = begin + static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n; i += stride) {
    out[i] = narrow<T>(apply<kForward>(widen(in[i])));
  }
}

// Enough blocks to fill the GPU several times over; the loop covers the rest.
unsigned grid_for(int64_t items) {
  const int64_t blocks = (items + kThreads - 1) / kThreads;
  constexpr int64_t kMaxBlocks = 132 * 16;  // H100: 132 SMs, 16 resident blocks of 256 per SM at most
  return static_cast<unsigned>(blocks < 1 ? 1 : blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

template <bool kForward, class T>
cudaError_t launch(const T* in, T* out, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  constexpr int64_t kPerVector = 16 / sizeof(T);
  const bool aligned = ((reinterpret_cast<uintptr_t>(in) | reinterpret_cast<uintptr_t>(out)) & 15u) == 0;
  const int64_t n16 = aligned ? n / kPerVector : 0;
  if (n16 > 0) {
    map16_kernel<kForward, T><<<grid_for(n16), kThreads, 0, stream>>>(reinterpret_cast<const uint4*>(in),
                                                                      reinterpret_cast<uint4*>(out), n16);
  }
  const int64_t done = kPerVector * n16;
  if (done < n) map1_kernel<kForward, T><<<grid_for(n - done), kThreads, 0, stream>>>(in, out, done, n);
  return cudaGetLastError();
}

}  // namespace

cudaError_t sigmoid_forward(const float* y, int64_t n, float* s, cudaStream_t stream) {
  return launch<true>(y, s, n, stream);
}

cudaError_t sigmoid_forward(const uint16_t* y, int64_t n, uint16_t* s, cudaStream_t stream) {
  return launch<true>(y, s, n, stream);
}

cudaError_t sigmoid_backward_of_sum(const float* s, int64_t n, float* grad_y, cudaStream_t stream) {
  return launch<false>(s, grad_y, n, stream);
}

cudaError_t sigmoid_backward_of_sum(const uint16_t* s, int64_t n, uint16_t* grad_y, cudaStream_t stream) {
  return launch<false>(s, grad_y, n, stream);
}

}  // namespace fp8::bench::kernels
