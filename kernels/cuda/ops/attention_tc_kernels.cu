// Causal grouped-query attention on the tensor cores for bf16 activations
// (attention_tc_kernels.h): FlashAttention-2's algorithm with WMMA 16x16x16 bf16 products.
//
// Every kernel runs 4 warps over 64-row tiles: warp w owns rows 16w..16w+15 of the tile its
// block owns (queries in the forward and grad_q kernels, keys in the grad_kv kernel), so
// the softmax of a row is that warp's business alone and only the loads of shared operand
// tiles need the whole block. Products go through WMMA fragments, whose register layout is
// unspecified: where a row must be scaled element by element (the forward's running
// output, rescaled whenever a row's max grows), the accumulator lives in shared memory and
// is loaded, multiplied into and stored back around each product; accumulators scaled only
// uniformly (grad_q, grad_k, grad_v by 1/sqrt(head_dim), at the end) stay in registers.
//
// Elementwise work on a score row (16 rows per warp, 64 columns) is done by two lanes per
// row, 32 columns each, joined with one xor shuffle. Scores, probabilities and dS are fp32
// there (the model arithmetic of ops/model_arith.h, as the SIMT kernels); P and dS are
// rounded once to bf16 to enter the next product, and the forward's running sum adds the
// rounded P, the weights P·V actually applied.
//
// Shared rows are padded (8 bf16 or 4 floats) so that the 16 rows of a fragment spread over
// the banks; every fragment pointer is 32-byte aligned (WMMA's rule) because each region
// starts on 128 bytes and 16 rows or 16 columns of any pitch here are a multiple of 32 bytes.
#include "cuda/ops/attention_tc_kernels.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "cuda/ops/attention_mma_kernels.h"
#include "cuda/ops/attention_tc_geometry.h"
#include "fp8/arith.h"
#include "ops/model_arith.h"

