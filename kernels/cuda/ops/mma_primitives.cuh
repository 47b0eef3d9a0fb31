// The instructions the mma.sync attention kernels use beyond plain C++, one inline PTX
// statement each (sm_80 and newer), so that the kernels read as the algorithm, the fragment
// layouts are written down once, and a CPU emulation can stand in for each
// (tests/ops/emulation/cuda/ops/mma_primitives.cuh):
//
// mma.m16n8k16 with bf16 operands and fp32 accumulators; lane = 4·g + t (g = lane / 4,
// t = lane % 4) holds
//   A (16 x 16, row-major)  a[0] = A[g][2t..2t+1]    a[1] = A[g+8][2t..2t+1]
//                           a[2] = A[g][2t+8..+9]    a[3] = A[g+8][2t+8..+9]
//   B (16 x 8, k by n)      b[0] = B[2t..2t+1][g]    b[1] = B[2t+8..+9][g]
//   C (16 x 8, fp32)        c[0..1] = C[g][2t..2t+1] c[2..3] = C[g+8][2t..2t+1]
// two bf16 to a 32-bit register, the lower-indexed element in the low half.
//
// ldmatrix.x4 loads four 8 x 8 bf16 matrices from shared memory, lanes 8i..8i+7 giving the
// addresses of matrix i's rows (16 bytes each); register i receives matrix i with lane
// 4·g + t holding row g, columns 2t..2t+1, or with .trans the transpose: rows 2t..2t+1 of
// column g.
#pragma once

#include <cstdint>

namespace fp8::cuda::mma {

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row)));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row)));
}

// c += a·b.
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// 16 bytes global -> shared without passing through registers; zeros when !valid (the
// source is then not read, but must still be a valid address).
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(dst)), "l"(src),
               "r"(valid ? 16 : 0));
}

// 4 bytes global -> shared (per-row statistics, whose rows need not be 16-byte aligned);
// a zero when !valid, as cp_async_16.
__device__ __forceinline__ void cp_async_4(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(shared_address(dst)), "l"(src),
               "r"(valid ? 4 : 0));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

// Waits until at most `kPending` of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// 2^x by the special-function unit: relative error about 2^-22, subnormal results flushed
// to zero, 2^-inf = 0. The softmax's probabilities are rounded to bf16 before they are
// used, so its error never shows beyond that rounding.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Two floats rounded to bf16 (nearest even) in one instruction, `lo` in the low half.
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

}  // namespace fp8::cuda::mma
