// The device code of the tensor-core attention (attention_tc_kernels.h): the mma.sync
// kernels, their shared-memory sizes and helpers, in a namespace of their own.
// attention_tc_kernels.cu launches them; tests/ops/attention_mma_emulation_test.cc runs
// this same source on the CPU, with the instructions of mma_primitives.cuh emulated (its
// include path finds tests/ops/emulation/cuda/ops/mma_primitives.cuh first) and shared
// memory given by the emulation (under FP8_CUDA_EMULATION, fp8_emulated_shared_bytes()).
//
// FlashAttention-2's algorithm on mma.sync m16n8k16 bf16 products (mma_primitives.cuh).
//
// Every kernel runs 4 warps over 64-row tiles: warp w owns rows 16w..16w+15 of the block's
// tile (queries in the forward and grad_q kernels, keys in grad_kv) and computes its 16 x 64
// strip of scores against each streamed tile in accumulator registers, where lane 4g + t
// holds rows g and g + 8, columns 8j + 2t and 8j + 2t + 1 of each 8-column block j. So a
// row's softmax statistics are the business of the 4 lanes of a quad (two xor shuffles),
// and a strip of P or dS becomes the A operand of the next product in place, rounded to
// bf16, without a trip through shared memory. The streamed tiles (K and V, or Q and dO)
// are double-buffered: cp.async fills one buffer while the warps compute on the other.
//
// Numerics: fp32 softmax in base 2, as FlashAttention computes it: exp(scale·s − m) =
// 2^(s·scale·log2e − m·scale·log2e), one fused multiply-add and one ex2.approx per score
// (mma_primitives.cuh), the row max m kept on the raw scores; P and dS rounded to bf16
// (nearest even) only as product operands, the forward's running sum adding the rounded P;
// lse in natural units, as the CPU's and the SIMT kernels'. Against the CPU's fp32
// attention the results differ by the bf16 rounding of P and dS. Shared rows are padded by
// 16 bytes, so that the 8 rows an ldmatrix reads start on different banks.
#pragma once

#include <cmath>
#include <cstdint>

#include "cuda/ops/attention_tc_geometry.h"
#include "cuda/ops/mma_primitives.cuh"
#include "fp8/arith.h"
#include "ops/model_arith.h"

