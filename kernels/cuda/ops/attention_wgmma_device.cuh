// The attention kernels on Hopper's warpgroup MMA (wgmma_primitives.cuh), head_dim 64 or 128:
// attention_mma_device.cuh's forward, grad_q and grad_kv, FlashAttention-2's algorithm and
// numerics unchanged, with each product of a tile pair (S = Q·Kᵀ and O += P·V forward;
// S, dP, dV, dK, dQ backward) D / 16 m64n64k16 wgmmas of the block's warpgroup instead of
// 16·D / 16 mma.sync per warp. The accumulators and A fragments of a wgmma are laid out as
// mma.sync's, so the softmax, the masks and the epilogues are the mma.sync kernels',
// element for element; under the CPU emulation (tests/ops/attention_mma_emulation_test.cc)
// both give the same bits.
//
// The streamed tiles (K and V forward and in grad_q; Q and dO in grad_kv) sit in shared
// memory as swizzled 128-byte rows (one position a row; at head_dim 128 in two halves of 64
// columns, one after the other), which wgmma reads through descriptors: K-major where the
// tile is Bᵀ (Kᵀ, Vᵀ, Qᵀ, dOᵀ), MN-major where it is B (V, K, dO, Q). The MN-major
// descriptors' offsets come as an argument (wgmma::MnMajorOffsets). The block's own tile
// (Q, dO; K, V) is staged with padded rows and read into A fragments with ldmatrix, as
// before; P and dS stay in registers. Each product waits for its wgmmas before anything
// reads them, one group in flight at a time: no overlap of the softmax with the tensor
// cores yet (FlashAttention-3's ping-pong would be the next step).
//
// The default on sm_90 (AttentionKernels::kMma opts out, attention_tc_kernels.cu), built
// for sm_90a. It passes the mma kernels' tests with the same errors against the SIMT
// kernels and measured faster than the mma kernels forward+backward (bench/RESULTS.md).
#pragma once

#include <cstdint>

#include "cuda/ops/attention_mma_device.cuh"
#include "cuda/ops/wgmma_primitives.cuh"