namespace fp8::cuda {
namespace {

namespace wmma = nvcuda::wmma;
using bf16 = __nv_bfloat16;
using attention_tc::after_launch;
using attention_tc::allow_shared_memory;
using attention_tc::Geometry;
using attention_tc::kTooLarge;
using attention_tc::make_geometry;
using attention_tc::with_head_dim;

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kTile = attention_tc::kTile;  // rows of a block's own tile, and of each streamed tile
static_assert(kTile == 16 * kWarps, "a warp owns 16 rows of the tile");
constexpr int kScorePitch = kTile + 4;     // floats per row of a score tile (S, dP)
constexpr int kProbPitch = kTile + 8;      // bf16 per row of a probability tile (P, dS)
constexpr unsigned kFullMask = 0xffffffffu;

template <int D>
struct Rows {
  static constexpr int kPitch = D + 8;         // bf16 per row of a q, k, v or grad_out tile
  static constexpr int kAccPitch = D + 4;      // floats per row of an fp32 accumulator tile
  static constexpr int kFrags = D / 16;        // fragments across head_dim
  static constexpr size_t kTileBytes = sizeof(uint16_t) * kTile * kPitch;
  static_assert(D % 16 == 0);
};

constexpr size_t kScoreBytes = sizeof(float) * kTile * kScorePitch;
constexpr size_t kProbBytes = sizeof(uint16_t) * kTile * kProbPitch;
constexpr size_t kStatBytes = sizeof(float) * kTile;

constexpr size_t align128(size_t b) { return (b + 127) / 128 * 128; }

// Shared memory of each kernel: offsets in bytes, each region on 128 bytes.
template <int D>
struct ForwardSmem {
  static constexpr size_t kQ = 0;
  static constexpr size_t kK = kQ + Rows<D>::kTileBytes;
  static constexpr size_t kV = kK + Rows<D>::kTileBytes;
  static constexpr size_t kS = kV + Rows<D>::kTileBytes;
  static constexpr size_t kP = kS + kScoreBytes;
  static constexpr size_t kO = kP + align128(kProbBytes);
  static constexpr size_t kMax = kO + align128(sizeof(float) * kTile * Rows<D>::kAccPitch);
  static constexpr size_t kSum = kMax + kStatBytes;
  static constexpr size_t kBytes = kSum + kStatBytes;
};

template <int D>
struct GradKvSmem {
  static constexpr size_t kK = 0;
  static constexpr size_t kV = kK + Rows<D>::kTileBytes;
  static constexpr size_t kQ = kV + Rows<D>::kTileBytes;
  static constexpr size_t kGradOut = kQ + Rows<D>::kTileBytes;
  static constexpr size_t kS = kGradOut + Rows<D>::kTileBytes;  // Sᵀ, then the output staging
  static constexpr size_t kGradP = kS + kScoreBytes;            // dPᵀ (staging spills into it)
  static constexpr size_t kP = kGradP + kScoreBytes;            // Pᵀ
  static constexpr size_t kGradS = kP + align128(kProbBytes);   // dSᵀ
  static constexpr size_t kLse = kGradS + align128(kProbBytes);
  static constexpr size_t kDelta = kLse + kStatBytes;
  static constexpr size_t kBytes = kDelta + kStatBytes;
  static_assert(2 * kScoreBytes >= sizeof(float) * kTile * Rows<D>::kAccPitch, "staging fits in Sᵀ and dPᵀ");
};

template <int D>
struct GradQSmem {
  static constexpr size_t kQ = 0;
  static constexpr size_t kGradOut = kQ + Rows<D>::kTileBytes;
  static constexpr size_t kK = kGradOut + Rows<D>::kTileBytes;
  static constexpr size_t kV = kK + Rows<D>::kTileBytes;
  static constexpr size_t kS = kV + Rows<D>::kTileBytes;  // S, then the output staging
  static constexpr size_t kGradP = kS + kScoreBytes;
  static constexpr size_t kGradS = kGradP + kScoreBytes;
  static constexpr size_t kLse = kGradS + align128(kProbBytes);
  static constexpr size_t kDelta = kLse + kStatBytes;
  static constexpr size_t kBytes = kDelta + kStatBytes;
  static_assert(2 * kScoreBytes >= sizeof(float) * kTile * Rows<D>::kAccPitch, "staging fits in S and dP");
};

template <typename T>
__device__ __forceinline__ T* region(unsigned char* smem, size_t offset) {
  return reinterpret_cast<T*>(smem + offset);
}

__device__ __forceinline__ unsigned char* shared_bytes() {
  extern __shared__ __align__(128) unsigned char attention_tc_smem[];
  return attention_tc_smem;
}

// As the SIMT kernels: scale·s rounded on its own, and a key counts for a query iff it is
// not in the query's future and the query is real.
__device__ __forceinline__ float scaled(float s, float scale) { return __fmul_rn(s, scale); }
__device__ __forceinline__ bool visible(int query, int key, int seq) { return key <= query && query < seq; }

// Two values rounded to bf16 in one 32-bit word, the first in the low half (little-endian).
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  return static_cast<uint32_t>(float_to_bf16(lo)) | (static_cast<uint32_t>(float_to_bf16(hi)) << 16);
}

// `rows` rows of D bf16 from src (row stride ld elements, 16-byte aligned) into a kTile-row
// tile; rows past `rows` are zero. 16 bytes per access, the whole block.
template <int D>
__device__ __forceinline__ void load_rows(uint16_t* tile, const uint16_t* __restrict__ src, int64_t ld, int rows) {
  constexpr int kChunks = D / 8;
  for (int i = static_cast<int>(threadIdx.x); i < kTile * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i % kChunks * 8;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r < rows) v = __ldg(reinterpret_cast<const uint4*>(src + r * ld + c));
    *reinterpret_cast<uint4*>(tile + r * Rows<D>::kPitch + c) = v;
  }
}