namespace fp8::cuda::attention_mma {

using attention_tc::Geometry;
using attention_tc::kTile;

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
static_assert(kTile == 16 * kWarps, "a warp owns 16 rows of the tile");
constexpr int kColumnBlocks = kTile / 8;  // 8-column blocks of a strip (keys, or queries in grad_kv)
constexpr int kStripSteps = kTile / 16;   // 16-column k-steps of a strip as an A operand
constexpr unsigned kFullMask = 0xffffffffu;
constexpr float kLog2e = 1.4426950408889634f;

template <int D>
struct Tile {
  static constexpr int kPitch = D + 8;  // bf16 per shared row
  static constexpr int kElems = kTile * kPitch;
  static constexpr size_t kBytes = sizeof(uint16_t) * kElems;
  static constexpr int kSteps = D / 16;       // k-steps across head_dim
  static constexpr int kDBlocks = D / 8;      // 8-column blocks across head_dim
  static_assert(D % 16 == 0 && (kPitch * sizeof(uint16_t)) % 16 == 0);
};

// Shared memory: `tiles` bf16 tiles, then `stats` floats.
template <int D>
constexpr size_t smem_bytes(int tiles, int stats) {
  return Tile<D>::kBytes * static_cast<size_t>(tiles) + sizeof(float) * static_cast<size_t>(stats);
}

#ifndef FP8_CUDA_EMULATION
__device__ __forceinline__ unsigned char* shared_bytes() {
  extern __shared__ __align__(128) unsigned char attention_mma_smem[];
  return attention_mma_smem;
}
#else
__device__ __forceinline__ unsigned char* shared_bytes() { return fp8_emulated_shared_bytes(); }
#endif

// As the SIMT kernels: a key counts for a query iff it is not in the query's future and
// the query is real.
__device__ __forceinline__ bool visible(int query, int key, int seq) { return key <= query && query < seq; }

// exp(scale·s − offset / log2e) for a raw score s: 2^(s·scale_log2 − offset), where
// scale_log2 = scale·log2e and offset is a row's max or lse times log2e (or scale_log2).
// A masked score (-inf) gives exactly 0.
__device__ __forceinline__ float softmax_exp2(float s, float scale_log2, float offset) {
  return mma::exp2_approx(fmaf(s, scale_log2, -offset));
}

// The forward's offset for a row whose raw running max is m: m·scale_log2, and 0 while the
// row has seen only masked keys (m = -inf), so that no -inf − -inf appears.
__device__ __forceinline__ float max_offset(float m, float scale_log2) {
  return m == -INFINITY ? 0.0f : m * scale_log2;
}

// The two bf16 of a packed pair, widened.
__device__ __forceinline__ float low_bf16(uint32_t w) { return bits_float(w << 16); }
__device__ __forceinline__ float high_bf16(uint32_t w) { return bits_float(w & 0xffff0000u); }

// The max and the sum over the 4 lanes of a quad (one score row).
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(kFullMask, x, 1));
  return fmaxf(x, __shfl_xor_sync(kFullMask, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(kFullMask, x, 1);
  return x + __shfl_xor_sync(kFullMask, x, 2);
}
// Integer max over the quad, of amax bit patterns (fp8/arith.h's amax_bits_update).
__device__ __forceinline__ uint32_t quad_max_bits(uint32_t x) {
  x = max(x, __shfl_xor_sync(kFullMask, x, 1));
  return max(x, __shfl_xor_sync(kFullMask, x, 2));
}
// acc updated with the magnitudes of the two bf16 values packed in w, as stored.
__device__ __forceinline__ uint32_t amax_bits_bf16x2(uint32_t acc, uint32_t w) {
  acc = amax_bits_update(acc, bf16_to_float(static_cast<uint16_t>(w & 0xffffu)));
  return amax_bits_update(acc, bf16_to_float(static_cast<uint16_t>(w >> 16)));
}

// Queues the copy of `rows` rows of D bf16 from src (row stride ld, 16-byte aligned) into a
// tile; the rows past `rows` become zeros. The whole block, 16 bytes per copy.
template <int D>
__device__ __forceinline__ void load_tile_async(uint16_t* tile, const uint16_t* __restrict__ src, int64_t ld,
                                                int rows) {
  constexpr int kChunks = D / 8;
  for (int i = static_cast<int>(threadIdx.x); i < kTile * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i % kChunks * 8;
    const bool valid = r < rows;
    mma::cp_async_16(tile + r * Tile<D>::kPitch + c, valid ? src + r * ld + c : src, valid);
  }
}

// Queues the copy of a tile's per-row statistics (lse, delta): `rows` values from src,
// zeros past them.
__device__ __forceinline__ void load_stats_async(float* dst, const float* __restrict__ src, int rows) {
  for (int i = static_cast<int>(threadIdx.x); i < kTile; i += kThreads) {
    const bool valid = i < rows;
    mma::cp_async_4(dst + i, valid ? src + i : src, valid);
  }
}

// The A operand of rows row0..row0+15, columns k0..k0+15 of a tile.
template <int D>
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const uint16_t* tile, int row0, int k0, int lane) {
  const int r = row0 + (lane & 7) + ((lane >> 3) & 1) * 8, c = k0 + (lane >> 4) * 8;
  mma::ldmatrix_x4(a, tile + r * Tile<D>::kPitch + c);
}

// The B operands of two 8-column blocks, n0..n0+7 (b[0], b[1]) and n0+8..n0+15 (b[2],
// b[3]), over k0..k0+15, from a tile whose rows are the n (B = tileᵀ: K or Q in a score).
template <int D>
__device__ __forceinline__ void load_b_of_rows(uint32_t (&b)[4], const uint16_t* tile, int n0, int k0, int lane) {
  const int m = lane >> 3;
  const int r = n0 + (lane & 7) + (m >> 1) * 8, c = k0 + (m & 1) * 8;
  mma::ldmatrix_x4(b, tile + r * Tile<D>::kPitch + c);
}

// The same from a tile whose rows are the k (B = tile: V, K, Q or dO after a strip).
template <int D>
__device__ __forceinline__ void load_b_of_columns(uint32_t (&b)[4], const uint16_t* tile, int k0, int n0, int lane) {
  const int m = lane >> 3;
  const int r = k0 + (lane & 7) + (m & 1) * 8, c = n0 + (m >> 1) * 8;
  mma::ldmatrix_x4_trans(b, tile + r * Tile<D>::kPitch + c);
}

