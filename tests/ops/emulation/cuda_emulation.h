// Runs CUDA kernel source on the CPU: one std::thread per CUDA thread, a barrier per block
// for __syncthreads and one per warp for __syncwarp and the warp-collective operations
// (shuffles here; mma.sync, ldmatrix and cp.async in cuda/ops/mma_primitives.cuh beside
// this file, wgmma in cuda/ops/wgmma_primitives.cuh), atomics as real atomics, and shared
// memory filled with garbage at each block's start, as a GPU's is. Blocks run one after
// another. Include this before the kernels' source, with this folder ahead of kernels/ on
// the include path.
//
// What it can show: wrong indexing, fragment layouts used against the PTX ISA's
// definitions (as the emulated instructions implement them), missing barriers between
// warps of a block (as wrong results, not reliably), uninitialised shared memory read, and
// asynchronous results (cp.async copies, wgmma accumulators) used before the wait that
// covers them: they land only at that wait, garbage until then; and copies read by wgmma
// with no fence.proxy.async after they landed.
// What it cannot: races between blocks, the GPU's expf and rounding of fused multiply-adds,
// speed.
#pragma once

#include <cuda_runtime_api.h>  // the CUDA types the kernels' host-side headers use
#include <vector_functions.h>  // make_uint4 and the like, host functions too

// The host compiler's meaning for CUDA's qualifiers.
#undef __device__
#undef __global__
#undef __host__
#undef __forceinline__
#undef __launch_bounds__
#define __device__
#define __global__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__
// Static shared arrays: one per kernel instantiation, which blocks running one after
// another share as a GPU's blocks each get theirs (and, like them, find garbage in).
#undef __shared__
#define __shared__ static

#define FP8_CUDA_EMULATION 1

#include <algorithm>
#include <atomic>
#include <barrier>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

namespace fp8::emulation {

struct Index {
  unsigned x = 0, y = 0, z = 0;
};

// The exchange space of one warp's collective operations.
struct Warp {
  std::barrier<> bar{32};
  uint32_t words[32];
  uint32_t a[32][4];
  uint32_t b[32][2];
  const unsigned char* rows[32];
};

struct Block {
  Block(int threads, size_t bytes) : bar(threads), warps((threads + 31) / 32), smem(bytes + 256) {
    base = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem.data()) + 127) / 128 * 128);
    std::memset(base, 0xcd, bytes);  // garbage, as real shared memory holds
  }
  std::barrier<> bar;
  std::vector<Warp> warps;
  std::vector<unsigned char> smem;
  unsigned char* base = nullptr;
};

inline thread_local Block* current_block = nullptr;
// Set when cp.async copies of this thread landed in shared memory (through the generic
// proxy) and no fence.proxy.async followed yet: wgmma, which reads shared memory through
// the async proxy, must not be issued then (cuda/ops/wgmma_primitives.cuh checks).
inline thread_local bool generic_writes_unfenced = false;

// Runs kernel(args...) over a grid of blocks (x, y) of block.x x block.y threads (a
// multiple of 32 in all), with `smem` bytes of dynamic shared memory; launch_grid() takes
// 1-D blocks, launch() also a 1-D grid.
template <class Kernel, class... Args>
void launch_blocks(dim3 grid, dim3 block, size_t smem, Kernel kernel, Args... args);
template <class Kernel, class... Args>
void launch_grid(unsigned grid_x, unsigned grid_y, int threads, size_t smem, Kernel kernel, Args... args);
template <class Kernel, class... Args>
void launch(unsigned blocks, int threads, size_t smem, Kernel kernel, Args... args) {
  launch_grid(blocks, 1, threads, smem, kernel, args...);
}

}  // namespace fp8::emulation

inline thread_local fp8::emulation::Index threadIdx, blockIdx, gridDim, blockDim;

// The thread's place in its block, x fastest (what decides its warp and lane).
inline unsigned fp8_emulated_thread() { return threadIdx.y * blockDim.x + threadIdx.x; }
inline unsigned fp8_emulated_lane() { return fp8_emulated_thread() % 32; }