namespace fp8::cuda::attention_wgmma {

using attention_mma::kThreads;
using attention_tc::Geometry;
using attention_tc::kTile;

// A swizzled tile of kTile positions of D bf16: D / 64 halves, each kTile rows of 128
// bytes (one 128-byte swizzle atom across), one after the other.
template <int D>
struct Swizzled {
  static_assert(D == 64 || D == 128, "head_dim 64 or 128");
  static constexpr int kHalves = D / 64;
  static constexpr size_t kHalfBytes = static_cast<size_t>(kTile) * 128;
  static constexpr size_t kBytes = kHalves * kHalfBytes;
};
// Shared memory: slack to align the swizzled tiles to 1024 bytes (the swizzle's pattern
// repeats every 8 rows of 128 bytes, from an aligned address), two K and two V buffers,
// then Q with the mma.sync kernels' padded rows.
template <int D>
constexpr size_t kForwardBytes = 1024 + 4 * Swizzled<D>::kBytes + attention_mma::Tile<D>::kBytes;

// Queues the copy of `rows` rows of D bf16 from src (row stride ld, 16-byte aligned) into a
// swizzled tile; the rows past `rows` become zeros. The whole block, 16 bytes per copy.
template <int D>
__device__ __forceinline__ void load_swizzled_async(unsigned char* tile, const uint16_t* __restrict__ src,
                                                    int64_t ld, int rows) {
  constexpr int kChunks = D / 8;
  for (int i = static_cast<int>(threadIdx.x); i < kTile * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i % kChunks;
    const bool valid = r < rows;
    unsigned char* dst = tile + (c / 8) * Swizzled<D>::kHalfBytes + wgmma::swizzled_offset(r, c % 8);
    mma::cp_async_16(dst, valid ? src + r * ld + c * 8 : src, valid);
  }
}

// The descriptors of a swizzled tile's k-step kk, read K-major (its rows are B's columns:
// k-steps 32 bytes apart along each row, four a half) or MN-major (one half's rows are B's
// rows: k-steps 16 rows apart).
template <int D>
__device__ __forceinline__ wgmma::Descriptor k_major(const unsigned char* tile, int kk) {
  return wgmma::descriptor(tile + (kk / 4) * Swizzled<D>::kHalfBytes + 32 * (kk % 4), wgmma::kKMajorLbo,
                           wgmma::kKMajorSbo, wgmma::kSwizzle128);
}
__device__ __forceinline__ wgmma::Descriptor mn_major(const unsigned char* tile, int kk, wgmma::MnMajorOffsets mn) {
  return wgmma::descriptor(tile + 2048 * kk, mn.lbo, mn.sbo, wgmma::kSwizzle128);
}

#if defined(FP8_HAVE_WGMMA)  // the helpers that issue wgmma exist in the sm_90a device pass only
// acc = A·Bᵀ over head_dim (A's 16-row strips per warp, loaded with ldmatrix from the padded
// tile `a`; B the rows of a swizzled tile), D / 16 wgmmas, committed as one group: the
// mma.sync kernels' strip_product.
template <int D>
__device__ __forceinline__ void issue_strip_product(float (&acc)[32], const uint16_t* a, int warp, int lane,
                                                    const unsigned char* b) {
  uint32_t af[attention_mma::Tile<D>::kSteps][4];
#pragma unroll
  for (int kk = 0; kk < attention_mma::Tile<D>::kSteps; ++kk) {
    attention_mma::load_a<D>(af[kk], a, 16 * warp, 16 * kk, lane);
  }
  wgmma::fence();
#pragma unroll
  for (int kk = 0; kk < attention_mma::Tile<D>::kSteps; ++kk) {
    wgmma::mma_m64n64k16<0>(acc, af[kk], k_major<D>(b, kk), kk > 0);
  }
  wgmma::commit();
}

// acc += strip · tile: the bf16 A fragments of a 64-column strip (P or dS) times the rows of
// a swizzled tile, four wgmmas a 64-column half of the result (acc[h]): the mma.sync
// kernels' strip_times_tile.
template <int D>
__device__ __forceinline__ void issue_strip_times_tile(float (&acc)[D / 64][32],
                                                       const uint32_t (&strip)[attention_mma::kStripSteps][4],
                                                       const unsigned char* tile, wgmma::MnMajorOffsets mn) {
  wgmma::fence();
#pragma unroll
  for (int h = 0; h < D / 64; ++h) {
#pragma unroll
    for (int kk = 0; kk < attention_mma::kStripSteps; ++kk) {
      wgmma::mma_m64n64k16<1>(acc[h], strip[kk], mn_major(tile + h * Swizzled<D>::kHalfBytes, kk, mn), 1);
    }
  }
  wgmma::commit();
}

template <int H>
__device__ __forceinline__ void await(float (&acc)[H][32]) {
  wgmma::wait<0>();
  for (auto& half : acc) {
    for (float& x : half) wgmma::fence_operand(x);
  }
}
__device__ __forceinline__ void await(float (&acc)[32]) {
  wgmma::wait<0>();
  for (float& x : acc) wgmma::fence_operand(x);
}
#endif

// Resident blocks an SM the forward asks for: at head_dim 64, 4 (128 registers, as the
// mma.sync forward); at 128 its shared memory leaves room for 2.
template <int D>
inline constexpr int kForwardMinBlocks = D == 64 ? 4 : 2;

// The forward of attention_mma::attention_forward_mma_kernel (same grid, block, arguments
// and results), its products on wgmma.
template <int D>
__global__ void __launch_bounds__(kThreads, kForwardMinBlocks<D>)
    attention_forward_wgmma_kernel(Geometry g, const uint16_t* __restrict__ q, const uint16_t* __restrict__ k,
                                   const uint16_t* __restrict__ v, uint16_t* __restrict__ out,
                                   float* __restrict__ lse, float* __restrict__ row_amax, wgmma::MnMajorOffsets mn) {
#if !defined(FP8_HAVE_WGMMA)
  __trap();  // not an sm_90a image: the launcher sends no other device here
#else
  using namespace attention_mma;
  using T = Tile<D>;
  constexpr size_t kTileBytes = Swizzled<D>::kBytes;
  unsigned char* base = shared_bytes();
  unsigned char* k_s = base + (1024 - reinterpret_cast<uintptr_t>(base) % 1024) % 1024;  // two buffers
  unsigned char* v_s = k_s + 2 * kTileBytes;                                               // two buffers
  uint16_t* q_s = reinterpret_cast<uint16_t*>(v_s + 2 * kTileBytes);

  const QueryBlock<D> blk(g);
  const int qt = blk.qt, q0 = blk.q0;
  const LanePlace place;
  const int warp = place.warp, lane = place.lane, t = place.t, strip_row = place.strip_row;
  auto load_kv = [&](int kt) {
    const int k0 = kt * kTile;
    const int rows = min(kTile, g.seq - k0);
    const int64_t at = blk.kv_base + k0 * g.ld_kv;
    load_swizzled_async<D>(k_s + (kt & 1) * kTileBytes, k + at, g.ld_kv, rows);
    load_swizzled_async<D>(v_s + (kt & 1) * kTileBytes, v + at, g.ld_kv, rows);
  };

  load_tile_async<D>(q_s, q + blk.q_at, g.ld_q, blk.q_rows);
  load_kv(0);
  mma::cp_async_commit();

  float o[D / 64][32];  // o[j / 8][4 (j % 8) + e]: the mma.sync kernel's o[j][e]
  for (auto& half : o) {
    for (float& x : half) x = 0.0f;
  }
  uint32_t qf[T::kSteps][4];
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const float scale_log2 = g.scale * kLog2e;
  const bool padded = q0 + kTile > g.seq;

  for (int kt = 0; kt <= qt; ++kt) {
    if (kt < qt) {
      load_kv(kt + 1);
      mma::cp_async_commit();
      mma::cp_async_wait<1>();
    } else {
      mma::cp_async_wait<0>();
    }
    wgmma::proxy_fence();  // the copies that landed, visible to wgmma's reads
    __syncthreads();
    if (kt == 0) {
#pragma unroll
      for (int kk = 0; kk < T::kSteps; ++kk) load_a<D>(qf[kk], q_s, 16 * warp, 16 * kk, lane);
    }
    const unsigned char* k_tile = k_s + (kt & 1) * kTileBytes;
    const unsigned char* v_tile = v_s + (kt & 1) * kTileBytes;
    const int k0 = kt * kTile;
    const bool masked = kt == qt || padded;

    // S = Q·Kᵀ: k-steps of 16 head_dim columns, 32 bytes apart in each key's row.
    float s[32];
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < T::kSteps; ++kk) wgmma::mma_m64n64k16<0>(s, qf[kk], k_major<D>(k_tile, kk), kk > 0);
    wgmma::commit();
    await(s);

    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < kColumnBlocks; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1;
        float& x = s[4 * j + e];
        if (masked && !visible(q0 + strip_row + 8 * r, k0 + strip_column(j, t, e), g.seq)) x = -INFINITY;
        mx[r] = fmaxf(mx[r], x);
      }
    }
    float offset[2], alpha[2], sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float m_new = fmaxf(m[r], quad_max(mx[r]));
      offset[r] = max_offset(m_new, scale_log2);
      alpha[r] = softmax_exp2(m[r], scale_log2, offset[r]);
      m[r] = m_new;
    }
    uint32_t p[kStripSteps][4];