template <int N>
__device__ __forceinline__ void zero(float (&acc)[N][4]) {
#pragma unroll
  for (int j = 0; j < N; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
}

// One step of every kernel's double-buffered pipeline, after the caller has queued the
// next stage's copies into the other buffer (when there is a next stage): commits them and
// waits until the current stage's copies have landed and the whole block sees them.
__device__ __forceinline__ void advance_pipeline(bool queued_next) {
  if (queued_next) {
    mma::cp_async_commit();
    mma::cp_async_wait<1>();
  } else {
    mma::cp_async_wait<0>();
  }
  __syncthreads();
}

// The lane's place: its warp, lane, quad position t, and its first row in the block's tile
// (strip_row; the second is 8 below).
struct LanePlace {
  int warp, lane, t, strip_row;
  __device__ LanePlace()
      : warp(static_cast<int>(threadIdx.x) / 32),
        lane(static_cast<int>(threadIdx.x) % 32),
        t(lane & 3),
        strip_row(16 * warp + (lane >> 2)) {}
};

// A block of the forward or grad_q kernel: it owns query tile qt of head h, batch b
// (heaviest tiles first), and streams the key and value tiles 0..qt of kv head h / group.
template <int D>
struct QueryBlock {
  int qt, q0, q_rows;
  int64_t bh;       // batch·n_heads + head: the row of lse and delta
  int64_t q_at;     // where the block's query rows start in q, out, grad_out and grad_q
  int64_t kv_base;  // where its kv head starts in k and v
  __device__ explicit QueryBlock(const Geometry& g)
      : qt(g.tiles - 1 - static_cast<int>(blockIdx.x / g.heads)),
        q0(qt * kTile),
        q_rows(min(kTile, g.seq - q0)),
        bh(blockIdx.x % g.heads),
        q_at((bh / g.n_heads * g.seq + q0) * g.ld_q + bh % g.n_heads * D),
        kv_base(bh / g.n_heads * g.seq * g.ld_kv + bh % g.n_heads / g.group * D) {}
  // Queues key and value tile kt into buffer kt % 2 of k_s and v_s.
  __device__ void load_kv(const Geometry& g, const uint16_t* k, const uint16_t* v, uint16_t* k_s, uint16_t* v_s,
                          int kt) const {
    const int k0 = kt * kTile;
    const int rows = min(kTile, g.seq - k0);
    const int64_t at = kv_base + k0 * g.ld_kv;
    load_tile_async<D>(k_s + (kt & 1) * Tile<D>::kElems, k + at, g.ld_kv, rows);
    load_tile_async<D>(v_s + (kt & 1) * Tile<D>::kElems, v + at, g.ld_kv, rows);
  }
};

// acc += A·Bᵀ over head_dim columns k0..k0+15: the A fragment of a 16-row strip against
// the kTile rows of tile `b`.
template <int D>
__device__ __forceinline__ void strip_product_step(float (&acc)[kColumnBlocks][4], const uint32_t (&af)[4],
                                                   const uint16_t* b, int k0, int lane) {
#pragma unroll
  for (int j = 0; j < kColumnBlocks / 2; ++j) {
    uint32_t bf[4];
    load_b_of_rows<D>(bf, b, 16 * j, k0, lane);
    mma::mma_bf16(acc[2 * j], af, bf[0], bf[1]);
    mma::mma_bf16(acc[2 * j + 1], af, bf[2], bf[3]);
  }
}

// acc = A·Bᵀ over head_dim: rows a_row0..+15 of tile `a` against the kTile rows of tile
// `b`, a 16 x kTile strip.
template <int D>
__device__ __forceinline__ void strip_product(float (&acc)[kColumnBlocks][4], const uint16_t* a, int a_row0,
                                              const uint16_t* b, int lane) {
  zero(acc);
#pragma unroll
  for (int kk = 0; kk < Tile<D>::kSteps; ++kk) {
    uint32_t af[4];
    load_a<D>(af, a, a_row0, 16 * kk, lane);
    strip_product_step<D>(acc, af, b, 16 * kk, lane);
  }
}

// The same with the strip's A fragments already in registers (the forward's queries).
template <int D>
__device__ __forceinline__ void strip_product(float (&acc)[kColumnBlocks][4],
                                              const uint32_t (&a)[Tile<D>::kSteps][4], const uint16_t* b, int lane) {
  zero(acc);
#pragma unroll
  for (int kk = 0; kk < Tile<D>::kSteps; ++kk) strip_product_step<D>(acc, a[kk], b, 16 * kk, lane);
}

// acc += strip · tile: a 16 x kTile strip of bf16 A fragments (P or dS) times the kTile x D
// rows of a tile.
template <int D>
__device__ __forceinline__ void strip_times_tile(float (&acc)[Tile<D>::kDBlocks][4],
                                                 const uint32_t (&strip)[kStripSteps][4], const uint16_t* tile,
                                                 int lane) {
#pragma unroll
  for (int kk = 0; kk < kStripSteps; ++kk) {
#pragma unroll
    for (int j = 0; j < Tile<D>::kDBlocks / 2; ++j) {
      uint32_t bf[4];
      load_b_of_columns<D>(bf, tile, 16 * kk, 16 * j, lane);
      mma::mma_bf16(acc[2 * j], strip[kk], bf[0], bf[1]);
      mma::mma_bf16(acc[2 * j + 1], strip[kk], bf[2], bf[3]);
    }
  }
}

// Where element e (0..3) of column block j of a lane's accumulators sits in its strip:
// row r = e / 2 (0: g, 1: g + 8), column 8j + 2t + e % 2. And where the bf16 pair (e, e+1)
// of block j goes as an A operand: k-step j / 2, register 2·(j % 2) + r.
__device__ __forceinline__ int strip_column(int j, int t, int e) { return 8 * j + 2 * t + (e & 1); }
__device__ __forceinline__ uint32_t& a_slot(uint32_t (&strip)[kStripSteps][4], int j, int r) {
  return strip[j / 2][2 * (j % 2) + r];
}

// Writes the lane's rows of a 16 x D accumulator strip (strip_row and strip_row + 8 of the
// tile, those below `rows`), times `factor`, as bf16 into dst: the tile's first row, rows
// ld elements apart.
template <int D>
__device__ __forceinline__ void store_strip(const float (&acc)[Tile<D>::kDBlocks][4], float factor,
                                            uint16_t* __restrict__ dst, int64_t ld, int strip_row, int rows, int t) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = strip_row + 8 * r;
    if (row >= rows) continue;
    uint16_t* out = dst + row * ld + 2 * t;
#pragma unroll
    for (int j = 0; j < Tile<D>::kDBlocks; ++j) {
      *reinterpret_cast<uint32_t*>(out + 8 * j) = mma::pack_bf16x2(acc[j][2 * r] * factor, acc[j][2 * r + 1] * factor);
    }
  }
}