inline unsigned char* fp8_emulated_shared_bytes() { return fp8::emulation::current_block->base; }
inline fp8::emulation::Warp& fp8_emulated_warp() {
  return fp8::emulation::current_block->warps[fp8_emulated_thread() / 32];
}
inline void __syncthreads() { fp8::emulation::current_block->bar.arrive_and_wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) { fp8_emulated_warp().bar.arrive_and_wait(); }
// Shuffles: every lane deposits its value, a barrier, each reads its source lane's.
inline uint32_t fp8_emulated_lane_value(uint32_t v, unsigned source_lane) {
  fp8::emulation::Warp& w = fp8_emulated_warp();
  w.words[fp8_emulated_lane()] = v;
  w.bar.arrive_and_wait();
  const uint32_t r = w.words[source_lane];
  w.bar.arrive_and_wait();
  return r;
}
inline uint32_t __shfl_xor_sync(unsigned, uint32_t v, int lane_mask) {
  return fp8_emulated_lane_value(v, fp8_emulated_lane() ^ static_cast<unsigned>(lane_mask));
}
inline uint32_t __shfl_down_sync(unsigned, uint32_t v, unsigned delta) {
  const unsigned lane = fp8_emulated_lane();
  return fp8_emulated_lane_value(v, lane + delta < 32 ? lane + delta : lane);
}
inline uint32_t __shfl_up_sync(unsigned, uint32_t v, unsigned delta) {
  const unsigned lane = fp8_emulated_lane();
  return fp8_emulated_lane_value(v, lane >= delta ? lane - delta : lane);
}
// Warp reductions: every lane deposits, then each reads all 32.
template <class Op>
inline uint32_t fp8_emulated_warp_reduce(uint32_t v, Op op) {
  fp8::emulation::Warp& w = fp8_emulated_warp();
  w.words[fp8_emulated_lane()] = v;
  w.bar.arrive_and_wait();
  uint32_t r = w.words[0];
  for (int i = 1; i < 32; ++i) r = op(r, w.words[i]);
  w.bar.arrive_and_wait();
  return r;
}
inline uint32_t __reduce_max_sync(unsigned, uint32_t v) {
  return fp8_emulated_warp_reduce(v, [](uint32_t a, uint32_t b) { return a > b ? a : b; });
}
inline uint32_t __reduce_add_sync(unsigned, uint32_t v) {
  return fp8_emulated_warp_reduce(v, [](uint32_t a, uint32_t b) { return a + b; });
}
// PTX prmt (default mode): byte i of the result is byte s_i of the 8 bytes {y, x}.
inline uint32_t __byte_perm(uint32_t x, uint32_t y, uint32_t s) {
  const uint64_t bytes = (static_cast<uint64_t>(y) << 32) | x;
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) r |= static_cast<uint32_t>((bytes >> (8 * ((s >> (4 * i)) & 7u))) & 0xffu) << (8 * i);
  return r;
}
// A shuffle moves the 32 bits as they are, whatever they mean.
inline float __shfl_xor_sync(unsigned mask, float v, int lane_mask) {
  return std::bit_cast<float>(__shfl_xor_sync(mask, std::bit_cast<uint32_t>(v), lane_mask));
}
inline float __shfl_down_sync(unsigned mask, float v, unsigned delta) {
  return std::bit_cast<float>(__shfl_down_sync(mask, std::bit_cast<uint32_t>(v), delta));
}
// 64 bits move as two 32-bit shuffles, as the CUDA headers implement it.
inline double __shfl_down_sync(unsigned mask, double v, unsigned delta) {
  const auto bits = std::bit_cast<uint64_t>(v);
  const uint32_t lo = __shfl_down_sync(mask, static_cast<uint32_t>(bits), delta);
  const uint32_t hi = __shfl_down_sync(mask, static_cast<uint32_t>(bits >> 32), delta);
  return std::bit_cast<double>(static_cast<uint64_t>(hi) << 32 | lo);
}
inline float __uint_as_float(uint32_t u) { return std::bit_cast<float>(u); }
// The threads of a block run at once: a real atomic.
inline unsigned atomicMax(unsigned* p, unsigned v) {
  std::atomic_ref<unsigned> word(*p);
  unsigned old = word.load();
  while (old < v && !word.compare_exchange_weak(old, v)) {
  }
  return old;
}
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
  return std::atomic_ref<unsigned long long>(*p).fetch_add(v);
}
template <class T>
inline T __ldg(const T* p) {
  return *p;
}
inline float __fmul_rn(float a, float b) { return a * b; }
[[noreturn]] inline void __trap() { std::abort(); }
using std::max;
using std::min;

template <class Kernel, class... Args>
void fp8::emulation::launch_blocks(dim3 grid, dim3 block, size_t smem, Kernel kernel, Args... args) {
  const int threads = static_cast<int>(block.x * block.y);
  for (unsigned by = 0; by < grid.y; ++by) {
    for (unsigned bx = 0; bx < grid.x; ++bx) {
      auto state = std::make_unique<Block>(threads, smem);
      std::vector<std::thread> ts;
      ts.reserve(static_cast<size_t>(threads));
      for (int t = 0; t < threads; ++t) {
        ts.emplace_back([&, t] {
          threadIdx.x = static_cast<unsigned>(t) % block.x;
          threadIdx.y = static_cast<unsigned>(t) / block.x;
          blockDim.x = block.x;
          blockDim.y = block.y;
          blockIdx.x = bx;
          blockIdx.y = by;
          gridDim.x = grid.x;
          gridDim.y = grid.y;
          current_block = state.get();
          kernel(args...);
        });
      }
      for (auto& t : ts) t.join();
    }
  }
}

template <class Kernel, class... Args>
void fp8::emulation::launch_grid(unsigned grid_x, unsigned grid_y, int threads, size_t smem, Kernel kernel,
                                 Args... args) {
  launch_blocks(dim3(grid_x, grid_y), dim3(static_cast<unsigned>(threads)), smem, kernel, args...);
}
