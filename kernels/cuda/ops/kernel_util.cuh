// Device-side building blocks shared by the model-op kernels (.cu files only): launch
// bookkeeping, group loads of 4 activations (fp32 or bf16), and block reductions whose
// order is fixed.
//
// Determinism rests on two rules kept by every kernel that reduces:
//  * the decomposition (which thread sums which elements, how many blocks make partials)
//    depends only on the shape, never on the device, timing or pointer alignment;
//  * partial results are combined in a fixed order (block_sum below), never by atomics.
#pragma once

#include <cuda_runtime.h>

#include <climits>
#include <cstddef>
#include <cstdint>

#include "cuda/cast_kernels.h"  // LaunchResult
#include "cuda/ops/activation_access.cuh"

namespace fp8::cuda::model {

constexpr int kThreads = 256;  // threads per block of every 1-D kernel here
constexpr int kWarps = kThreads / 32;
constexpr int kMaxGridY = 65535;
constexpr unsigned kFullMask = 0xffffffffu;

inline LaunchResult after_launch(const char* kernel) {
  const cudaError_t e = cudaGetLastError();
  return {e, e == cudaSuccess ? nullptr : kernel};
}

inline const LaunchResult kTooLarge{cudaErrorInvalidConfiguration, "grid size (tensor too large for one launch)"};

__host__ __device__ inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

inline unsigned clamp_grid(int64_t blocks, int64_t limit) {
  return static_cast<unsigned>(blocks < 1 ? 1 : blocks < limit ? blocks : limit);
}

// Carves 256-byte aligned pieces out of a scratch buffer in the order they are requested;
// run once with base == nullptr to size the buffer, once with the buffer to place them.
class ScratchCarver {
 public:
  explicit ScratchCarver(void* base) : base_(static_cast<char*>(base)) {}
  template <typename T>
  T* take(size_t count) {
    T* p = base_ != nullptr ? reinterpret_cast<T*>(base_ + used_) : nullptr;
    used_ += (count * sizeof(T) + kAlign - 1) / kAlign * kAlign;
    return p;
  }
  size_t used() const { return used_; }

 private:
  static constexpr size_t kAlign = 256;
  char* base_;
  size_t used_ = 0;
};

// ---- loads ----------------------------------------------------------------------------------------

// The four elements [4g, 4g + 4) of a vector of n activations of type T (float, or bf16
// bits widened to float); those at or past n read as `fill`. kVec (one 16-byte fp32 or
// 8-byte bf16 load) requires p aligned for it (aligned_for<T, 4>) and the group whole
// (4g + 4 <= n). Both paths hand the same values to the caller, so a reduction over
// groups sums in the same order whichever path the pointers allow, and whatever T.
template <bool kVec, typename T>
__device__ __forceinline__ void load_group(const T* p, int64_t g, int64_t n, float fill, float (&v)[4]) {
  const int64_t i = 4 * g;
  if constexpr (kVec) {
    load4(p + i, v);
  } else {
#pragma unroll
    for (int k = 0; k < 4; ++k) v[k] = i + k < n ? load_act(p + i + k) : fill;
  }
}

// Stores the group's elements below n, each rounded once when T is bf16.
template <bool kVec, typename T>
__device__ __forceinline__ void store_group(T* p, int64_t g, int64_t n, const float (&v)[4]) {
  const int64_t i = 4 * g;
  if constexpr (kVec) {
    store4(p + i, v);
  } else {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      if (i + k < n) store_act(p + i + k, v[k]);
    }
  }
}

// The group of 16 bytes' worth of elements (kPer16Bytes<T>: 4 fp32 or 8 bf16) g of a vector
// of n activations; those at or past n read as `fill`. kVec (one 16-byte access) requires
// p 16-byte aligned and the group whole. For fp32 these are load_group / store_group.
template <bool kVec, typename T>
__device__ __forceinline__ void load_group16(const T* p, int64_t g, int64_t n, float fill,
                                             float (&v)[kPer16Bytes<T>]) {
  constexpr int kG = kPer16Bytes<T>;
  const int64_t i = kG * g;
  if constexpr (kVec) {
    load16(p + i, v);
  } else {
#pragma unroll
    for (int k = 0; k < kG; ++k) v[k] = i + k < n ? load_act(p + i + k) : fill;
  }
}