// ---- forward -----------------------------------------------------------------------------------

// Resident blocks an SM the forward asks for, so that ptxas keeps to the registers it
// took before the row amaxes' few extra values (128 at head_dim 64: 4 blocks of 128
// threads; it would otherwise take 131 and drop to 3 blocks; 168 at head_dim 128: 3).
template <int D>
inline constexpr int kForwardMinBlocks = D == 64 ? 4 : 3;

// One block: query tile qt of head h, batch b; the key tiles 0..qt in increasing order.
// Online softmax per row: m the running max of the raw scores, l the running sum of the
// rounded P (a partial sum per lane, summed over the quad at the end), O the running
// output, all in registers, and so are the warp's query fragments, loaded once; out = O / l
// and lse = scale·m + log l at the end. row_amax (null, or zeros [batch · seq]): each
// row's amax of out as stored, over every head: the quad holding a row's D values of this
// head reduces them, and one lane folds them in with atomicMax on the bit pattern (integer
// max of non-negative floats is order-independent, so the result does not depend on which
// head's block comes first).
template <int D>
__global__ void __launch_bounds__(kThreads, kForwardMinBlocks<D>)
    attention_forward_mma_kernel(Geometry g, const uint16_t* __restrict__ q, const uint16_t* __restrict__ k,
                                 const uint16_t* __restrict__ v, uint16_t* __restrict__ out, float* __restrict__ lse,
                                 float* __restrict__ row_amax) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();  // bf16 mma.sync needs sm_80; the launcher never sends a kernel to an older device
