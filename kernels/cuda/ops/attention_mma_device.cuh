// The device code of the mma.sync attention (attention_mma_kernels.h): the kernels, their
// shared-memory sizes and helpers, in a namespace of their own. attention_mma_kernels.cu
// launches them; tests/ops/attention_mma_emulation_test.cc runs this same source on the
// CPU, with the instructions of mma_primitives.cuh emulated (its include path finds
// tests/ops/emulation/cuda/ops/mma_primitives.cuh first) and shared memory given by the
// emulation (under FP8_CUDA_EMULATION, fp8_emulated_shared_bytes()).
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
// Numerics are the WMMA kernels' (attention_tc_kernels.cu): scale·s rounded on its own,
// fp32 softmax (ops/model_arith.h), P and dS rounded to bf16 (nearest even) only as product
// operands, the forward's running sum adding the rounded P; only the order of fp32 sums
// differs. Shared rows are padded by 16 bytes, so that the 8 rows an ldmatrix reads start
// on different banks.
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

// As the SIMT and WMMA kernels: a key counts for a query iff it is not in the query's
// future and the query is real.
__device__ __forceinline__ float scaled(float s, float scale) { return __fmul_rn(s, scale); }
__device__ __forceinline__ bool visible(int query, int key, int seq) { return key <= query && query < seq; }

__device__ __forceinline__ uint32_t pack(uint16_t lo, uint16_t hi) {
  return static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
}

// The max and the sum over the 4 lanes of a quad (one score row).
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(kFullMask, x, 1));
  return fmaxf(x, __shfl_xor_sync(kFullMask, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(kFullMask, x, 1);
  return x + __shfl_xor_sync(kFullMask, x, 2);
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

// Per-row statistics (lse, delta) of a tile: `rows` values from src, zeros past them.
__device__ __forceinline__ void load_stats(float* dst, const float* __restrict__ src, int rows) {
  for (int i = static_cast<int>(threadIdx.x); i < kTile; i += kThreads) dst[i] = i < rows ? __ldg(src + i) : 0.0f;
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
#pragma unroll
    for (int j = 0; j < kColumnBlocks / 2; ++j) {
      uint32_t bf[4];
      load_b_of_rows<D>(bf, b, 16 * j, 16 * kk, lane);
      mma::mma_bf16(acc[2 * j], af, bf[0], bf[1]);
      mma::mma_bf16(acc[2 * j + 1], af, bf[2], bf[3]);
    }
  }
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
      *reinterpret_cast<uint32_t*>(out + 8 * j) =
          pack(float_to_bf16(acc[j][2 * r] * factor), float_to_bf16(acc[j][2 * r + 1] * factor));
    }
  }
}

// ---- forward -----------------------------------------------------------------------------------

// One block: query tile qt of head h, batch b; the key tiles 0..qt in increasing order.
// Online softmax per row: m the running max, l the running sum of the rounded P (a
// partial sum per lane, summed over the quad at the end), O the running output, all in
// registers; out = O / l and lse = m + log l at the end.
template <int D>
__global__ void __launch_bounds__(kThreads)
    attention_forward_mma_kernel(Geometry g, const uint16_t* __restrict__ q, const uint16_t* __restrict__ k,
                                 const uint16_t* __restrict__ v, uint16_t* __restrict__ out, float* __restrict__ lse) {
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
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  // Only the diagonal tile and a tile holding padding queries need the mask.
  const bool padded = q0 + kTile > g.seq;

  for (int kt = 0; kt <= qt; ++kt) {
    if (kt < qt) blk.load_kv(g, k, v, k_s, v_s, kt + 1);
    advance_pipeline(kt < qt);
    const uint16_t* k_tile = k_s + (kt & 1) * T::kElems;
    const uint16_t* v_tile = v_s + (kt & 1) * T::kElems;
    const int k0 = kt * kTile;
    const bool masked = kt == qt || padded;

    float s[kColumnBlocks][4];
    strip_product<D>(s, q_s, 16 * warp, k_tile, lane);
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < kColumnBlocks; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1;
        float x = scaled(s[j][e], g.scale);
        if (masked && !visible(q0 + strip_row + 8 * r, k0 + strip_column(j, t, e), g.seq)) x = -INFINITY;
        s[j][e] = x;
        mx[r] = fmaxf(mx[r], x);
      }
    }
    float m_new[2], alpha[2], sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      m_new[r] = fmaxf(m[r], quad_max(mx[r]));
      alpha[r] = ops::online_softmax_rescale(m[r], m_new[r]);
    }
    uint32_t p[kStripSteps][4];
#pragma unroll
    for (int j = 0; j < kColumnBlocks; ++j) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const uint16_t p0 = float_to_bf16(ops::softmax_exp(s[j][2 * r], m_new[r]));
        const uint16_t p1 = float_to_bf16(ops::softmax_exp(s[j][2 * r + 1], m_new[r]));
        sum[r] += bf16_to_float(p0) + bf16_to_float(p1);
        a_slot(p, j, r) = pack(p0, p1);
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      m[r] = m_new[r];
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
    if (row >= blk.q_rows) continue;
    const float inv = 1.0f / l[r];
    uint16_t* dst = out + blk.q_at + row * g.ld_q + 2 * t;