// Per-row statistics (lse, delta) of a tile: `rows` values from src, zero past them.
__device__ __forceinline__ void load_stats(float* dst, const float* __restrict__ src, int rows) {
  for (int i = static_cast<int>(threadIdx.x); i < kTile; i += kThreads) dst[i] = i < rows ? __ldg(src + i) : 0.0f;
}

// One 16 x 64 score strip of warp w: C[r][c] = Σ_d A[16w + r][d]·B[c][d] over D, A and B
// kTile-row bf16 tiles (B read transposed as a column-major operand), into `scores`.
template <int D>
__device__ __forceinline__ void score_strip(const uint16_t* a, const uint16_t* b, float* scores, int warp) {
  constexpr int P = Rows<D>::kPitch;
  for (int j = 0; j < kTile / 16; ++j) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int kk = 0; kk < D / 16; ++kk) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> fa;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> fb;
      wmma::load_matrix_sync(fa, reinterpret_cast<const bf16*>(a + 16 * warp * P + 16 * kk), P);
      wmma::load_matrix_sync(fb, reinterpret_cast<const bf16*>(b + 16 * j * P + 16 * kk), P);
      wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(scores + 16 * warp * kScorePitch + 16 * j, acc, kScorePitch, wmma::mem_row_major);
  }
}

// acc[f] += Σ_k Prob[16w + r][k]·B[k][16f + c] over the kTile columns of a probability strip
// (P or dS, bf16) and the kTile rows of a bf16 tile B: the output products.
template <int D>
__device__ __forceinline__ void prob_times_rows(
    const uint16_t* prob, const uint16_t* b, int warp,
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> (&acc)[Rows<D>::kFrags]) {
  constexpr int P = Rows<D>::kPitch;
  for (int kk = 0; kk < kTile / 16; ++kk) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> fa;
    wmma::load_matrix_sync(fa, reinterpret_cast<const bf16*>(prob + 16 * warp * kProbPitch + 16 * kk), kProbPitch);
    for (int f = 0; f < Rows<D>::kFrags; ++f) {
      wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> fb;
      wmma::load_matrix_sync(fb, reinterpret_cast<const bf16*>(b + 16 * kk * P + 16 * f), P);
      wmma::mma_sync(acc[f], fa, fb, acc[f]);
    }
  }
}

// Writes warp w's 16 rows of accumulators, times `factor`, as bf16 rows of dst (row stride
// ld) for the rows below `rows`, through `staging` (16 fp32 rows of kAccPitch per warp).
template <int D>
__device__ __forceinline__ void store_strip(wmma::fragment<wmma::accumulator, 16, 16, 16, float> (&acc)[Rows<D>::kFrags],
                                            float factor, float* staging, uint16_t* __restrict__ dst, int64_t ld,
                                            int rows, int warp, int lane) {
  constexpr int AP = Rows<D>::kAccPitch;
  float* mine = staging + 16 * warp * AP;
  for (int f = 0; f < Rows<D>::kFrags; ++f) {
    // Every element by the same factor: the fragment's layout does not matter.
    for (int e = 0; e < acc[f].num_elements; ++e) acc[f].x[e] *= factor;
    wmma::store_matrix_sync(mine + 16 * f, acc[f], AP, wmma::mem_row_major);
  }
  __syncwarp();
  // Two lanes per row, D/2 columns each, two bf16 per 32-bit store.
  const int r = lane / 2, c0 = lane % 2 * (D / 2);
  if (16 * warp + r < rows) {
    uint32_t* out = reinterpret_cast<uint32_t*>(dst + (16 * warp + r) * ld + c0);
    const float* src = mine + r * AP + c0;
    for (int c = 0; c < D / 2; c += 2) out[c / 2] = pack_bf16x2(src[c], src[c + 1]);
  }
}

// ---- forward -----------------------------------------------------------------------------------