#else
  using T = Tile<D>;
  uint16_t* q_s = reinterpret_cast<uint16_t*>(shared_bytes());
  uint16_t* k_s = q_s + T::kElems;      // two buffers
  uint16_t* v_s = k_s + 2 * T::kElems;  // two buffers

  const QueryBlock<D> blk(g);
  const int qt = blk.qt, q0 = blk.q0;
  const LanePlace place;
  const int warp = place.warp, lane = place.lane, t = place.t, strip_row = place.strip_row;

  load_tile_async<D>(q_s, q + blk.q_at, g.ld_q, blk.q_rows);
  blk.load_kv(g, k, v, k_s, v_s, 0);
  mma::cp_async_commit();

  float o[T::kDBlocks][4];
  zero(o);
  uint32_t qf[T::kSteps][4];
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const float scale_log2 = g.scale * kLog2e;
  // Only the diagonal tile and a tile holding padding queries need the mask.
  const bool padded = q0 + kTile > g.seq;

  for (int kt = 0; kt <= qt; ++kt) {
    if (kt < qt) blk.load_kv(g, k, v, k_s, v_s, kt + 1);
    advance_pipeline(kt < qt);
    if (kt == 0) {
#pragma unroll
      for (int kk = 0; kk < T::kSteps; ++kk) load_a<D>(qf[kk], q_s, 16 * warp, 16 * kk, lane);
    }
    const uint16_t* k_tile = k_s + (kt & 1) * T::kElems;
    const uint16_t* v_tile = v_s + (kt & 1) * T::kElems;
    const int k0 = kt * kTile;
    const bool masked = kt == qt || padded;

    float s[kColumnBlocks][4];
    strip_product<D>(s, qf, k_tile, lane);
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < kColumnBlocks; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1;
        if (masked && !visible(q0 + strip_row + 8 * r, k0 + strip_column(j, t, e), g.seq)) s[j][e] = -INFINITY;
        mx[r] = fmaxf(mx[r], s[j][e]);
      }
    }
    float offset[2], alpha[2], sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float m_new = fmaxf(m[r], quad_max(mx[r]));
      offset[r] = max_offset(m_new, scale_log2);
      alpha[r] = softmax_exp2(m[r], scale_log2, offset[r]);  // 0 while m was -inf
      m[r] = m_new;
    }
    uint32_t p[kStripSteps][4];
#pragma unroll
    for (int j = 0; j < kColumnBlocks; ++j) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const uint32_t pair = mma::pack_bf16x2(softmax_exp2(s[j][2 * r], scale_log2, offset[r]),
                                               softmax_exp2(s[j][2 * r + 1], scale_log2, offset[r]));
        sum[r] += low_bf16(pair) + high_bf16(pair);
        a_slot(p, j, r) = pair;
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      l[r] = l[r] * alpha[r] + sum[r];  // alpha is the quad's, so the partial sums rescale alike
    }
#pragma unroll
    for (int j = 0; j < T::kDBlocks; ++j) {
      o[j][0] *= alpha[0];
      o[j][1] *= alpha[0];
      o[j][2] *= alpha[1];
      o[j][3] *= alpha[1];
    }
    strip_times_tile<D>(o, p, v_tile, lane);
    __syncthreads();  // every warp is done with this buffer before the next iteration refills it
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] = quad_sum(l[r]);
    const int row = strip_row + 8 * r;
    uint32_t out_bits = 0u;  // this lane's share of the row's amax
    if (row < blk.q_rows) {
      const float inv = 1.0f / l[r];
      uint16_t* dst = out + blk.q_at + row * g.ld_q + 2 * t;
#pragma unroll
      for (int j = 0; j < T::kDBlocks; ++j) {
        const uint32_t packed = mma::pack_bf16x2(o[j][2 * r] * inv, o[j][2 * r + 1] * inv);
        *reinterpret_cast<uint32_t*>(dst + 8 * j) = packed;
        out_bits = amax_bits_bf16x2(out_bits, packed);
      }
      if (t == 0) lse[blk.bh * g.seq + q0 + row] = ops::log_sum_exp(m[r] * g.scale, l[r]);
    }
    if (row_amax != nullptr) {  // the same for every thread of the grid
      out_bits = quad_max_bits(out_bits);  // every lane: the shuffles need the whole warp
      if (t == 0 && row < blk.q_rows && out_bits != 0u) {
        const int64_t token = blk.bh / g.n_heads * g.seq + q0 + row;
        atomicMax(reinterpret_cast<unsigned*>(row_amax) + token, out_bits);
      }
    }
  }