#pragma unroll
    for (int j = 0; j < kColumnBlocks; ++j) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const uint32_t pair = mma::pack_bf16x2(softmax_exp2(s[4 * j + 2 * r], scale_log2, offset[r]),
                                               softmax_exp2(s[4 * j + 2 * r + 1], scale_log2, offset[r]));
        sum[r] += low_bf16(pair) + high_bf16(pair);
        a_slot(p, j, r) = pair;
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) l[r] = l[r] * alpha[r] + sum[r];
#pragma unroll
    for (int j = 0; j < T::kDBlocks; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) o[j / 8][4 * (j % 8) + e] *= alpha[e >> 1];
    }

    // O += P·V: k-steps of 16 keys, 16 rows (2048 bytes) apart, V read transposed.
    issue_strip_times_tile<D>(o, p, v_tile, mn);
    await(o);
    __syncthreads();  // every warp is done with this buffer before the next iteration refills it
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] = quad_sum(l[r]);
    const int row = strip_row + 8 * r;
    uint32_t out_bits = 0u;
    if (row < blk.q_rows) {
      const float inv = 1.0f / l[r];
      uint16_t* dst = out + blk.q_at + row * g.ld_q + 2 * t;
#pragma unroll
      for (int j = 0; j < T::kDBlocks; ++j) {
        const float* oj = o[j / 8] + 4 * (j % 8);
        const uint32_t packed = mma::pack_bf16x2(oj[2 * r] * inv, oj[2 * r + 1] * inv);
        *reinterpret_cast<uint32_t*>(dst + 8 * j) = packed;
        out_bits = amax_bits_bf16x2(out_bits, packed);
      }
      if (t == 0) lse[blk.bh * g.seq + q0 + row] = ops::log_sum_exp(m[r] * g.scale, l[r]);
    }
    if (row_amax != nullptr) {
      out_bits = quad_max_bits(out_bits);
      if (t == 0 && row < blk.q_rows && out_bits != 0u) {
        const int64_t token = blk.bh / g.n_heads * g.seq + q0 + row;
        atomicMax(reinterpret_cast<unsigned*>(row_amax) + token, out_bits);
      }
    }
  }
