// The instructions of kernels/cuda/ops/wgmma_primitives.cuh on the CPU, for kernels run
// under ../../cuda_emulation.h with blocks of one warpgroup (128 threads), asynchronous as
// on a GPU:
// - each wgmma is block-collective at its issue: every thread deposits its A fragment, a
//   barrier, thread 0 files the 64 x 16 A with the descriptor, a barrier;
// - its accumulators fill with a NaN pattern at the issue (their values kept aside), and
//   the product is computed at the wgmma.wait_group that covers its group, reading B from
//   shared memory then; so an accumulator read before that wait, or shared memory
//   rewritten before it, gives wrong results here, and an accumulator written meanwhile
//   aborts;
// - a wgmma issued with no wgmma.fence since the thread's last wait aborts (registers are
//   touched after a wait; the fence orders them before the next wgmma), and so does one
//   issued after the thread's cp.async copies landed with no fence.proxy.async since
//   (wgmma reads shared memory through the async proxy).
// B is read from shared memory as this project reads the descriptors (the canonical
// layouts, then the 128-byte swizzle on the absolute address: bits 4-6 XOR bits 7-9);
// what the hardware makes of them is fp8_wgmma_probe_test's business, on a GPU. The
// products accumulate in fp32, in k order (as the emulated mma.sync does, so kernels on
// either agree bit for bit here).
#pragma once

#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <vector>

#include "cuda_emulation.h"
#include "fp8/arith.h"

