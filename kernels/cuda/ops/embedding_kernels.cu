// Embedding lookup and its backward.
//
// The backward must add every row of grad_out into its token's table row without racing,
// and in the CPU's order (increasing position per token) so that the sums are
// bit-identical to the CPU's. Three steps:
//  1. keys[i] = tokens[i] (an out-of-range id becomes the sentinel, which sorts last and
//     is skipped), positions[i] = i;
//  2. a stable radix sort of (key, position) by key: each token's positions end up
//     contiguous and still increasing;
//  3. one warp per sorted position; the warps at the start of a run (of one token) add the
//     run's rows into the table row in sorted order, each lane owning 1 or 4 columns, and
//     the rest return at once. The number of runs is never needed on the host.
//
// Activations (out, grad_out) are fp32 or bf16 (the element type T); the table and its
// gradient are fp32. Forward rounds each table value once into a bf16 out; backward widens
// each bf16 grad_out value and adds it in fp32, as the CPU adds its widened rows, so both
// stay bit-identical to the CPU in bf16 too.
#include <cuda_runtime.h>

#include <bit>
#include <cstdint>
#include <cub/device/device_radix_sort.cuh>

#include "cuda/ops/kernel_util.cuh"
#include "cuda/ops/model_kernels.h"
#include "cuda/ops/row_sweep.cuh"

namespace fp8::cuda {
namespace {

using model::kFullMask;
using model::kThreads;
using model::kWarps;

// ---- forward -----------------------------------------------------------------------------------

// Items are groups of 4 columns (kVec: dim % 4 == 0, table 16-byte aligned, out aligned
// for 4 elements of T) or single columns.
template <typename T, bool kVec>
__global__ void __launch_bounds__(kThreads)
    embedding_forward_kernel(const int32_t* __restrict__ tokens, int64_t n, const float* __restrict__ table,
                             int64_t vocab, int64_t dim, T* __restrict__ out) {
  const model::SweepPos p = model::sweep_pos();
  const int64_t items = kVec ? dim / 4 : dim;
  if (p.item >= items) return;
  for (int64_t r = p.row; r < n; r += p.row_stride) {
    const int32_t token = tokens[r];
    const bool valid = token >= 0 && token < vocab;
    if constexpr (kVec) {
      float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      if (valid) model::load4(table + token * dim + 4 * p.item, v);
      model::store4(out + r * dim + 4 * p.item, v);
    } else {
      model::store_act(out + r * dim + p.item, valid ? table[token * dim + p.item] : 0.0f);
    }
  }
}

// ---- backward ------------------------------------------------------------------------------------

// Larger than every valid id: vocab, or 2^31 when vocab exceeds int32 (ids are int32).
uint32_t sentinel_of(int64_t vocab) {
  return vocab < (int64_t{1} << 31) ? static_cast<uint32_t>(vocab) : uint32_t{1} << 31;
}

// The sort only needs the bits a key can have (one or two 8-bit passes for common vocabularies).
int key_bits(int64_t vocab) { return static_cast<int>(std::bit_width(sentinel_of(vocab))); }

__global__ void __launch_bounds__(kThreads)
    embedding_keys_kernel(const int32_t* __restrict__ tokens, int64_t n, int64_t vocab, uint32_t sentinel,
                          uint32_t* __restrict__ keys, uint32_t* __restrict__ positions) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n; i += stride) {
    const int32_t token = tokens[i];
    keys[i] = token >= 0 && token < vocab ? static_cast<uint32_t>(token) : sentinel;
    positions[i] = static_cast<uint32_t>(i);
  }
}

// What one lane owns of a table row: 4 columns as a float4 (kVec: dim % 4 == 0,
// grad_table 16-byte aligned, grad_out aligned for 4 elements of its type) or a single
// column. `load` reads the fp32 table, or grad_out's fp32 or bf16 (widened) values.
template <bool kVec>
struct LaneCols;

template <>
struct LaneCols<true> {
  using T = float4;
  static constexpr int kCols = 4;
  __device__ static T load(const float* p) { return *reinterpret_cast<const float4*>(p); }
  __device__ static T load(const model::bf16_bits* p) {
    float v[4];
    model::load4(p, v);
    return make_float4(v[0], v[1], v[2], v[3]);
  }
  __device__ static void store(float* p, T v) { *reinterpret_cast<float4*>(p) = v; }
  __device__ static T zero() { return make_float4(0.0f, 0.0f, 0.0f, 0.0f); }
  __device__ static void add(T& acc, T v) {
    acc.x += v.x;
    acc.y += v.y;
    acc.z += v.z;
    acc.w += v.w;
  }
};