#endif
}

// ---- backward ----------------------------------------------------------------------------------

// Writes a warp's rows of a 64 x D accumulator (acc[j / 8][4 (j % 8) + e]) times `factor`
// as bf16: attention_mma::store_strip for the wgmma layout.
template <int D>
__device__ __forceinline__ void store_rows(const float (&acc)[D / 64][32], float factor, uint16_t* __restrict__ dst,
                                           int64_t ld, int strip_row, int rows, int t) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = strip_row + 8 * r;
    if (row >= rows) continue;
    uint16_t* out = dst + row * ld + 2 * t;
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      const float* aj = acc[j / 8] + 4 * (j % 8);
      *reinterpret_cast<uint32_t*>(out + 8 * j) = mma::pack_bf16x2(aj[2 * r] * factor, aj[2 * r + 1] * factor);
    }
  }
}

// Shared memory of the backward kernels: the tiles they hold as A fragments (padded rows,
// for ldmatrix), the swizzled tiles they stream, double-buffered, and statistics.
template <int D>
constexpr size_t kGradQBytes =
    1024 + 4 * Swizzled<D>::kBytes + 2 * attention_mma::Tile<D>::kBytes + 2 * kTile * sizeof(float);
template <int D>
constexpr size_t kGradKvBytes =
    1024 + 4 * Swizzled<D>::kBytes + 2 * attention_mma::Tile<D>::kBytes + 4 * kTile * sizeof(float);

// attention_mma::attention_grad_q_mma_kernel (same grid, block, arguments and results), its
// products on wgmma: S = Q·Kᵀ and dP = dO·Vᵀ read K and V K-major, dQ += dS·K reads K
// MN-major.
template <int D>
__global__ void __launch_bounds__(kThreads)
    attention_grad_q_wgmma_kernel(Geometry g, const uint16_t* __restrict__ q, const uint16_t* __restrict__ k,
                                  const uint16_t* __restrict__ v, const float* __restrict__ lse,
                                  const float* __restrict__ delta, const uint16_t* __restrict__ grad_out,
                                  uint16_t* __restrict__ grad_q, wgmma::MnMajorOffsets mn) {
#if !defined(FP8_HAVE_WGMMA)
  __trap();
#else
  using namespace attention_mma;
  using T = Tile<D>;
  constexpr size_t kTileBytes = Swizzled<D>::kBytes;
  unsigned char* base = shared_bytes();
  unsigned char* k_s = base + (1024 - reinterpret_cast<uintptr_t>(base) % 1024) % 1024;  // two buffers
  unsigned char* v_s = k_s + 2 * kTileBytes;                                               // two buffers
  uint16_t* q_s = reinterpret_cast<uint16_t*>(v_s + 2 * kTileBytes);
  uint16_t* do_s = q_s + T::kElems;
  float* lse_s = reinterpret_cast<float*>(do_s + T::kElems);
  float* delta_s = lse_s + kTile;

  const QueryBlock<D> blk(g);
  const int qt = blk.qt, q0 = blk.q0, q_rows = blk.q_rows;
  const LanePlace place;
  const int warp = place.warp, lane = place.lane, t = place.t, strip_row = place.strip_row;
  const int64_t q_at = blk.q_at;
  auto load_kv = [&](int kt) {
    const int k0 = kt * kTile;
    const int rows = min(kTile, g.seq - k0);
    const int64_t at = blk.kv_base + k0 * g.ld_kv;
    load_swizzled_async<D>(k_s + (kt & 1) * kTileBytes, k + at, g.ld_kv, rows);
    load_swizzled_async<D>(v_s + (kt & 1) * kTileBytes, v + at, g.ld_kv, rows);
  };

  load_tile_async<D>(q_s, q + q_at, g.ld_q, q_rows);
  load_tile_async<D>(do_s, grad_out + q_at, g.ld_q, q_rows);
  load_stats_async(lse_s, lse + blk.bh * g.seq + q0, q_rows);
  load_stats_async(delta_s, delta + blk.bh * g.seq + q0, q_rows);
  load_kv(0);
  mma::cp_async_commit();

  float dq[D / 64][32];
  for (auto& half : dq) {
    for (float& x : half) x = 0.0f;
  }
  const bool padded = q0 + kTile > g.seq;
  const float scale_log2 = g.scale * kLog2e;
  float row_lse[2], row_delta[2];

  for (int kt = 0; kt <= qt; ++kt) {
    if (kt < qt) {
      load_kv(kt + 1);
      mma::cp_async_commit();
      mma::cp_async_wait<1>();
    } else {
      mma::cp_async_wait<0>();
    }
    wgmma::proxy_fence();
    __syncthreads();
    if (kt == 0) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        row_lse[r] = lse_s[strip_row + 8 * r] * kLog2e;
        row_delta[r] = delta_s[strip_row + 8 * r];
      }
    }
    const unsigned char* k_tile = k_s + (kt & 1) * kTileBytes;
    const unsigned char* v_tile = v_s + (kt & 1) * kTileBytes;
    const int k0 = kt * kTile;
    const bool masked = kt == qt || padded;

    // One group in flight at a time: the next group's A fragments never take registers an
    // unfinished wgmma still reads.
    float s[32], dp[32];
    issue_strip_product<D>(s, q_s, warp, lane, k_tile);
    await(s);
    issue_strip_product<D>(dp, do_s, warp, lane, v_tile);
    await(dp);
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
          const float p = see ? softmax_exp2(s[4 * j + e], scale_log2, row_lse[r]) : 0.0f;
          grad[c] = ops::softmax_input_grad(p, dp[4 * j + e], row_delta[r]);
        }
        a_slot(ds, j, r) = mma::pack_bf16x2(grad[0], grad[1]);
      }
    }
    issue_strip_times_tile<D>(dq, ds, k_tile, mn);  // dQ += dS·K
    await(dq);
    __syncthreads();
  }
  store_rows<D>(dq, g.scale, grad_q + q_at, g.ld_q, strip_row, q_rows, t);