// One block: query tile `qt` of head h, batch b; the key tiles 0..qt in increasing order.
// Online softmax per row: m the running max, l the running sum of the rounded P, O the
// running output in shared memory, rescaled by exp(m_old - m_new) whenever m grows;
// out = O / l and lse = m + log l at the end.
template <int D>
__global__ void __launch_bounds__(kThreads)
    attention_forward_tc_kernel(Geometry g, const uint16_t* __restrict__ q, const uint16_t* __restrict__ k,
                                const uint16_t* __restrict__ v, uint16_t* __restrict__ out, float* __restrict__ lse) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();  // bf16 WMMA needs sm_80; the launcher never sends a kernel to an older device
#else
  using S = ForwardSmem<D>;
  constexpr int AP = Rows<D>::kAccPitch;
  unsigned char* smem = shared_bytes();
  uint16_t* q_s = region<uint16_t>(smem, S::kQ);
  uint16_t* k_s = region<uint16_t>(smem, S::kK);
  uint16_t* v_s = region<uint16_t>(smem, S::kV);
  float* s_s = region<float>(smem, S::kS);
  uint16_t* p_s = region<uint16_t>(smem, S::kP);
  float* o_s = region<float>(smem, S::kO);
  float* m_s = region<float>(smem, S::kMax);
  float* l_s = region<float>(smem, S::kSum);

  const int qt = g.tiles - 1 - static_cast<int>(blockIdx.x / g.heads);  // heaviest tiles first
  const int64_t bh = blockIdx.x % g.heads;
  const int64_t b = bh / g.n_heads, h = bh % g.n_heads, kvh = h / g.group;
  const int q0 = qt * kTile;
  const int q_rows = min(kTile, g.seq - q0);
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;

  load_rows<D>(q_s, q + (b * g.seq + q0) * g.ld_q + h * D, g.ld_q, q_rows);
  for (int i = static_cast<int>(threadIdx.x); i < kTile * AP; i += kThreads) o_s[i] = 0.0f;
  for (int i = static_cast<int>(threadIdx.x); i < kTile; i += kThreads) {
    m_s[i] = -INFINITY;
    l_s[i] = 0.0f;
  }
  // This lane's row of the warp's strip and its half of the columns.
  const int row = 16 * warp + lane / 2, half = lane % 2;
  const int query = q0 + row;

  for (int kt = 0; kt <= qt; ++kt) {
    const int k0 = kt * kTile;
    __syncthreads();  // the last tile's K and V are no longer read
    const int64_t kv_at = (b * g.seq + k0) * g.ld_kv + kvh * D;
    load_rows<D>(k_s, k + kv_at, g.ld_kv, min(kTile, g.seq - k0));
    load_rows<D>(v_s, v + kv_at, g.ld_kv, min(kTile, g.seq - k0));
    __syncthreads();

    score_strip<D>(q_s, k_s, s_s, warp);
    __syncwarp();

    float* s_row = s_s + row * kScorePitch + half * (kTile / 2);
    float mx = -INFINITY;
    for (int c = 0; c < kTile / 2; ++c) {
      const int key = k0 + half * (kTile / 2) + c;
      const float s = visible(query, key, g.seq) ? scaled(s_row[c], g.scale) : -INFINITY;
      s_row[c] = s;
      mx = fmaxf(mx, s);
    }
    mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 1));
    const float m_old = m_s[row];
    const float m_new = fmaxf(m_old, mx);
    uint16_t* p_row = p_s + row * kProbPitch + half * (kTile / 2);
    float sum = 0.0f;
    for (int c = 0; c < kTile / 2; ++c) {
      const uint16_t p = float_to_bf16(ops::softmax_exp(s_row[c], m_new));
      p_row[c] = p;
      sum += bf16_to_float(p);
    }
    sum += __shfl_xor_sync(kFullMask, sum, 1);
    const float alpha = ops::online_softmax_rescale(m_old, m_new);
    float* o_row = o_s + row * AP + half * (D / 2);
    for (int c = 0; c < D / 2; ++c) o_row[c] *= alpha;
    __syncwarp();  // both lanes of the row read m_old and l before either writes
    if (half == 0) {
      m_s[row] = m_new;
      l_s[row] = l_s[row] * alpha + sum;
    }
    __syncwarp();

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[Rows<D>::kFrags];
    for (int f = 0; f < Rows<D>::kFrags; ++f) {
      wmma::load_matrix_sync(acc[f], o_s + 16 * warp * AP + 16 * f, AP, wmma::mem_row_major);
    }
    prob_times_rows<D>(p_s, v_s, warp, acc);
    for (int f = 0; f < Rows<D>::kFrags; ++f) {
      wmma::store_matrix_sync(o_s + 16 * warp * AP + 16 * f, acc[f], AP, wmma::mem_row_major);
    }
    __syncwarp();
  }

  if (row < q_rows) {
    const float l = l_s[row];
    const float inv = 1.0f / l;
    const float* o_row = o_s + row * AP + half * (D / 2);
    uint32_t* dst = reinterpret_cast<uint32_t*>(out + (b * g.seq + q0 + row) * g.ld_q + h * D + half * (D / 2));
    for (int c = 0; c < D / 2; c += 2) dst[c / 2] = pack_bf16x2(o_row[c] * inv, o_row[c + 1] * inv);
    if (half == 0) lse[bh * g.seq + q0 + row] = ops::log_sum_exp(m_s[row], l);
  }