#endif
}

// ---- backward ----------------------------------------------------------------------------------

// grad_q: one block owns query tile qt of head h, batch b, and streams the key tiles 0..qt
// in increasing order: S = Q·Kᵀ, dP = dO·Vᵀ, P = exp(scale·S − lse), dS = P ∘ (dP − delta),
// dQ += dS·K;   grad_q = scale·dQ.
template <int D>
__global__ void __launch_bounds__(kThreads)
    attention_grad_q_mma_kernel(Geometry g, const uint16_t* __restrict__ q, const uint16_t* __restrict__ k,
                                const uint16_t* __restrict__ v, const float* __restrict__ lse,
                                const float* __restrict__ delta, const uint16_t* __restrict__ grad_out,
                                uint16_t* __restrict__ grad_q) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();
#else
  using T = Tile<D>;
  uint16_t* q_s = reinterpret_cast<uint16_t*>(shared_bytes());
  uint16_t* do_s = q_s + T::kElems;
  uint16_t* k_s = do_s + T::kElems;     // two buffers
  uint16_t* v_s = k_s + 2 * T::kElems;  // two buffers
  float* lse_s = reinterpret_cast<float*>(v_s + 2 * T::kElems);
  float* delta_s = lse_s + kTile;

  const QueryBlock<D> blk(g);
  const int qt = blk.qt, q0 = blk.q0, q_rows = blk.q_rows;
  const LanePlace place;
  const int warp = place.warp, lane = place.lane, t = place.t, strip_row = place.strip_row;
  const int64_t q_at = blk.q_at;

  load_tile_async<D>(q_s, q + q_at, g.ld_q, q_rows);
  load_tile_async<D>(do_s, grad_out + q_at, g.ld_q, q_rows);
  load_stats_async(lse_s, lse + blk.bh * g.seq + q0, q_rows);
  load_stats_async(delta_s, delta + blk.bh * g.seq + q0, q_rows);
  blk.load_kv(g, k, v, k_s, v_s, 0);
  mma::cp_async_commit();

  float dq[T::kDBlocks][4];
  zero(dq);
  const bool padded = q0 + kTile > g.seq;
  const float scale_log2 = g.scale * kLog2e;
  float row_lse[2], row_delta[2];

  for (int kt = 0; kt <= qt; ++kt) {
    if (kt < qt) blk.load_kv(g, k, v, k_s, v_s, kt + 1);
    advance_pipeline(kt < qt);
    if (kt == 0) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        row_lse[r] = lse_s[strip_row + 8 * r] * kLog2e;  // the exponent's offset
        row_delta[r] = delta_s[strip_row + 8 * r];
      }
    }
    const uint16_t* k_tile = k_s + (kt & 1) * T::kElems;
    const uint16_t* v_tile = v_s + (kt & 1) * T::kElems;
    const int k0 = kt * kTile;
    const bool masked = kt == qt || padded;

    float s[kColumnBlocks][4], dp[kColumnBlocks][4];
    strip_product<D>(s, q_s, 16 * warp, k_tile, lane);
    strip_product<D>(dp, do_s, 16 * warp, v_tile, lane);
    uint32_t ds[kStripSteps][4];
#pragma unroll
    for (int j = 0; j < kColumnBlocks; ++j) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float grad[2];
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int e = 2 * r + c;
          const bool see = !masked || visible(q0 + strip_row + 8 * r, k0 + strip_column(j, t, e), g.seq);
          const float p = see ? softmax_exp2(s[j][e], scale_log2, row_lse[r]) : 0.0f;
          grad[c] = ops::softmax_input_grad(p, dp[j][e], row_delta[r]);
        }
        a_slot(ds, j, r) = mma::pack_bf16x2(grad[0], grad[1]);
      }
    }
    strip_times_tile<D>(dq, ds, k_tile, lane);  // dQ += dS·K
    __syncthreads();
  }
  store_strip<D>(dq, g.scale, grad_q + q_at, g.ld_q, strip_row, q_rows, t);