template <>
struct LaneCols<false> {
  using T = float;
  static constexpr int kCols = 1;
  __device__ static T load(const float* p) { return *p; }
  __device__ static T load(const model::bf16_bits* p) { return model::load_act(p); }
  __device__ static void store(float* p, T v) { *p = v; }
  __device__ static T zero() { return 0.0f; }
  __device__ static void add(T& acc, T v) { acc += v; }
};

// Rows of a run whose loads are issued before their additions: the loads are
// independent, the additions must stay in position order.
constexpr int kRowsInFlight = 8;

// Grid: x over sorted positions (kWarps per block, looping), y over column slices of
// 32 lanes (looping). Control flow around the shuffles is warp-uniform: every lane of a
// warp reads the same keys, so it agrees on the run start and the run's length.
template <typename G, bool kVec>
__global__ void __launch_bounds__(kThreads)
    embedding_backward_runs_kernel(const uint32_t* __restrict__ keys, const uint32_t* __restrict__ positions, int64_t n,
                                   uint32_t sentinel, const G* __restrict__ grad_out, int64_t dim,
                                   float* __restrict__ grad_table) {
  using L = LaneCols<kVec>;
  using T = typename L::T;
  constexpr int64_t kWarpCols = 32 * L::kCols;
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int64_t warp_stride = static_cast<int64_t>(gridDim.x) * kWarps;
  for (int64_t s = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5); s < n; s += warp_stride) {
    const uint32_t key = keys[s];
    if (key >= sentinel || (s > 0 && keys[s - 1] == key)) continue;  // not the start of a run
    float* const table_row = grad_table + static_cast<int64_t>(key) * dim;
    for (int64_t c0 = static_cast<int64_t>(blockIdx.y) * kWarpCols; c0 < dim;
         c0 += static_cast<int64_t>(gridDim.y) * kWarpCols) {
      const int64_t c = c0 + lane * L::kCols;
      const bool active = c < dim;  // with kVec, dim % 4 == 0 puts c + 3 < dim too
      T acc = active ? L::load(table_row + c) : L::zero();
      // The run in windows of 32 sorted positions, a lane loading one position each.
      // Keys ascend, so the lanes still in the run form a prefix of the window.
      for (int64_t e = s;; e += 32) {
        const int64_t idx = e + lane;
        const bool in_run = idx < n && keys[idx] == key;
        const int count = __popc(__ballot_sync(kFullMask, in_run));
        const uint32_t my_position = in_run ? positions[idx] : 0u;
        int j = 0;
        for (; j + kRowsInFlight <= count; j += kRowsInFlight) {
          T v[kRowsInFlight];
#pragma unroll
          for (int u = 0; u < kRowsInFlight; ++u) {
            const int64_t row = __shfl_sync(kFullMask, my_position, j + u);
            v[u] = active ? L::load(grad_out + row * dim + c) : L::zero();
          }
#pragma unroll
          for (int u = 0; u < kRowsInFlight; ++u) L::add(acc, v[u]);
        }
        for (; j < count; ++j) {
          const int64_t row = __shfl_sync(kFullMask, my_position, j);
          if (active) L::add(acc, L::load(grad_out + row * dim + c));
        }
        if (count < 32) break;
      }
      if (active) L::store(table_row + c, acc);
    }
  }
}

}  // namespace

LaunchResult launch_embedding_forward(const int32_t* tokens, int64_t n, const float* table, int64_t vocab, int64_t dim,
                                      void* out, HpType act, cudaStream_t stream) {
  return model::with_act(act, [&](auto tag) -> LaunchResult {
    using T = decltype(tag);
    T* y = static_cast<T*>(out);
    const bool vec = dim % 4 == 0 && model::aligned16(table) && model::aligned_for<T, 4>(y);
    const model::RowSweep sweep = model::row_sweep(n, vec ? dim / 4 : dim);
    if (!sweep.ok) return model::kTooLarge;
    if (vec) {
      embedding_forward_kernel<T, true><<<sweep.grid, sweep.block, 0, stream>>>(tokens, n, table, vocab, dim, y);
    } else {
      embedding_forward_kernel<T, false><<<sweep.grid, sweep.block, 0, stream>>>(tokens, n, table, vocab, dim, y);
    }
    return model::after_launch("embedding forward kernel");
  });
}

