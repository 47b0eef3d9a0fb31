// The instructions of kernels/cuda/ops/mma_primitives.cuh on the CPU, for kernels run under
// ../../cuda_emulation.h: each is warp-collective (every lane deposits its operands, a
// barrier, every lane computes its own results from all of them, a barrier), with the
// fragment layouts as the PTX ISA defines them (restated in the original header). The
// products accumulate in fp32, in k order.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <vector>

#include "cuda_emulation.h"
#include "fp8/arith.h"

namespace fp8::cuda::mma {

inline float low_half(uint32_t w) { return bf16_to_float(static_cast<uint16_t>(w & 0xffffu)); }
inline float high_half(uint32_t w) { return bf16_to_float(static_cast<uint16_t>(w >> 16)); }

inline void ldmatrix(uint32_t (&r)[4], const void* row, bool trans) {
  emulation::Warp& w = fp8_emulated_warp();
  const unsigned lane = fp8_emulated_lane();
  if (reinterpret_cast<uintptr_t>(row) % 16 != 0) {
    std::fprintf(stderr, "ldmatrix: row address %p is not 16-byte aligned\n", row);
    std::abort();
  }
  w.rows[lane] = static_cast<const unsigned char*>(row);
  w.bar.arrive_and_wait();
  const unsigned g = lane / 4, t = lane % 4;
  for (unsigned i = 0; i < 4; ++i) {
    uint16_t lo, hi;
    if (!trans) {  // row g, columns 2t and 2t + 1 of matrix i
      std::memcpy(&lo, w.rows[8 * i + g] + 2 * (2 * t), 2);
      std::memcpy(&hi, w.rows[8 * i + g] + 2 * (2 * t + 1), 2);
    } else {  // rows 2t and 2t + 1 of column g
      std::memcpy(&lo, w.rows[8 * i + 2 * t] + 2 * g, 2);
      std::memcpy(&hi, w.rows[8 * i + 2 * t + 1] + 2 * g, 2);
    }
    r[i] = static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
  }
  w.bar.arrive_and_wait();
}

inline void ldmatrix_x4(uint32_t (&r)[4], const void* row) { ldmatrix(r, row, false); }
inline void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) { ldmatrix(r, row, true); }

inline void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  emulation::Warp& w = fp8_emulated_warp();
  const unsigned lane = fp8_emulated_lane();
  for (int i = 0; i < 4; ++i) w.a[lane][i] = a[i];
  w.b[lane][0] = b0;
  w.b[lane][1] = b1;
  w.bar.arrive_and_wait();
  float A[16][16], B[16][8];
  for (unsigned l = 0; l < 32; ++l) {
    const unsigned g = l / 4, t = l % 4;
    for (unsigned i = 0; i < 4; ++i) {
      const unsigned row = g + 8 * (i % 2), col = 2 * t + 8 * (i / 2);
      A[row][col] = low_half(w.a[l][i]);
      A[row][col + 1] = high_half(w.a[l][i]);
    }
    for (unsigned i = 0; i < 2; ++i) {
      B[2 * t + 8 * i][g] = low_half(w.b[l][i]);
      B[2 * t + 8 * i + 1][g] = high_half(w.b[l][i]);
    }
  }
  w.bar.arrive_and_wait();
  const unsigned g = lane / 4, t = lane % 4;
  for (unsigned i = 0; i < 4; ++i) {
    const unsigned row = g + 8 * (i / 2), col = 2 * t + i % 2;
    float s = c[i];
    for (int k = 0; k < 16; ++k) s += A[row][k] * B[k][col];
    c[i] = s;
  }
}

// cp.async of kBytes, asynchronous as on a GPU: at the issue the destination fills with
// garbage (0xcd, as a copy that has not landed may leave it), and the copy lands at the
// cp.async.wait_group that covers its group. So a read of the destination before that wait
// sees garbage, and so does a read by another thread of a buffer a copy is refilling: the
// missing waits and write-after-read races that an immediate copy would hide.
struct AsyncCopy {
  void* dst;
  const void* src;
  size_t bytes;
  bool valid;
};
inline thread_local std::vector<AsyncCopy> uncommitted_copies;
inline thread_local std::deque<std::vector<AsyncCopy>> committed_copies;  // oldest first

template <size_t kBytes>
inline void cp_async(void* dst, const void* src, bool valid) {
  if (reinterpret_cast<uintptr_t>(dst) % kBytes != 0 || reinterpret_cast<uintptr_t>(src) % kBytes != 0) {
    std::fprintf(stderr, "cp.async: %p <- %p is not %zu-byte aligned\n", dst, src, kBytes);
    std::abort();
  }
  std::memset(dst, 0xcd, kBytes);
  uncommitted_copies.push_back({dst, src, kBytes, valid});
}

inline void cp_async_16(void* dst, const void* src, bool valid) { cp_async<16>(dst, src, valid); }
inline void cp_async_4(void* dst, const void* src, bool valid) { cp_async<4>(dst, src, valid); }

inline void cp_async_commit() {
  committed_copies.push_back(std::move(uncommitted_copies));
  uncommitted_copies.clear();
}

// Lands every committed group but the kPending most recent.
template <int kPending>
inline void cp_async_wait() {
  while (committed_copies.size() > static_cast<size_t>(kPending)) {
    for (const AsyncCopy& c : committed_copies.front()) {
      emulation::generic_writes_unfenced = true;
      if (c.valid) {
        std::memcpy(c.dst, c.src, c.bytes);
      } else {
        std::memset(c.dst, 0, c.bytes);
      }
    }
    committed_copies.pop_front();
  }
}

// ex2.approx.ftz and cvt.rn.bf16x2.f32: the exact 2^x (the instruction's own error, about
// 2^-22, is below what the tests can see) and two roundings to nearest even.
inline float exp2_approx(float x) { return std::exp2(x); }
inline uint32_t pack_bf16x2(float lo, float hi) {
  return static_cast<uint32_t>(float_to_bf16(lo)) | (static_cast<uint32_t>(float_to_bf16(hi)) << 16);
}

}  // namespace fp8::cuda::mma