#endif
}

// grad_k, grad_v: one block owns key tile kt of kv head kvh, batch b, and streams the query
// tiles kt..tiles-1 of every query head of the group, in a fixed order:
//   Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ, Pᵀ = exp(scale·Sᵀ − lse), dSᵀ = Pᵀ ∘ (dPᵀ − delta),
//   dV += Pᵀ·dO, dK += dSᵀ·Q;   grad_k = scale·dK, grad_v = dV.
// The strip's columns are queries, each with its own lse and delta.
//
// Its grid is the smallest (one block per key tile of a kv head) and its blocks the most
// unequal, so at head_dim 64 the registers are capped (168 a thread) for 3 blocks an SM
// rather than the 2 that its ~172 would allow (at 2, ncu showed too few warps a scheduler
// to keep issuing; see bench/RESULTS.md).
template <int D>
__global__ void __launch_bounds__(kThreads, D == 64 ? 3 : 1)
    attention_grad_kv_mma_kernel(Geometry g, const uint16_t* __restrict__ q, const uint16_t* __restrict__ k,
                                 const uint16_t* __restrict__ v, const float* __restrict__ lse,
                                 const float* __restrict__ delta, const uint16_t* __restrict__ grad_out,
                                 uint16_t* __restrict__ grad_k, uint16_t* __restrict__ grad_v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();
#else
  using T = Tile<D>;
  uint16_t* k_s = reinterpret_cast<uint16_t*>(shared_bytes());
  uint16_t* v_s = k_s + T::kElems;
  uint16_t* q_s = v_s + T::kElems;       // two buffers
  uint16_t* do_s = q_s + 2 * T::kElems;  // two buffers
  // Two buffers of a query tile's statistics: lse·log2e (the exponent's offsets), then delta.
  float* stats_s = reinterpret_cast<float*>(do_s + 2 * T::kElems);

  const int kt = static_cast<int>(blockIdx.x / g.heads);  // the first key tiles see the most queries
  const int64_t bkv = blockIdx.x % g.heads;
  const int64_t n_kv_heads = g.n_heads / g.group;
  const int64_t b = bkv / n_kv_heads, kvh = bkv % n_kv_heads;
  const int k0 = kt * kTile;
  const int k_rows = min(kTile, g.seq - k0);
  const LanePlace place;
  const int warp = place.warp, lane = place.lane, t = place.t, strip_row = place.strip_row;
  const int64_t kv_at = (b * g.seq + k0) * g.ld_kv + kvh * D;
  // Iteration i: query head kvh·group + i / query_tiles, query tile kt + i % query_tiles.
  const int query_tiles = g.tiles - kt;
  const int iterations = static_cast<int>(g.group) * query_tiles;
  auto load_queries = [&](int i) {
    const int64_t h = kvh * g.group + i / query_tiles;
    const int q0 = (kt + i % query_tiles) * kTile;
    const int rows = min(kTile, g.seq - q0);
    const int64_t q_at = (b * g.seq + q0) * g.ld_q + h * D;
    load_tile_async<D>(q_s + (i & 1) * T::kElems, q + q_at, g.ld_q, rows);
    load_tile_async<D>(do_s + (i & 1) * T::kElems, grad_out + q_at, g.ld_q, rows);
  };
  // Thread x's statistic of query tile i: lse·log2e of row x (x < kTile), else delta of row
  // x - kTile. Fetched into a register an iteration before the tile's buffer is filled
  // from it, so that the load's latency hides behind a whole iteration's products.
  static_assert(kThreads == 2 * kTile, "one statistic a thread");
  const int stat_row = static_cast<int>(threadIdx.x) % kTile;
  const bool fetches_lse = static_cast<int>(threadIdx.x) < kTile;
  auto fetch_stat = [&](int i) -> float {
    const int64_t h = kvh * g.group + i / query_tiles;
    const int q0 = (kt + i % query_tiles) * kTile;
    if (q0 + stat_row >= g.seq) return 0.0f;
    const int64_t at = (b * g.n_heads + h) * g.seq + q0 + stat_row;
    return fetches_lse ? __ldg(lse + at) * kLog2e : __ldg(delta + at);
  };

  load_tile_async<D>(k_s, k + kv_at, g.ld_kv, k_rows);
  load_tile_async<D>(v_s, v + kv_at, g.ld_kv, k_rows);
  load_queries(0);
  mma::cp_async_commit();
  stats_s[threadIdx.x] = fetch_stat(0);  // the first barrier makes it visible
  float next_stat = iterations > 1 ? fetch_stat(1) : 0.0f;

  float dk[T::kDBlocks][4], dv[T::kDBlocks][4];
  zero(dk);
  zero(dv);
  const float scale_log2 = g.scale * kLog2e;

  for (int i = 0; i < iterations; ++i) {
    if (i + 1 < iterations) load_queries(i + 1);
    advance_pipeline(i + 1 < iterations);
    const uint16_t* q_tile = q_s + (i & 1) * T::kElems;
    const uint16_t* do_tile = do_s + (i & 1) * T::kElems;
    const float* tile_lse = stats_s + (i & 1) * 2 * kTile;
    const float* tile_delta = tile_lse + kTile;
    const int qt = kt + i % query_tiles;
    const int q0 = qt * kTile;
    const bool masked = qt == kt || q0 + kTile > g.seq;

    // Sᵀ (keys by queries), masked in place.
    float st[kColumnBlocks][4];
    strip_product<D>(st, k_s, 16 * warp, q_tile, lane);
    if (masked) {
#pragma unroll
      for (int j = 0; j < kColumnBlocks; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if (!visible(q0 + strip_column(j, t, e), k0 + strip_row + 8 * (e >> 1), g.seq)) st[j][e] = -INFINITY;
        }
      }
    }
    // dV += Pᵀ·dO first, so that Pᵀ's bf16 strip is dead before dPᵀ takes its registers.
    {
      uint32_t pt[kStripSteps][4];
#pragma unroll
      for (int j = 0; j < kColumnBlocks; ++j) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int c0 = strip_column(j, t, 2 * r);
          a_slot(pt, j, r) = mma::pack_bf16x2(softmax_exp2(st[j][2 * r], scale_log2, tile_lse[c0]),
                                              softmax_exp2(st[j][2 * r + 1], scale_log2, tile_lse[c0 + 1]));
        }
      }
      strip_times_tile<D>(dv, pt, do_tile, lane);
    }
    // dK += dSᵀ·Q, dSᵀ = Pᵀ ∘ (dPᵀ − delta) with Pᵀ recomputed from the scores.
    float dpt[kColumnBlocks][4];
    strip_product<D>(dpt, v_s, 16 * warp, do_tile, lane);
    uint32_t dst[kStripSteps][4];