namespace {

// The scratch layout, shared by sizing and launching so that both agree.
struct BackwardScratch {
  uint32_t* keys_in;
  uint32_t* positions_in;
  uint32_t* keys_out;
  uint32_t* positions_out;
  void* sort_temp;
  size_t sort_temp_bytes;
  size_t total;
};

LaunchResult plan_backward(int64_t n, int64_t vocab, void* base, BackwardScratch* out) {
  size_t temp_bytes = 0;
  // With no temporary storage CUB only computes its size; no work is queued.
  const cudaError_t e = cub::DeviceRadixSort::SortPairs(
      nullptr, temp_bytes, static_cast<const uint32_t*>(nullptr), static_cast<uint32_t*>(nullptr),
      static_cast<const uint32_t*>(nullptr), static_cast<uint32_t*>(nullptr), n, 0, key_bits(vocab));
  if (e != cudaSuccess) return {e, "cub::DeviceRadixSort::SortPairs (sizing)"};
  model::ScratchCarver carve(base);
  out->keys_in = carve.take<uint32_t>(static_cast<size_t>(n));
  out->positions_in = carve.take<uint32_t>(static_cast<size_t>(n));
  out->keys_out = carve.take<uint32_t>(static_cast<size_t>(n));
  out->positions_out = carve.take<uint32_t>(static_cast<size_t>(n));
  out->sort_temp = carve.take<char>(temp_bytes);
  out->sort_temp_bytes = temp_bytes;
  out->total = carve.used();
  return {};
}

}  // namespace

LaunchResult embedding_backward_scratch_bytes(int64_t n, int64_t vocab, size_t* bytes) {
  BackwardScratch plan{};
  const LaunchResult r = plan_backward(n, vocab, nullptr, &plan);
  *bytes = r.ok() ? plan.total : 0;
  return r;
}

LaunchResult launch_embedding_backward(const int32_t* tokens, int64_t n, const void* grad_out, int64_t vocab,
                                       int64_t dim, float* grad_table, void* scratch, size_t scratch_bytes, HpType act,
                                       cudaStream_t stream) {
  if (n <= 0 || dim <= 0) return {};
  if (n > kMaxEmbeddingBackwardTokens) return model::kTooLarge;
  BackwardScratch plan{};
  if (auto r = plan_backward(n, vocab, scratch, &plan); !r.ok()) return r;
  if (plan.total > scratch_bytes) return {cudaErrorInvalidValue, "embedding backward (scratch too small)"};
  const uint32_t sentinel = sentinel_of(vocab);

  const unsigned key_blocks = model::clamp_grid(model::ceil_div(n, kThreads), int64_t{1} << 16);
  embedding_keys_kernel<<<key_blocks, kThreads, 0, stream>>>(tokens, n, vocab, sentinel, plan.keys_in,
                                                             plan.positions_in);
  if (auto r = model::after_launch("embedding backward keys kernel"); !r.ok()) return r;

  size_t temp_bytes = plan.sort_temp_bytes;
  const cudaError_t e =
      cub::DeviceRadixSort::SortPairs(plan.sort_temp, temp_bytes, plan.keys_in, plan.keys_out, plan.positions_in,
                                      plan.positions_out, n, 0, key_bits(vocab), stream);
  if (e != cudaSuccess) return {e, "cub::DeviceRadixSort::SortPairs"};

  return model::with_act(act, [&](auto tag) -> LaunchResult {
    using G = decltype(tag);
    const G* g = static_cast<const G*>(grad_out);
    const bool vec = dim % 4 == 0 && model::aligned_for<G, 4>(g) && model::aligned16(grad_table);
    const int64_t warp_cols = vec ? 128 : 32;
    const dim3 grid(model::clamp_grid(model::ceil_div(n, kWarps), INT_MAX),
                    model::clamp_grid(model::ceil_div(dim, warp_cols), model::kMaxGridY));
    if (vec) {
      embedding_backward_runs_kernel<G, true>
          <<<grid, kThreads, 0, stream>>>(plan.keys_out, plan.positions_out, n, sentinel, g, dim, grad_table);
    } else {
      embedding_backward_runs_kernel<G, false>
          <<<grid, kThreads, 0, stream>>>(plan.keys_out, plan.positions_out, n, sentinel, g, dim, grad_table);
    }
    return model::after_launch("embedding backward kernel");
  });
}

}  // namespace fp8::cuda
