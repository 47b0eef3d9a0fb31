// The instructions of kernels/cuda/ops/wgmma_primitives.cuh on the CPU, for kernels run
// under ../../cuda_emulation.h with blocks of one warpgroup (128 threads): each wgmma is
// block-collective (every thread deposits its A fragment, a barrier, every thread computes
// its own accumulators from all of them and from shared memory, a barrier), synchronous, so
// fence / commit / wait have nothing to do. B is read from shared memory as this project
// reads the descriptors (the canonical layouts, then the 128-byte swizzle on the absolute
// address: bits 4-6 XOR bits 7-9); what the hardware makes of them is
// fp8_wgmma_probe_test's business, on a GPU. The products accumulate in fp32, in k order
// (as the emulated mma.sync does, so kernels on either agree bit for bit here).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "cuda_emulation.h"
#include "fp8/arith.h"

namespace fp8::cuda::wgmma {

constexpr uint32_t kSwizzle128 = 1;
constexpr uint32_t kKMajorLbo = 16, kKMajorSbo = 1024;
constexpr uint32_t kMnMajorLbo = 16, kMnMajorSbo = 1024;

inline int swizzled_offset(int row, int chunk) { return row * 128 + ((chunk ^ (row & 7)) << 4); }

// A host pointer does not fit the hardware's 14-bit address field: the emulated descriptor
// keeps the pointer and the offsets as given.
struct Descriptor {
  const unsigned char* start = nullptr;
  uint32_t lbo = 0, sbo = 0, layout = 0;
  bool operator==(const Descriptor&) const = default;
};

inline Descriptor descriptor(const void* smem, uint32_t lbo, uint32_t sbo, uint32_t layout) {
  return {static_cast<const unsigned char*>(smem), lbo, sbo, layout};
}

#define FP8_HAVE_WGMMA 1
inline void fence() {}
inline void commit() {}
template <int kPending>
inline void wait() {}
inline void proxy_fence() {}
inline void fence_operand(float&) {}

// B[k][n] of one k-step under descriptor b: K-major (rows are n) or MN-major (rows are k).
inline float b_element(const Descriptor& b, bool mn_major, int k, int n) {
  if (b.layout != kSwizzle128 || reinterpret_cast<uintptr_t>(b.start) % 16 != 0) {
    std::fprintf(stderr, "wgmma: only 16-byte aligned 128-byte-swizzled operands are emulated\n");
    std::abort();
  }
  uintptr_t logical = reinterpret_cast<uintptr_t>(b.start);
  if (!mn_major) {
    logical += static_cast<uintptr_t>((n / 8) * b.sbo + (n % 8) * 128 + (k / 8) * 16 + (k % 8) * 2);
  } else {
    logical += static_cast<uintptr_t>((n % 8) * 2 + ((n / 8) % 8) * 16 + (n / 64) * b.lbo + (k % 8) * 128 +
                                      (k / 8) * b.sbo);
  }
  const uintptr_t physical = logical ^ (((logical >> 7) & 7u) << 4);
  uint16_t bits;
  std::memcpy(&bits, reinterpret_cast<const void*>(physical), 2);
  return bf16_to_float(bits);
}

inline uint32_t exchanged_a[128][4];
inline Descriptor exchanged_b[128];

template <int kTransB>
inline void mma_m64n64k16(float (&d)[32], const uint32_t (&a)[4], Descriptor b, int accumulate) {
  const unsigned tid = fp8_emulated_thread();
  if (blockDim.x * blockDim.y != 128) {
    std::fprintf(stderr, "wgmma: the emulation runs blocks of one warpgroup (128 threads)\n");
    std::abort();
  }
  for (int i = 0; i < 4; ++i) exchanged_a[tid][i] = a[i];
  exchanged_b[tid] = b;
  __syncthreads();
  for (unsigned l = 0; l < 128; ++l) {
    if (!(exchanged_b[l] == exchanged_b[0])) {
      std::fprintf(stderr, "wgmma: the threads of the warpgroup passed different descriptors\n");
      std::abort();
    }
  }
  float A[64][16], B[16][64];
  for (unsigned l = 0; l < 128; ++l) {
    const unsigned w = l / 32, g = l % 32 / 4, t = l % 4;
    for (unsigned i = 0; i < 4; ++i) {
      const unsigned row = 16 * w + g + 8 * (i % 2), col = 2 * t + 8 * (i / 2);
      A[row][col] = bf16_to_float(static_cast<uint16_t>(exchanged_a[l][i] & 0xffffu));
      A[row][col + 1] = bf16_to_float(static_cast<uint16_t>(exchanged_a[l][i] >> 16));
    }
  }
  for (int k = 0; k < 16; ++k) {
    for (int n = 0; n < 64; ++n) B[k][n] = b_element(exchanged_b[0], kTransB != 0, k, n);
  }
  __syncthreads();  // every thread has read the exchange before any deposits again
  const unsigned w = tid / 32, g = tid % 32 / 4, t = tid % 4;
  for (unsigned j = 0; j < 8; ++j) {
    for (unsigned e = 0; e < 4; ++e) {
      const unsigned row = 16 * w + g + 8 * (e / 2), col = 8 * j + 2 * t + e % 2;
      float s = accumulate != 0 ? d[4 * j + e] : 0.0f;
      for (int k = 0; k < 16; ++k) s += A[row][k] * B[k][col];
      d[4 * j + e] = s;
    }
  }
}

}  // namespace fp8::cuda::wgmma