#endif
}

// ---- backward ----------------------------------------------------------------------------------

// The elementwise step of the backward on one lane's half row of a strip (kTile / 2 pairs):
// pair c is query query0 + query_step·c and key key0 + key_step·c, with the query's lse and
// delta at stats[stat_step·c]. P = exp(scale·s − lse) where visible, dS = P·(dP − delta);
// P (when p_out is given) and dS rounded to bf16 for the products that follow.
__device__ __forceinline__ void probabilities_and_grads(const float* s, const float* dp, uint16_t* p_out,
                                                        uint16_t* ds_out, int query0, int query_step, int key0,
                                                        int key_step, const float* lse, const float* delta,
                                                        int stat_step, const Geometry& g) {
  for (int c = 0; c < kTile / 2; ++c) {
    const int query = query0 + query_step * c, key = key0 + key_step * c;
    const float p = ops::softmax_exp(visible(query, key, g.seq) ? scaled(s[c], g.scale) : -INFINITY,
                                     lse[stat_step * c]);
    if (p_out != nullptr) p_out[c] = float_to_bf16(p);
    ds_out[c] = float_to_bf16(ops::softmax_input_grad(p, dp[c], delta[stat_step * c]));
  }
}

// grad_k, grad_v: one block owns key tile `kt` of kv head kvh, batch b, and streams the
// query tiles kt..tiles-1 of every query head of the group, in a fixed order:
//   Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ, Pᵀ = exp(scale·Sᵀ − lse), dSᵀ = Pᵀ ∘ (dPᵀ − delta),
//   dV += Pᵀ·dO, dK += dSᵀ·Q;   grad_k = scale·dK, grad_v = dV.
template <int D>
__global__ void __launch_bounds__(kThreads)
    attention_grad_kv_tc_kernel(Geometry g, const uint16_t* __restrict__ q, const uint16_t* __restrict__ k,
                                const uint16_t* __restrict__ v, const float* __restrict__ lse,
                                const float* __restrict__ delta, const uint16_t* __restrict__ grad_out,
                                uint16_t* __restrict__ grad_k, uint16_t* __restrict__ grad_v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();
#else
  using S = GradKvSmem<D>;
  unsigned char* smem = shared_bytes();
  uint16_t* k_s = region<uint16_t>(smem, S::kK);
  uint16_t* v_s = region<uint16_t>(smem, S::kV);
  uint16_t* q_s = region<uint16_t>(smem, S::kQ);
  uint16_t* do_s = region<uint16_t>(smem, S::kGradOut);
  float* st_s = region<float>(smem, S::kS);
  float* dpt_s = region<float>(smem, S::kGradP);
  uint16_t* pt_s = region<uint16_t>(smem, S::kP);
  uint16_t* dst_s = region<uint16_t>(smem, S::kGradS);
  float* lse_s = region<float>(smem, S::kLse);
  float* delta_s = region<float>(smem, S::kDelta);

  const int kt = static_cast<int>(blockIdx.x / g.heads);  // the first key tiles see the most queries
  const int64_t bkv = blockIdx.x % g.heads;
  const int64_t n_kv_heads = g.n_heads / g.group;
  const int64_t b = bkv / n_kv_heads, kvh = bkv % n_kv_heads;
  const int k0 = kt * kTile;
  const int k_rows = min(kTile, g.seq - k0);
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t kv_at = (b * g.seq + k0) * g.ld_kv + kvh * D;

  load_rows<D>(k_s, k + kv_at, g.ld_kv, k_rows);
  load_rows<D>(v_s, v + kv_at, g.ld_kv, k_rows);

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> dk[Rows<D>::kFrags], dv[Rows<D>::kFrags];
  for (int f = 0; f < Rows<D>::kFrags; ++f) {
    wmma::fill_fragment(dk[f], 0.0f);
    wmma::fill_fragment(dv[f], 0.0f);
  }
  const int row = 16 * warp + lane / 2, half = lane % 2;  // this lane's key row and column half
  const int c0 = half * (kTile / 2);

  for (int64_t h = kvh * g.group; h < (kvh + 1) * g.group; ++h) {
    for (int qt = kt; qt < g.tiles; ++qt) {
      const int q0 = qt * kTile;
      const int q_rows = min(kTile, g.seq - q0);
      __syncthreads();  // the last query tile is no longer read
      const int64_t q_at = (b * g.seq + q0) * g.ld_q + h * D;
      load_rows<D>(q_s, q + q_at, g.ld_q, q_rows);
      load_rows<D>(do_s, grad_out + q_at, g.ld_q, q_rows);
      const int64_t stats = (b * g.n_heads + h) * g.seq + q0;
      load_stats(lse_s, lse + stats, q_rows);
      load_stats(delta_s, delta + stats, q_rows);
      __syncthreads();

      score_strip<D>(k_s, q_s, st_s, warp);    // Sᵀ: keys by queries
      score_strip<D>(v_s, do_s, dpt_s, warp);  // dPᵀ
      __syncwarp();
      // Columns are queries: each pair has its own query's lse and delta.
      probabilities_and_grads(st_s + row * kScorePitch + c0, dpt_s + row * kScorePitch + c0,
                              pt_s + row * kProbPitch + c0, dst_s + row * kProbPitch + c0, q0 + c0, 1, k0 + row, 0,
                              lse_s + c0, delta_s + c0, 1, g);
      __syncwarp();
      prob_times_rows<D>(pt_s, do_s, warp, dv);   // dV += Pᵀ·dO
      prob_times_rows<D>(dst_s, q_s, warp, dk);   // dK += dSᵀ·Q
    }
  }
  __syncthreads();  // the staging overwrites Sᵀ and dPᵀ, which every warp is done with
  store_strip<D>(dk, g.scale, st_s, grad_k + kv_at, g.ld_kv, k_rows, warp, lane);
  __syncwarp();
  store_strip<D>(dv, 1.0f, st_s, grad_v + kv_at, g.ld_kv, k_rows, warp, lane);
#endif
}

