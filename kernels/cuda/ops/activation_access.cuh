// Global-memory access to activations for the model-op kernels (.cu files only). An
// activation is fp32 (`float`) or bf16, carried as its raw bits (`bf16_bits`) as in
// arith.h so that no CUDA bf16 type is involved. Kernels are templated on the element
// type T and go through the overloads below: a load widens to float (exact), a store
// rounds once to nearest even with arith.h's float_to_bf16, the function the CPU's
// staging (ops/bf16_staging.h) runs. Arithmetic is fp32 in between whatever T is.
//
// The vector accesses move 4 elements (16 bytes of fp32, 8 bytes of bf16) or 16 bytes (4
// fp32, 8 bf16); a launcher takes a vector path only where aligned_for says the pointers
// allow it. For T = float every function is the plain access the kernels made before bf16
// existed, so the fp32 paths compile to what they were.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda/cast_kernels.h"  // HpType, LaunchResult
#include "fp8/arith.h"

namespace fp8::cuda::model {

using bf16_bits = uint16_t;

// Whether p allows one access of kElems elements of T (its size in bytes, a power of two).
template <typename T, int kElems>
inline bool aligned_for(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & (sizeof(T) * kElems - 1)) == 0;
}

// Runtime HpType -> element type: fn gets a value of the type (float or bf16_bits).
template <typename Fn>
LaunchResult with_act(HpType t, Fn&& fn) {
  return t == HpType::kBFloat16 ? fn(bf16_bits{}) : fn(float{});
}

// ---- one element -------------------------------------------------------------------------------

__device__ __forceinline__ float load_act(const float* p) { return *p; }
__device__ __forceinline__ float load_act(const bf16_bits* p) { return bf16_to_float(*p); }
__device__ __forceinline__ void store_act(float* p, float v) { *p = v; }
__device__ __forceinline__ void store_act(bf16_bits* p, float v) { *p = float_to_bf16(v); }
// The value a store of v as T leaves in memory, widened back to float.
template <typename T>
__device__ __forceinline__ float round_act(float v) {
  if constexpr (sizeof(T) == sizeof(bf16_bits)) return bf16_to_float(float_to_bf16(v));
  return v;
}

// ---- two bf16 in one 32-bit word (the lower address in the low half, little-endian) ------------

__device__ __forceinline__ void unpack_bf16x2(uint32_t w, float* lo, float* hi) {
  *lo = bf16_to_float(static_cast<uint16_t>(w & 0xffffu));
  *hi = bf16_to_float(static_cast<uint16_t>(w >> 16));
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  return static_cast<uint32_t>(float_to_bf16(lo)) | (static_cast<uint32_t>(float_to_bf16(hi)) << 16);
}

__device__ __forceinline__ void unpack_bf16x4(uint2 w, float (&v)[4]) {
  unpack_bf16x2(w.x, &v[0], &v[1]);
  unpack_bf16x2(w.y, &v[2], &v[3]);
}

__device__ __forceinline__ uint2 pack_bf16x4(const float (&v)[4]) {
  return make_uint2(pack_bf16x2(v[0], v[1]), pack_bf16x2(v[2], v[3]));
}

// ---- four elements as one access: p aligned for 4 elements of T --------------------------------

__device__ __forceinline__ void load4(const float* p, float (&v)[4]) {
  const float4 x = *reinterpret_cast<const float4*>(p);
  v[0] = x.x;
  v[1] = x.y;
  v[2] = x.z;
  v[3] = x.w;
}

__device__ __forceinline__ void load4(const bf16_bits* p, float (&v)[4]) {
  unpack_bf16x4(*reinterpret_cast<const uint2*>(p), v);
}

__device__ __forceinline__ void store4(float* p, const float (&v)[4]) {
  *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
}

__device__ __forceinline__ void store4(bf16_bits* p, const float (&v)[4]) {
  *reinterpret_cast<uint2*>(p) = pack_bf16x4(v);
}

// ---- 16 bytes as one access: 4 fp32 or 8 bf16, p 16-byte aligned -------------------------------

template <typename T>
inline constexpr int kPer16Bytes = static_cast<int>(16 / sizeof(T));

__device__ __forceinline__ void load16(const float* p, float (&v)[4]) { load4(p, v); }

__device__ __forceinline__ void load16(const bf16_bits* p, float (&v)[8]) {
  const uint4 x = *reinterpret_cast<const uint4*>(p);
  unpack_bf16x2(x.x, &v[0], &v[1]);
  unpack_bf16x2(x.y, &v[2], &v[3]);
  unpack_bf16x2(x.z, &v[4], &v[5]);
  unpack_bf16x2(x.w, &v[6], &v[7]);
}

__device__ __forceinline__ void store16(float* p, const float (&v)[4]) { store4(p, v); }

__device__ __forceinline__ void store16(bf16_bits* p, const float (&v)[8]) {
  *reinterpret_cast<uint4*>(p) =
      make_uint4(pack_bf16x2(v[0], v[1]), pack_bf16x2(v[2], v[3]), pack_bf16x2(v[4], v[5]), pack_bf16x2(v[6], v[7]));
}

}  // namespace fp8::cuda::model