template <bool kVec, typename T>
__device__ __forceinline__ void store_group16(T* p, int64_t g, int64_t n, const float (&v)[kPer16Bytes<T>]) {
  constexpr int kG = kPer16Bytes<T>;
  const int64_t i = kG * g;
  if constexpr (kVec) {
    store16(p + i, v);
  } else {
#pragma unroll
    for (int k = 0; k < kG; ++k) {
      if (i + k < n) store_act(p + i + k, v[k]);
    }
  }
}

// kG fp32 values (a multiple of 4) at [kG g, kG g + kG) of a vector of n, those at or past
// n as `fill`: the per-column fp32 operand (a weight) beside a group of activations.
// kVec: kG / 4 16-byte accesses (p 16-byte aligned, the group whole).
template <bool kVec, int kG>
__device__ __forceinline__ void load_floats(const float* p, int64_t g, int64_t n, float fill, float (&v)[kG]) {
  static_assert(kG % 4 == 0);
  const int64_t i = kG * g;
  if constexpr (kVec) {
#pragma unroll
    for (int j = 0; j < kG / 4; ++j) {
      float q[4];
      load4(p + i + 4 * j, q);
#pragma unroll
      for (int k = 0; k < 4; ++k) v[4 * j + k] = q[k];
    }
  } else {
#pragma unroll
    for (int k = 0; k < kG; ++k) v[k] = i + k < n ? p[i + k] : fill;
  }
}

// ---- reductions ---------------------------------------------------------------------------------

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(kFullMask, v, offset);
  return v;  // the full sum in lane 0
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_down_sync(kFullMask, v, offset));
  return v;
}

// The sum of v over a block of kThreads threads: a fixed shuffle tree per warp, then the
// warp totals added in warp order. Every thread gets the same bits. Every thread of the
// block must call it (it synchronises); calling it again in the same kernel is safe.
template <typename T>
__device__ __forceinline__ T block_sum(T v) {
  __shared__ T warp_total[kWarps];
  v = warp_sum(v);
  __syncthreads();  // a previous call's readers are done with warp_total
  if ((threadIdx.x & 31) == 0) warp_total[threadIdx.x >> 5] = v;
  __syncthreads();
  T total = warp_total[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) total += warp_total[w];
  return total;
}

// The max over a block (fmaxf: a NaN loses to any number, as with std::max on the CPU,
// whose running max never takes a NaN). Same calling rules as block_sum.
__device__ __forceinline__ float block_max(float v) {
  __shared__ float warp_result[kWarps];
  v = warp_max(v);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) warp_result[threadIdx.x >> 5] = v;
  __syncthreads();
  float result = warp_result[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) result = fmaxf(result, warp_result[w]);
  return result;
}

// The max over a block of amax bit patterns (amax_bits_update: magnitudes, NaN above
// Inf), so the result is the bits Backend::amax computes. Same calling rules as block_sum.
__device__ __forceinline__ uint32_t block_max_bits(uint32_t v) {
  __shared__ uint32_t warp_result[kWarps];
  v = __reduce_max_sync(kFullMask, v);
  __syncthreads();  // a previous call's readers are done with warp_result
  if ((threadIdx.x & 31) == 0) warp_result[threadIdx.x >> 5] = v;
  __syncthreads();
  uint32_t result = warp_result[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) result = result > warp_result[w] ? result : warp_result[w];
  return result;
}

// Folds the values of group g of kG elements (those below n) into a running amax, as they
// are stored in T (rounded to bf16 when T is): groups of 4 (group_amax_bits) or of 16
// bytes (group16_amax_bits).
template <typename T, int kG>
__device__ __forceinline__ uint32_t group_amax_bits_of(uint32_t acc, int64_t g, int64_t n, const float (&v)[kG]) {
#pragma unroll
  for (int k = 0; k < kG; ++k) {
    if (kG * g + k < n) acc = amax_bits_update(acc, round_act<T>(v[k]));
  }
  return acc;
}

template <typename T>
__device__ __forceinline__ uint32_t group_amax_bits(uint32_t acc, int64_t g, int64_t n, const float (&v)[4]) {
  return group_amax_bits_of<T, 4>(acc, g, n, v);
}

template <typename T>
__device__ __forceinline__ uint32_t group16_amax_bits(uint32_t acc, int64_t g, int64_t n,
                                                      const float (&v)[kPer16Bytes<T>]) {
  return group_amax_bits_of<T, kPer16Bytes<T>>(acc, g, n, v);
}

}  // namespace fp8::cuda::model