// grad_q: one block owns query tile `qt` of head h, batch b, and streams the key tiles
// 0..qt in increasing order: S = Q·Kᵀ, dP = dO·Vᵀ, P = exp(scale·S − lse),
// dS = P ∘ (dP − delta), dQ += dS·K;   grad_q = scale·dQ.
template <int D>
__global__ void __launch_bounds__(kThreads)
    attention_grad_q_tc_kernel(Geometry g, const uint16_t* __restrict__ q, const uint16_t* __restrict__ k,
                               const uint16_t* __restrict__ v, const float* __restrict__ lse,
                               const float* __restrict__ delta, const uint16_t* __restrict__ grad_out,
                               uint16_t* __restrict__ grad_q) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();
#else
  using S = GradQSmem<D>;
  unsigned char* smem = shared_bytes();
  uint16_t* q_s = region<uint16_t>(smem, S::kQ);
  uint16_t* do_s = region<uint16_t>(smem, S::kGradOut);
  uint16_t* k_s = region<uint16_t>(smem, S::kK);
  uint16_t* v_s = region<uint16_t>(smem, S::kV);
  float* s_s = region<float>(smem, S::kS);
  float* dp_s = region<float>(smem, S::kGradP);
  uint16_t* ds_s = region<uint16_t>(smem, S::kGradS);
  float* lse_s = region<float>(smem, S::kLse);
  float* delta_s = region<float>(smem, S::kDelta);

  const int qt = g.tiles - 1 - static_cast<int>(blockIdx.x / g.heads);
  const int64_t bh = blockIdx.x % g.heads;
  const int64_t b = bh / g.n_heads, h = bh % g.n_heads, kvh = h / g.group;
  const int q0 = qt * kTile;
  const int q_rows = min(kTile, g.seq - q0);
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t q_at = (b * g.seq + q0) * g.ld_q + h * D;

  load_rows<D>(q_s, q + q_at, g.ld_q, q_rows);
  load_rows<D>(do_s, grad_out + q_at, g.ld_q, q_rows);
  load_stats(lse_s, lse + bh * g.seq + q0, q_rows);
  load_stats(delta_s, delta + bh * g.seq + q0, q_rows);

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> dq[Rows<D>::kFrags];
  for (int f = 0; f < Rows<D>::kFrags; ++f) wmma::fill_fragment(dq[f], 0.0f);
  const int row = 16 * warp + lane / 2, half = lane % 2;  // this lane's query row and column half
  const int c0 = half * (kTile / 2);

  for (int kt = 0; kt <= qt; ++kt) {
    const int k0 = kt * kTile;
    __syncthreads();  // the last key tile is no longer read (and, first time, lse and delta are in)
    const int64_t kv_at = (b * g.seq + k0) * g.ld_kv + kvh * D;
    load_rows<D>(k_s, k + kv_at, g.ld_kv, min(kTile, g.seq - k0));
    load_rows<D>(v_s, v + kv_at, g.ld_kv, min(kTile, g.seq - k0));
    __syncthreads();

    score_strip<D>(q_s, k_s, s_s, warp);    // S
    score_strip<D>(do_s, v_s, dp_s, warp);  // dP
    __syncwarp();
    // Columns are keys: every pair has this row's lse and delta.
    probabilities_and_grads(s_s + row * kScorePitch + c0, dp_s + row * kScorePitch + c0, nullptr,
                            ds_s + row * kProbPitch + c0, q0 + row, 0, k0 + c0, 1, lse_s + row, delta_s + row, 0, g);
    __syncwarp();
    prob_times_rows<D>(ds_s, k_s, warp, dq);  // dQ += dS·K
  }
  __syncthreads();  // the staging overwrites S and dP
  store_strip<D>(dq, g.scale, s_s, grad_q + q_at, g.ld_q, q_rows, warp, lane);
