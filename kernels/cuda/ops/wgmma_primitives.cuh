// Hopper's warpgroup MMA (wgmma.mma_async, sm_90a) as the attention kernels use it, one
// inline PTX statement each, so that a CPU emulation can stand in for each
// (tests/ops/emulation/cuda/ops/wgmma_primitives.cuh), as for mma_primitives.cuh.
//
// m64n64k16, bf16 operands, fp32 accumulators, issued by a warpgroup (4 warps, 128 threads):
//   A (64 x 16) from registers: warp w holds rows 16w..16w+15 as mma.sync m16n8k16's A
//     fragment (mma_primitives.cuh): a[0] = A[16w+g][2t..2t+1], a[1] = rows + 8,
//     a[2] = columns + 8, a[3] = both.
//   B (16 x 64) from shared memory, through a matrix descriptor.
//   D (64 x 64): d[4j + e] = D[16w + g + 8·(e / 2)][8j + 2t + e % 2], mma.sync's C
//     fragment for each 8-column block j.
// B's shared layout here is always "128-byte rows, 128-byte swizzle": a 64 x 64 bf16 tile
// whose row r (128 bytes, 1024-byte aligned tile) keeps its 16-byte chunk c at chunk
// c ^ (r % 8) (swizzled_offset). Read as K-major (rows are B's columns n, e.g. K's keys in
// Q·Kᵀ) its k-steps start 32 bytes apart; read MN-major (transposed: rows are B's rows k,
// e.g. V's keys in P·V) they start 16 rows (2048 bytes) apart.
//
// Which readings of the descriptors the hardware shares is what fp8_wgmma_probe_test
// (tests/kernels/wgmma_probe.h) asks of a GPU; the constants below follow its probes
// kKMajorSwizzle128 and kMnMajorSwizzle128, the readings the probes found exact on sm_90
// hardware (see bench/RESULTS.md).
#pragma once

#include <cstdint>

namespace fp8::cuda::wgmma {

constexpr uint32_t kSwizzle128 = 1;  // the descriptor's layout type (bits 62-63)
// Leading and stride byte offsets of the two readings (the probe's): K-major, the SBO steps
// 8 rows; MN-major, with one 64-column swizzle atom across n, the SBO steps 8 k-rows and
// the LBO (between atoms along n) is unused.
constexpr uint32_t kKMajorLbo = 16, kKMajorSbo = 1024;
constexpr uint32_t kMnMajorLbo = 16, kMnMajorSbo = 1024;
// The MN-major offsets as a kernel argument: a launcher may pass the other reading of the
// pair (LBO and SBO exchanged, the probe's kMnMajorSwizzle128Exchanged) without a rebuild.
struct MnMajorOffsets {
  uint32_t lbo = kMnMajorLbo, sbo = kMnMajorSbo;
};

// Byte offset of 16-byte chunk `chunk` of row `row` in a swizzled tile of 128-byte rows.
__device__ __forceinline__ int swizzled_offset(int row, int chunk) { return row * 128 + ((chunk ^ (row & 7)) << 4); }

using Descriptor = uint64_t;

// The 64-bit shared-memory matrix descriptor: start address, LBO and SBO in 16-byte units
// (14 bits each), the layout type in bits 62-63.
__device__ __forceinline__ Descriptor descriptor(const void* smem, uint32_t lbo, uint32_t sbo, uint32_t layout) {
  const auto address = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  return static_cast<uint64_t>((address >> 4) & 0x3fffu) | static_cast<uint64_t>((lbo >> 4) & 0x3fffu) << 16 |
         static_cast<uint64_t>((sbo >> 4) & 0x3fffu) << 32 | static_cast<uint64_t>(layout) << 62;
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FP8_HAVE_WGMMA 1
// Orders this thread's register writes (accumulators, A fragments) before the wgmmas after it.
__device__ __forceinline__ void fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Waits until at most kPending committed groups are in flight.
template <int kPending>
__device__ __forceinline__ void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Shared memory written by this thread's ordinary stores or cp.async, made visible to the
// async proxy through which wgmma reads it (then a barrier makes it the block's).
__device__ __forceinline__ void proxy_fence() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// Keeps the compiler from moving accesses of v across this point: wgmma writes the
// accumulators behind its back until wait().
__device__ __forceinline__ void fence_operand(float& v) { asm volatile("" : "+f"(v)::"memory"); }

// d = A·B (+ d when accumulate), A from registers; kTransB: B read MN-major.
template <int kTransB>
__device__ __forceinline__ void mma_m64n64k16(float (&d)[32], const uint32_t (&a)[4], Descriptor b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, "
      "%8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, "
      "%24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate), "n"(kTransB));
}
#endif

}  // namespace fp8::cuda::wgmma
