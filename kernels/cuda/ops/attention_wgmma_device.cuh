// The attention forward on Hopper's warpgroup MMA (wgmma_primitives.cuh) for head_dim 64:
// attention_mma_device.cuh's forward, FlashAttention-2's algorithm and numerics unchanged,
// with its two products per key tile, S = Q·Kᵀ and O += P·V, each four m64n64k16 wgmmas
// of the block's warpgroup instead of 64 mma.sync per warp. The accumulators and A
// fragments of a wgmma are laid out as mma.sync's, so the softmax, the masks and the
// epilogue are the mma.sync kernel's, element for element; under the CPU emulation
// (tests/ops/attention_mma_emulation_test.cc) both kernels give the same bits.
//
// K and V tiles sit in shared memory as swizzled 128-byte rows (one key a row), which
// wgmma reads through descriptors: K-major for Kᵀ, MN-major (transposed) for V. Q is
// staged and read into A fragments with ldmatrix, as before, and P stays in registers.
// Each product waits for its wgmmas before the softmax reads them: no overlap of the
// softmax with the tensor cores yet (FlashAttention-3's ping-pong would be the next step).
//
// Opt-in (FP8_CUDA_ATTENTION=wgmma, attention_tc_kernels.cu), sm_90 only, built for sm_90a.
// Not yet run on a GPU.
#pragma once

#include <cstdint>

#include "cuda/ops/attention_mma_device.cuh"
#include "cuda/ops/wgmma_primitives.cuh"

namespace fp8::cuda::attention_wgmma {

using attention_mma::kThreads;
using attention_tc::Geometry;
using attention_tc::kTile;

constexpr int kD = 64;  // one key of K or V is one 128-byte swizzled row
constexpr size_t kSwizzledTileBytes = static_cast<size_t>(kTile) * 128;
// Shared memory: slack to align the swizzled tiles to 1024 bytes (the swizzle's pattern
// repeats every 8 rows of 128 bytes, from an aligned address), two K and two V buffers,
// then Q with the mma.sync kernels' padded rows.
constexpr size_t kForwardBytes = 1024 + 4 * kSwizzledTileBytes + attention_mma::Tile<kD>::kBytes;

// Queues the copy of `rows` rows of kD bf16 from src (row stride ld, 16-byte aligned) into a
// swizzled tile; the rows past `rows` become zeros. The whole block, 16 bytes per copy.
__device__ __forceinline__ void load_swizzled_async(unsigned char* tile, const uint16_t* __restrict__ src,
                                                    int64_t ld, int rows) {
  constexpr int kChunks = kD / 8;
  for (int i = static_cast<int>(threadIdx.x); i < kTile * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i % kChunks;
    const bool valid = r < rows;
    mma::cp_async_16(tile + wgmma::swizzled_offset(r, c), valid ? src + r * ld + c * 8 : src, valid);
  }
}

// The forward of attention_mma::attention_forward_mma_kernel (same grid, block, arguments
// and results), its products on wgmma.
__global__ void __launch_bounds__(kThreads, attention_mma::kForwardMinBlocks<kD>)
    attention_forward_wgmma_kernel(Geometry g, const uint16_t* __restrict__ q, const uint16_t* __restrict__ k,
                                   const uint16_t* __restrict__ v, uint16_t* __restrict__ out,
                                   float* __restrict__ lse, float* __restrict__ row_amax) {
#if !defined(FP8_HAVE_WGMMA)
  __trap();  // not an sm_90a image: the launcher sends no other device here
#else
  using namespace attention_mma;
  using T = Tile<kD>;
  unsigned char* base = shared_bytes();
  unsigned char* k_s = base + (1024 - reinterpret_cast<uintptr_t>(base) % 1024) % 1024;  // two buffers
  unsigned char* v_s = k_s + 2 * kSwizzledTileBytes;                                       // two buffers
  uint16_t* q_s = reinterpret_cast<uint16_t*>(v_s + 2 * kSwizzledTileBytes);

  const QueryBlock<kD> blk(g);
  const int qt = blk.qt, q0 = blk.q0;
  const LanePlace place;
  const int warp = place.warp, lane = place.lane, t = place.t, strip_row = place.strip_row;
  auto load_kv = [&](int kt) {
    const int k0 = kt * kTile;
    const int rows = min(kTile, g.seq - k0);
    const int64_t at = blk.kv_base + k0 * g.ld_kv;
    load_swizzled_async(k_s + (kt & 1) * kSwizzledTileBytes, k + at, g.ld_kv, rows);
    load_swizzled_async(v_s + (kt & 1) * kSwizzledTileBytes, v + at, g.ld_kv, rows);
  };

  load_tile_async<kD>(q_s, q + blk.q_at, g.ld_q, blk.q_rows);
  load_kv(0);
  mma::cp_async_commit();

  float o[32];  // o[4j + e]: the mma.sync kernel's o[j][e]
  for (float& x : o) x = 0.0f;
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
      for (int kk = 0; kk < T::kSteps; ++kk) load_a<kD>(qf[kk], q_s, 16 * warp, 16 * kk, lane);
    }
    const unsigned char* k_tile = k_s + (kt & 1) * kSwizzledTileBytes;
    const unsigned char* v_tile = v_s + (kt & 1) * kSwizzledTileBytes;
    const int k0 = kt * kTile;
    const bool masked = kt == qt || padded;

    // S = Q·Kᵀ: k-steps of 16 head_dim columns, 32 bytes apart in each key's row.
    float s[32];
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < T::kSteps; ++kk) {
      wgmma::mma_m64n64k16<0>(
          s, qf[kk], wgmma::descriptor(k_tile + 32 * kk, wgmma::kKMajorLbo, wgmma::kKMajorSbo, wgmma::kSwizzle128),
          kk > 0);
    }
    wgmma::commit();
    wgmma::wait<0>();
    for (float& x : s) wgmma::fence_operand(x);

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
      for (int e = 0; e < 4; ++e) o[4 * j + e] *= alpha[e >> 1];
    }

    // O += P·V: k-steps of 16 keys, 16 rows (2048 bytes) apart, V read transposed.
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < kStripSteps; ++kk) {
      wgmma::mma_m64n64k16<1>(
          o, p[kk], wgmma::descriptor(v_tile + 2048 * kk, wgmma::kMnMajorLbo, wgmma::kMnMajorSbo, wgmma::kSwizzle128),
          1);
    }
    wgmma::commit();
    wgmma::wait<0>();
    for (float& x : o) wgmma::fence_operand(x);
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
        const uint32_t packed = mma::pack_bf16x2(o[4 * j + 2 * r] * inv, o[4 * j + 2 * r + 1] * inv);
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

}  // namespace fp8::cuda::attention_wgmma