#endif
}

// ---- launchers -----------------------------------------------------------------------------------

// FP8_CUDA_ATTENTION: "simt" or "mma" (attention_tc_kernels.h), else empty. Read at every
// launch (a getenv is nothing beside an attention kernel), so that bench_attention can
// time the implementations side by side in one process.
std::string requested_attention() {
  const char* e = std::getenv("FP8_CUDA_ATTENTION");
  return e != nullptr && (std::strcmp(e, "simt") == 0 || std::strcmp(e, "mma") == 0) ? e : "";
}

}  // namespace

bool tensor_core_attention_applies(const AttentionDims& d, HpType act, std::initializer_list<const void*> pointers) {
  if (act != HpType::kBFloat16 || (d.head_dim != 64 && d.head_dim != 128) || requested_attention() == "simt") {
    return false;
  }
  for (const void* p : pointers) {
    if ((reinterpret_cast<uintptr_t>(p) & 15u) != 0) return false;
  }
  int device = 0, major = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
    return false;
  }
  return major >= 8;
}

LaunchResult launch_attention_forward_tc(const AttentionDims& d, const void* q, const void* k, const void* v,
                                         void* out, float* lse, cudaStream_t stream) {
  if (requested_attention() == "mma") return launch_attention_forward_mma(d, q, k, v, out, lse, stream);
  return with_head_dim(d.head_dim, [&](auto bucket) -> LaunchResult {
    constexpr int D = decltype(bucket)::value;
    Geometry g{};
    unsigned blocks = 0;
    if (!make_geometry(d, d.batch * d.n_heads, &g, &blocks)) return kTooLarge;
    constexpr size_t kBytes = ForwardSmem<D>::kBytes;
    const LaunchResult r = allow_shared_memory(attention_forward_tc_kernel<D>, kBytes,
                                               "cudaFuncSetAttribute (tensor-core attention forward kernel)");
    if (!r.ok()) return r;
    attention_forward_tc_kernel<D><<<blocks, kThreads, kBytes, stream>>>(
        g, static_cast<const uint16_t*>(q), static_cast<const uint16_t*>(k), static_cast<const uint16_t*>(v),
        static_cast<uint16_t*>(out), lse);
    return after_launch("tensor-core attention forward kernel");
  });
}