#pragma unroll
    for (int j = 0; j < T::kDBlocks; ++j) {
      *reinterpret_cast<uint32_t*>(dst + 8 * j) =
          pack(float_to_bf16(o[j][2 * r] * inv), float_to_bf16(o[j][2 * r + 1] * inv));
    }
    if (t == 0) lse[blk.bh * g.seq + q0 + row] = ops::log_sum_exp(m[r], l[r]);
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
  blk.load_kv(g, k, v, k_s, v_s, 0);
  mma::cp_async_commit();
  load_stats(lse_s, lse + blk.bh * g.seq + q0, q_rows);
  load_stats(delta_s, delta + blk.bh * g.seq + q0, q_rows);

  float dq[T::kDBlocks][4];
  zero(dq);
  const bool padded = q0 + kTile > g.seq;
  float row_lse[2], row_delta[2];

  for (int kt = 0; kt <= qt; ++kt) {
    if (kt < qt) blk.load_kv(g, k, v, k_s, v_s, kt + 1);
    advance_pipeline(kt < qt);
    if (kt == 0) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        row_lse[r] = lse_s[strip_row + 8 * r];
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
        uint16_t bits[2];
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int e = 2 * r + c;
          const bool see = !masked || visible(q0 + strip_row + 8 * r, k0 + strip_column(j, t, e), g.seq);
          const float p = ops::softmax_exp(see ? scaled(s[j][e], g.scale) : -INFINITY, row_lse[r]);
          bits[c] = float_to_bf16(ops::softmax_input_grad(p, dp[j][e], row_delta[r]));
        }
        a_slot(ds, j, r) = pack(bits[0], bits[1]);
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
template <int D>
__global__ void __launch_bounds__(kThreads)
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
  float* lse_s = reinterpret_cast<float*>(do_s + 2 * T::kElems);  // two buffers
  float* delta_s = lse_s + 2 * kTile;                               // two buffers

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
    const int64_t stats = (b * g.n_heads + h) * g.seq + q0;
    load_stats(lse_s + (i & 1) * kTile, lse + stats, rows);
    load_stats(delta_s + (i & 1) * kTile, delta + stats, rows);
  };

  load_tile_async<D>(k_s, k + kv_at, g.ld_kv, k_rows);
  load_tile_async<D>(v_s, v + kv_at, g.ld_kv, k_rows);
  load_queries(0);
  mma::cp_async_commit();

  float dk[T::kDBlocks][4], dv[T::kDBlocks][4];
  zero(dk);
  zero(dv);

  for (int i = 0; i < iterations; ++i) {
    if (i + 1 < iterations) load_queries(i + 1);
    advance_pipeline(i + 1 < iterations);
    const uint16_t* q_tile = q_s + (i & 1) * T::kElems;
    const uint16_t* do_tile = do_s + (i & 1) * T::kElems;
    const float* tile_lse = lse_s + (i & 1) * kTile;
    const float* tile_delta = delta_s + (i & 1) * kTile;
    const int qt = kt + i % query_tiles;
    const int q0 = qt * kTile;
    const bool masked = qt == kt || q0 + kTile > g.seq;

    // Sᵀ (keys by queries), turned into scale·Sᵀ with the mask applied, in place.
    float st[kColumnBlocks][4];
    strip_product<D>(st, k_s, 16 * warp, q_tile, lane);
#pragma unroll
    for (int j = 0; j < kColumnBlocks; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const bool see = !masked || visible(q0 + strip_column(j, t, e), k0 + strip_row + 8 * (e >> 1), g.seq);
        st[j][e] = see ? scaled(st[j][e], g.scale) : -INFINITY;
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
          a_slot(pt, j, r) = pack(float_to_bf16(ops::softmax_exp(st[j][2 * r], tile_lse[c0])),
                                  float_to_bf16(ops::softmax_exp(st[j][2 * r + 1], tile_lse[c0 + 1])));
        }
      }
      strip_times_tile<D>(dv, pt, do_tile, lane);
    }
    // dK += dSᵀ·Q, dSᵀ = Pᵀ ∘ (dPᵀ − delta) with Pᵀ recomputed from the scaled scores.
    float dpt[kColumnBlocks][4];
    strip_product<D>(dpt, v_s, 16 * warp, do_tile, lane);
    uint32_t dst[kStripSteps][4];
#pragma unroll
    for (int j = 0; j < kColumnBlocks; ++j) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        uint16_t bits[2];
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int e = 2 * r + c, column = strip_column(j, t, e);
          const float p = ops::softmax_exp(st[j][e], tile_lse[column]);
          bits[c] = float_to_bf16(ops::softmax_input_grad(p, dpt[j][e], tile_delta[column]));
        }
        a_slot(dst, j, r) = pack(bits[0], bits[1]);
      }
    }
    strip_times_tile<D>(dk, dst, q_tile, lane);
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