#pragma unroll
    for (int j = 0; j < kColumnBlocks; ++j) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float grad[2];
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int e = 2 * r + c, column = strip_column(j, t, e);
          const float p = softmax_exp2(st[j][e], scale_log2, tile_lse[column]);
          grad[c] = ops::softmax_input_grad(p, dpt[j][e], tile_delta[column]);
        }
        a_slot(dst, j, r) = mma::pack_bf16x2(grad[0], grad[1]);
      }
    }
    strip_times_tile<D>(dk, dst, q_tile, lane);
    // The next tile's statistics into its buffer, last read an iteration ago (the barrier
    // that ended it keeps that safe; the one below makes them visible).
    if (i + 1 < iterations) {
      stats_s[((i + 1) & 1) * 2 * kTile + threadIdx.x] = next_stat;
      if (i + 2 < iterations) next_stat = fetch_stat(i + 2);
    }
    __syncthreads();
  }
  store_strip<D>(dk, g.scale, grad_k + kv_at, g.ld_kv, strip_row, k_rows, t);
  store_strip<D>(dv, 1.0f, grad_v + kv_at, g.ld_kv, strip_row, k_rows, t);
#endif
}

// Shared memory per kernel: the forward holds Q and two K and V buffers; grad_q adds dO
// and the tile's lse and delta; grad_kv holds K, V and two buffers of Q, dO, lse and delta.
template <int D>
constexpr size_t kForwardBytes = smem_bytes<D>(5, 0);
template <int D>
constexpr size_t kGradQBytes = smem_bytes<D>(6, 2 * kTile);
template <int D>
constexpr size_t kGradKvBytes = smem_bytes<D>(6, 4 * kTile);

}  // namespace fp8::cuda::attention_mma