namespace fp8::cuda::wgmma {

constexpr uint32_t kSwizzle128 = 1;
constexpr uint32_t kKMajorLbo = 16, kKMajorSbo = 1024;
constexpr uint32_t kMnMajorLbo = 16, kMnMajorSbo = 1024;
struct MnMajorOffsets {
  uint32_t lbo = kMnMajorLbo, sbo = kMnMajorSbo;
};

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

// The block's wgmmas issued and not yet completed (blocks run one after another): A, as
// the warpgroup's fragments make it, and B's descriptor, in slots by issue number.
struct Issued {
  float a[64][16];
  Descriptor b;
  bool mn_major;
};
constexpr int kSlots = 64;
inline Issued issued[kSlots];
inline uint32_t exchanged_a[128][4];
inline Descriptor exchanged_b[128];

// One thread's side of the wgmmas in flight: which of its accumulators each writes, and
// the values those accumulators take as the products complete.
struct ThreadOp {
  float* d;
  int accumulate;
  uint64_t number;  // issue number: the slot is number % kSlots
};
struct InFlight {
  float* d;
  float value[32];
};
inline thread_local std::vector<ThreadOp> uncommitted_ops;
inline thread_local std::deque<std::vector<ThreadOp>> committed_ops;  // oldest first
inline thread_local std::vector<InFlight> in_flight;
inline thread_local uint64_t issued_count = 0;
inline thread_local bool fenced = false;

constexpr uint32_t kNotLandedBits = 0x7fc0dead;  // a quiet NaN: what an accumulator reads in flight
inline float not_landed() { return std::bit_cast<float>(kNotLandedBits); }

#define FP8_HAVE_WGMMA 1
inline void fence() { fenced = true; }
inline void commit() {
  committed_ops.push_back(std::move(uncommitted_ops));
  uncommitted_ops.clear();
}
inline void proxy_fence() { emulation::generic_writes_unfenced = false; }
inline void fence_operand(float&) {}

inline InFlight& in_flight_entry(float* d) {
  for (InFlight& f : in_flight) {
    if (f.d == d) return f;
  }
  std::fprintf(stderr, "wgmma: an accumulator lost its in-flight entry\n");
  std::abort();
}

// Completes every committed group but the kPending most recent, in issue order.
template <int kPending>
inline void wait() {
  const unsigned tid = fp8_emulated_thread();
  const unsigned w = tid / 32, g = tid % 32 / 4, t = tid % 4;
  __syncthreads();  // wait_group is warpgroup-wide: what the block wrote so far is what B reads
  while (committed_ops.size() > static_cast<size_t>(kPending)) {
    for (const ThreadOp& op : committed_ops.front()) {
      const Issued& is = issued[op.number % kSlots];
      float B[16][64];
      for (int k = 0; k < 16; ++k) {
        for (int n = 0; n < 64; ++n) B[k][n] = b_element(is.b, is.mn_major, k, n);
      }
      InFlight& f = in_flight_entry(op.d);
      for (unsigned j = 0; j < 8; ++j) {
        for (unsigned e = 0; e < 4; ++e) {
          const unsigned row = 16 * w + g + 8 * (e / 2), col = 8 * j + 2 * t + e % 2;
          float sum = op.accumulate != 0 ? f.value[4 * j + e] : 0.0f;
          for (int k = 0; k < 16; ++k) sum += is.a[row][k] * B[k][col];
          f.value[4 * j + e] = sum;
        }
      }
    }
    committed_ops.pop_front();
  }
  // An accumulator with nothing left in flight takes its value.
  for (size_t i = 0; i < in_flight.size();) {
    InFlight& f = in_flight[i];
    bool pending = false;
    for (const auto& group : committed_ops) {
      for (const ThreadOp& op : group) pending = pending || op.d == f.d;
    }
    for (const ThreadOp& op : uncommitted_ops) pending = pending || op.d == f.d;
    if (pending) {
      ++i;
      continue;
    }
    for (int e = 0; e < 32; ++e) {
      if (std::bit_cast<uint32_t>(f.d[e]) != kNotLandedBits) {
        std::fprintf(stderr, "wgmma: accumulator element %d was written while a wgmma was in flight\n", e);
        std::abort();
      }
      f.d[e] = f.value[e];
    }
    in_flight.erase(in_flight.begin() + static_cast<std::ptrdiff_t>(i));
  }
  fenced = false;
  __syncthreads();  // every thread has read B before any rewrites shared memory
}

template <int kTransB>
inline void mma_m64n64k16(float (&d)[32], const uint32_t (&a)[4], Descriptor b, int accumulate) {
  const unsigned tid = fp8_emulated_thread();
  if (blockDim.x * blockDim.y != 128) {
    std::fprintf(stderr, "wgmma: the emulation runs blocks of one warpgroup (128 threads)\n");
    std::abort();
  }
  if (!fenced) {
    std::fprintf(stderr, "wgmma: issued without a wgmma.fence since the thread's last wait\n");
    std::abort();
  }
  if (emulation::generic_writes_unfenced) {
    std::fprintf(stderr, "wgmma: issued after cp.async copies landed without a fence.proxy.async since\n");
    std::abort();
  }
  size_t ops = uncommitted_ops.size();
  for (const auto& group : committed_ops) ops += group.size();
  if (ops >= kSlots) {
    std::fprintf(stderr, "wgmma: more than %d in flight\n", kSlots);
    std::abort();
  }
  for (int i = 0; i < 4; ++i) exchanged_a[tid][i] = a[i];
  exchanged_b[tid] = b;
  __syncthreads();
  if (tid == 0) {
    Issued& is = issued[issued_count % kSlots];
    for (unsigned l = 0; l < 128; ++l) {
      if (!(exchanged_b[l] == exchanged_b[0])) {
        std::fprintf(stderr, "wgmma: the threads of the warpgroup passed different descriptors\n");
        std::abort();
      }
      const unsigned w = l / 32, g = l % 32 / 4, t = l % 4;
      for (unsigned i = 0; i < 4; ++i) {
        const unsigned row = 16 * w + g + 8 * (i % 2), col = 2 * t + 8 * (i / 2);
        is.a[row][col] = bf16_to_float(static_cast<uint16_t>(exchanged_a[l][i] & 0xffffu));
        is.a[row][col + 1] = bf16_to_float(static_cast<uint16_t>(exchanged_a[l][i] >> 16));
      }
    }
    is.b = exchanged_b[0];
    is.mn_major = kTransB != 0;
  }
  __syncthreads();  // the slot is filed, and every thread's fragment read, before any deposits again
  bool known = false;
  for (const InFlight& f : in_flight) known = known || f.d == d;
  if (!known) {
    InFlight f{d, {}};
    std::memcpy(f.value, d, sizeof f.value);
    in_flight.push_back(f);
    for (float& x : d) x = not_landed();
  }
  uncommitted_ops.push_back({d, accumulate, issued_count++});
}

}  // namespace fp8::cuda::wgmma