#endif
}

// attention_mma::attention_grad_kv_mma_kernel (same grid, block, arguments and results),
// its products on wgmma: Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ read Q and dO K-major, dV += Pᵀ·dO and
// dK += dSᵀ·Q read them MN-major. K's and V's A fragments are loaded from shared memory
// for each product rather than held, which would take 32 more registers a thread. ptxas
// (sm_90a) gives it 187 registers at head_dim 64, 2 blocks an SM; capped at 168 for 3
// blocks, as the mma.sync kernel is, it spills 44 bytes. Which is faster is for a GPU to
// say: unmeasured.
template <int D>
__global__ void __launch_bounds__(kThreads, D == 64 ? 2 : 1)
    attention_grad_kv_wgmma_kernel(Geometry g, const uint16_t* __restrict__ q, const uint16_t* __restrict__ k,
                                   const uint16_t* __restrict__ v, const float* __restrict__ lse,
                                   const float* __restrict__ delta, const uint16_t* __restrict__ grad_out,
                                   uint16_t* __restrict__ grad_k, uint16_t* __restrict__ grad_v,
                                   wgmma::MnMajorOffsets mn) {
#if !defined(FP8_HAVE_WGMMA)
  __trap();
#else
  using namespace attention_mma;
  using T = Tile<D>;
  constexpr size_t kTileBytes = Swizzled<D>::kBytes;
  unsigned char* base = shared_bytes();
  unsigned char* q_s = base + (1024 - reinterpret_cast<uintptr_t>(base) % 1024) % 1024;  // two buffers
  unsigned char* do_s = q_s + 2 * kTileBytes;                                             // two buffers
  uint16_t* k_s = reinterpret_cast<uint16_t*>(do_s + 2 * kTileBytes);
  uint16_t* v_s = k_s + T::kElems;
  float* stats_s = reinterpret_cast<float*>(v_s + T::kElems);  // two buffers: lse·log2e, then delta

  const int kt = static_cast<int>(blockIdx.x / g.heads);
  const int64_t bkv = blockIdx.x % g.heads;
  const int64_t n_kv_heads = g.n_heads / g.group;
  const int64_t b = bkv / n_kv_heads, kvh = bkv % n_kv_heads;
  const int k0 = kt * kTile;
  const int k_rows = min(kTile, g.seq - k0);
  const LanePlace place;
  const int warp = place.warp, lane = place.lane, t = place.t, strip_row = place.strip_row;
  const int64_t kv_at = (b * g.seq + k0) * g.ld_kv + kvh * D;
  const int query_tiles = g.tiles - kt;
  const int iterations = static_cast<int>(g.group) * query_tiles;
  auto load_queries = [&](int i) {
    const int64_t h = kvh * g.group + i / query_tiles;
    const int q0 = (kt + i % query_tiles) * kTile;
    const int rows = min(kTile, g.seq - q0);
    const int64_t q_at = (b * g.seq + q0) * g.ld_q + h * D;
    load_swizzled_async<D>(q_s + (i & 1) * kTileBytes, q + q_at, g.ld_q, rows);
    load_swizzled_async<D>(do_s + (i & 1) * kTileBytes, grad_out + q_at, g.ld_q, rows);
  };
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
  stats_s[threadIdx.x] = fetch_stat(0);
  float next_stat = iterations > 1 ? fetch_stat(1) : 0.0f;

  float dk[D / 64][32], dv[D / 64][32];
  for (auto& half : dk) {
    for (float& x : half) x = 0.0f;
  }
  for (auto& half : dv) {
    for (float& x : half) x = 0.0f;
  }
  const float scale_log2 = g.scale * kLog2e;

  for (int i = 0; i < iterations; ++i) {
    if (i + 1 < iterations) {
      load_queries(i + 1);
      mma::cp_async_commit();
      mma::cp_async_wait<1>();
    } else {
      mma::cp_async_wait<0>();
    }
    wgmma::proxy_fence();
    __syncthreads();
    const unsigned char* q_tile = q_s + (i & 1) * kTileBytes;
    const unsigned char* do_tile = do_s + (i & 1) * kTileBytes;
    const float* tile_lse = stats_s + (i & 1) * 2 * kTile;
    const float* tile_delta = tile_lse + kTile;
    const int qt = kt + i % query_tiles;
    const int q0 = qt * kTile;
    const bool masked = qt == kt || q0 + kTile > g.seq;

    float st[32];
    issue_strip_product<D>(st, k_s, warp, lane, q_tile);
    await(st);
    if (masked) {
#pragma unroll
      for (int j = 0; j < kColumnBlocks; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if (!visible(q0 + strip_column(j, t, e), k0 + strip_row + 8 * (e >> 1), g.seq)) st[4 * j + e] = -INFINITY;
        }
      }
    }
    {
      uint32_t pt[kStripSteps][4];
#pragma unroll
      for (int j = 0; j < kColumnBlocks; ++j) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int c0 = strip_column(j, t, 2 * r);
          a_slot(pt, j, r) = mma::pack_bf16x2(softmax_exp2(st[4 * j + 2 * r], scale_log2, tile_lse[c0]),
                                              softmax_exp2(st[4 * j + 2 * r + 1], scale_log2, tile_lse[c0 + 1]));
        }
      }
      issue_strip_times_tile<D>(dv, pt, do_tile, mn);  // dV += Pᵀ·dO
      await(dv);
    }
    float dpt[32];
    issue_strip_product<D>(dpt, v_s, warp, lane, do_tile);
    await(dpt);
    uint32_t dst[kStripSteps][4];
#pragma unroll
    for (int j = 0; j < kColumnBlocks; ++j) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float grad[2];
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int e = 2 * r + c, column = strip_column(j, t, e);
          const float p = softmax_exp2(st[4 * j + e], scale_log2, tile_lse[column]);
          grad[c] = ops::softmax_input_grad(p, dpt[4 * j + e], tile_delta[column]);
        }
        a_slot(dst, j, r) = mma::pack_bf16x2(grad[0], grad[1]);
      }
    }
    issue_strip_times_tile<D>(dk, dst, q_tile, mn);  // dK += dSᵀ·Q
    await(dk);
    if (i + 1 < iterations) {
      stats_s[((i + 1) & 1) * 2 * kTile + threadIdx.x] = next_stat;
      if (i + 2 < iterations) next_stat = fetch_stat(i + 2);
    }
    __syncthreads();
  }
  store_rows<D>(dk, g.scale, grad_k + kv_at, g.ld_kv, strip_row, k_rows, t);
  store_rows<D>(dv, 1.0f, grad_v + kv_at, g.ld_kv, strip_row, k_rows, t);
#endif
}

}  // namespace fp8::cuda::attention_wgmma