LaunchResult launch_attention_backward_tc(const AttentionDims& d, const void* q, const void* k, const void* v,
                                          const float* lse, const float* delta, const void* grad_out, void* grad_q,
                                          void* grad_k, void* grad_v, cudaStream_t stream) {
  if (requested_attention() == "mma") {
    return launch_attention_backward_mma(d, q, k, v, lse, delta, grad_out, grad_q, grad_k, grad_v, stream);
  }
  const auto* qa = static_cast<const uint16_t*>(q);
  const auto* ka = static_cast<const uint16_t*>(k);
  const auto* va = static_cast<const uint16_t*>(v);
  const auto* go = static_cast<const uint16_t*>(grad_out);
  return with_head_dim(d.head_dim, [&](auto bucket) -> LaunchResult {
    constexpr int D = decltype(bucket)::value;
    Geometry kv{}, qg{};
    unsigned kv_blocks = 0, q_blocks = 0;
    if (!make_geometry(d, d.batch * d.n_kv_heads, &kv, &kv_blocks) ||
        !make_geometry(d, d.batch * d.n_heads, &qg, &q_blocks)) {
      return kTooLarge;
    }
    constexpr size_t kKvBytes = GradKvSmem<D>::kBytes, kQBytes = GradQSmem<D>::kBytes;
    LaunchResult r = allow_shared_memory(attention_grad_kv_tc_kernel<D>, kKvBytes,
                                         "cudaFuncSetAttribute (tensor-core attention grad_kv kernel)");
    if (!r.ok()) return r;
    attention_grad_kv_tc_kernel<D><<<kv_blocks, kThreads, kKvBytes, stream>>>(
        kv, qa, ka, va, lse, delta, go, static_cast<uint16_t*>(grad_k), static_cast<uint16_t*>(grad_v));
    if (r = after_launch("tensor-core attention grad_kv kernel"); !r.ok()) return r;
    r = allow_shared_memory(attention_grad_q_tc_kernel<D>, kQBytes,
                            "cudaFuncSetAttribute (tensor-core attention grad_q kernel)");
    if (!r.ok()) return r;
    attention_grad_q_tc_kernel<D><<<q_blocks, kThreads, kQBytes, stream>>>(qg, qa, ka, va, lse, delta, go,
                                                                           static_cast<uint16_t*>(grad_q));
    return after_launch("tensor-core attention grad_q kernel");
  });
}

}  // namespace fp8::cuda
