// Causal grouped-query attention on CUDA (attention_kernels.h): flash-attention 2 in fp32 on
// the SIMT cores.
//
// Every kernel but the delta pass runs 256 threads seen as a 16 x 16 grid (tx = thread % 16,
// ty = thread / 16), stages its operands in shared memory and builds everything from two
// tile products:
//  * scores   C[r][c]  = Σ_d A[r][d]·B[c][d]   (Q·Kᵀ, dO·Vᵀ, and K·Qᵀ, V·dOᵀ transposed):
//             the thread owns rows ty + 16i and columns tx + 16j, so a score row lives in
//             the 16 lanes of a half-warp and its max and sum are 4-step xor shuffles;
//  * outputs  C[r][d] += Σ_k A[r][k]·B[k][d]   (P·V, dS·K, Pᵀ·dO, dSᵀ·Q): the thread owns
//             rows ty + 16i and head-dim columns in chunks of 4 (2 in the 32 bucket) from
//             kVec·tx, so a warp reads one contiguous stretch of B's row.
// Shared rows are padded by 4 floats: the float4 reads of 8 consecutive rows (one
// quarter-warp phase) then fall on distinct banks.
//
// head_dim is bucketed (32, 64, 128, 256) at compile time; columns past head_dim are zero
// in shared memory, so they add nothing, and the score products stop at head_dim rounded
// up to 4. Rows past seq are zero too and masked like the causal future: a score counts
// iff key <= query < seq.
//
// Determinism and agreement with the forward: every dot product accumulates with fmaf in
// increasing d, key or query order, in a fixed thread, and the xor shuffles give every lane
// of a row the same bits. The backward recomputes each score with the forward's exact
// sequence of operations (fmaf is symmetric in its factors, so K·Qᵀ matches Q·Kᵀ), hence
// P = exp(s - lse) uses the forward's s. No floating-point atomics: grad_k / grad_v are
// owned by the block of their key tile, grad_q by the block of its query tile.
//
// Activations (q, k, v, out, grad_out, grad_q, grad_k, grad_v) are fp32 or bf16, the
// kernels' element type A; lse and delta are fp32. Only the global loads and stores see A:
// load_tile widens into the fp32 shared tiles and store_rows rounds each result once, so
// every product, softmax and reduction is the fp32 one whatever A is.
//
// Work order: blocks are numbered heaviest tile first (the last query tiles see the most
// keys, the first key tiles the most queries), so the tail of the grid is short work.
#include "cuda/ops/attention_kernels.h"

#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "cuda/ops/activation_access.cuh"
#include "cuda/ops/attention_tc_kernels.h"
#include "cuda/ops/model_kernels.h"
#include "ops/model_arith.h"

namespace fp8::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kGrid = 16;  // the thread grid is kGrid x kGrid
constexpr int kPad = 4;    // floats of padding per shared row
constexpr unsigned kFullMask = 0xffffffffu;

using model::bf16_bits;

static_assert(kGrid * kGrid == kThreads);

// Geometry of the output products' head-dim columns in bucket D.
template <int D>
struct HeadDim {
  static constexpr int kPitch = D + kPad;             // floats per shared row of q, k, v, grad_out
  static constexpr int kVec = D >= 64 ? 4 : 2;        // consecutive columns per chunk
  static constexpr int kChunks = D / (kGrid * kVec);  // chunks per thread, kGrid·kVec columns apart
  static constexpr int kCols = kVec * kChunks;        // = D / 16 columns per thread
  static_assert(kChunks >= 1 && kCols * kGrid == D);
};

// Tile sizes, chosen so that with head_dim 128 a block needs <= ~100 KB of shared memory
// (two blocks per SM) and a thread <= 128 registers; the 256 bucket halves a tile to stay
// there. Score pitches are padded like the head-dim rows.
//
// Forward: a block owns kRows query rows and streams kKeys keys at a time; K and V share
// one buffer (V is loaded once the scores are taken).
template <int D>
struct ForwardTiles {
  static constexpr int kRows = D == 256 ? 32 : 64;
  static constexpr int kKeys = 64;
  static constexpr int kScorePitch = kKeys + kPad;
  static constexpr int kQ = 0;                                             // [kRows][kPitch]
  static constexpr int kKv = kQ + kRows * HeadDim<D>::kPitch;              // [kKeys][kPitch]
  static constexpr int kP = kKv + kKeys * HeadDim<D>::kPitch;              // [kRows][kScorePitch]
  static constexpr size_t kBytes = sizeof(float) * (kP + kRows * kScorePitch);
};

// grad_q: a block owns kRows query rows (with their grad_out rows) and streams keys; K and
// V share one buffer (V for dP first, then K for S and dS·K).
template <int D>
struct GradQTiles {
  static constexpr int kRows = D == 256 ? 32 : 64;
  static constexpr int kKeys = 32;
  static constexpr int kScorePitch = kKeys + kPad;
  static constexpr int kQ = 0;                                 // [kRows][kPitch]
  static constexpr int kGradOut = kQ + kRows * HeadDim<D>::kPitch;     // [kRows][kPitch]
  static constexpr int kKv = kGradOut + kRows * HeadDim<D>::kPitch;    // [kKeys][kPitch]
  static constexpr int kGradS = kKv + kKeys * HeadDim<D>::kPitch;      // [kRows][kScorePitch]
  static constexpr size_t kBytes = sizeof(float) * (kGradS + kRows * kScorePitch);
};

// grad_k / grad_v: a block owns kKeys key rows of one kv head and streams kRows query rows
// at a time of every query head of the group. P and dS are kept transposed ([key][query]),
// the layout the Pᵀ·dO and dSᵀ·Q products read.
template <int D>
struct GradKvTiles {
  static constexpr int kKeys = 32;
  static constexpr int kRows = D == 256 ? 16 : 32;
  static constexpr int kScorePitch = kRows + kPad;
  static constexpr int kK = 0;                                  // [kKeys][kPitch]
  static constexpr int kV = kK + kKeys * HeadDim<D>::kPitch;    // [kKeys][kPitch]
  static constexpr int kQ = kV + kKeys * HeadDim<D>::kPitch;    // [kRows][kPitch]
  static constexpr int kGradOut = kQ + kRows * HeadDim<D>::kPitch;     // [kRows][kPitch]
  static constexpr int kP = kGradOut + kRows * HeadDim<D>::kPitch;     // [kKeys][kScorePitch]
  static constexpr int kGradS = kP + kKeys * kScorePitch;              // [kKeys][kScorePitch]
  static constexpr size_t kBytes = sizeof(float) * (kGradS + kKeys * kScorePitch);
};

// What every kernel needs to know about the call. Positions fit in int (the model ops
// reject seq > INT_MAX); offsets into the tensors are int64.
struct Geometry {
  int64_t n_heads;
  int64_t n_kv_heads;
  int64_t group;   // n_heads / n_kv_heads
  int64_t ld_q;    // floats between consecutive positions of q, out, grad_out, grad_q
  int64_t ld_kv;   // ... of k, v, grad_k, grad_v
  int64_t heads;   // batch·n_heads or batch·n_kv_heads: the grid's fastest-moving index
  int seq;
  int tiles;       // row tiles per head: the grid's slow index
  int head_dim;
  int d_end;       // head_dim rounded up to 4: where the score products stop
  bool vec4;       // head_dim % 4 == 0 and every activation aligned for 4 elements: rows
                   // move as one access per 4 columns (a float4, or 8 bytes of bf16)
  float scale;     // 1 / sqrt(head_dim)
};

// ---- shared-memory tiles and the two products ------------------------------------------------

__device__ __forceinline__ float* shared_floats() {
  extern __shared__ float4 shared_tiles[];  // float4: 16-byte alignment for the vector accesses
  return reinterpret_cast<float*>(shared_tiles);
}

__device__ __forceinline__ float4 lds4(const float* p) { return *reinterpret_cast<const float4*>(p); }

__device__ __forceinline__ float component(const float4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// scale·s, rounded on its own: never fused with the subtraction that follows it into an fma,
// so that the backward's scaled scores are the forward's to the bit.
__device__ __forceinline__ float scaled(float s, float scale) { return __fmul_rn(s, scale); }

// A key counts for a query iff it is not in the query's future; queries past seq (the
// padding of a partial tile) see nothing, so they add nothing to grad_k / grad_v.
__device__ __forceinline__ bool visible(int query, int key, int seq) { return key <= query && query < seq; }

// Read-only global loads of activations, widened to float (__ldg: no kernel writes what it
// reads), and the stores of results, rounded once for bf16.
__device__ __forceinline__ float ldg_act(const float* p) { return __ldg(p); }
__device__ __forceinline__ float ldg_act(const bf16_bits* p) { return bf16_to_float(__ldg(p)); }

__device__ __forceinline__ float4 ldg_act4(const float* p) { return __ldg(reinterpret_cast<const float4*>(p)); }
__device__ __forceinline__ float4 ldg_act4(const bf16_bits* p) {
  float v[4];
  model::unpack_bf16x4(__ldg(reinterpret_cast<const uint2*>(p)), v);
  return make_float4(v[0], v[1], v[2], v[3]);
}

__device__ __forceinline__ void store_act4(float* p, const float* x) {
  *reinterpret_cast<float4*>(p) = make_float4(x[0], x[1], x[2], x[3]);
}
__device__ __forceinline__ void store_act4(bf16_bits* p, const float* x) {
  *reinterpret_cast<uint2*>(p) = make_uint2(model::pack_bf16x2(x[0], x[1]), model::pack_bf16x2(x[2], x[3]));
}

// Copies `rows` rows of head_dim activations (row stride ld) into a ROWS x (D + kPad) fp32 tile and
// zero-fills the rest of it: the columns past head_dim and the rows past `rows`. A thread
// always copies the same 4 columns, of every kStep-th row.
template <int D, int ROWS, typename A>
__device__ __forceinline__ void load_tile(float* tile, const A* __restrict__ src, int64_t ld, int rows,
                                          const Geometry& g) {
  constexpr int kVecs = D / 4;  // float4s per row
  constexpr int kStep = kThreads / kVecs;
  static_assert(kThreads % kVecs == 0 && ROWS % kStep == 0);
  const int d = static_cast<int>(threadIdx.x) % kVecs * 4;
  const int r0 = static_cast<int>(threadIdx.x) / kVecs;
  const A* p = src + r0 * ld + d;
  float* t = tile + r0 * HeadDim<D>::kPitch + d;
  // How many of the 4 columns are real: all, some (the last chunk of a head_dim that is not
  // a multiple of 4, whose rows are then only 4-byte aligned) or none.
  const int cols = min(4, g.head_dim - d);
#pragma unroll 4
  for (int it = 0; it < ROWS / kStep; ++it, p += kStep * ld, t += kStep * HeadDim<D>::kPitch) {
    float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (r0 + it * kStep < rows && cols > 0) {
      if (g.vec4) {
        x = ldg_act4(p);
      } else {
        x.x = ldg_act(p);
        if (cols > 1) x.y = ldg_act(p + 1);
        if (cols > 2) x.z = ldg_act(p + 2);
        if (cols > 3) x.w = ldg_act(p + 3);
      }
    }
    *reinterpret_cast<float4*>(t) = x;
  }
}

// acc[i][j] = Σ_{d < d_end} a[ty + 16i][d] · b[tx + 16j][d] over row-major tiles of pitch PA, PB.
template <int RI, int CJ, int PA, int PB>
__device__ __forceinline__ void score_tile(const float* a, const float* b, int d_end, float (&acc)[RI][CJ]) {
  const float* a0 = a + (threadIdx.x / kGrid) * PA;
  const float* b0 = b + (threadIdx.x % kGrid) * PB;
#pragma unroll
  for (int i = 0; i < RI; ++i) {
#pragma unroll
    for (int j = 0; j < CJ; ++j) acc[i][j] = 0.0f;
  }
#pragma unroll 1
  for (int d = 0; d < d_end; d += 4) {
    float4 av[RI], bv[CJ];
#pragma unroll
    for (int i = 0; i < RI; ++i) av[i] = lds4(a0 + i * kGrid * PA + d);
#pragma unroll
    for (int j = 0; j < CJ; ++j) bv[j] = lds4(b0 + j * kGrid * PB + d);
#pragma unroll
    for (int i = 0; i < RI; ++i) {
#pragma unroll
      for (int j = 0; j < CJ; ++j) {
        float s = acc[i][j];
        s = fmaf(av[i].x, bv[j].x, s);
        s = fmaf(av[i].y, bv[j].y, s);
        s = fmaf(av[i].z, bv[j].z, s);
        acc[i][j] = fmaf(av[i].w, bv[j].w, s);
      }
    }
  }
}

// acc[i][..] += Σ_{k < K} a[ty + 16i][k] · b[k][the thread's head-dim columns], a of pitch PA,
// b a head-dim tile.
template <int D, int RI, int K, int PA>
__device__ __forceinline__ void accumulate_product(const float* a, const float* b,
                                                   float (&acc)[RI][HeadDim<D>::kCols]) {
  using H = HeadDim<D>;
  const float* a0 = a + (threadIdx.x / kGrid) * PA;
  const float* b0 = b + (threadIdx.x % kGrid) * H::kVec;
#pragma unroll 1
  for (int k = 0; k < K; k += 4) {
    float4 av[RI];
#pragma unroll
    for (int i = 0; i < RI; ++i) av[i] = lds4(a0 + i * kGrid * PA + k);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const float* row = b0 + (k + kk) * H::kPitch;
      float bv[H::kCols];
#pragma unroll
      for (int c = 0; c < H::kChunks; ++c) {
        if constexpr (H::kVec == 4) {
          const float4 x = lds4(row + c * kGrid * 4);
          bv[4 * c] = x.x;
          bv[4 * c + 1] = x.y;
          bv[4 * c + 2] = x.z;
          bv[4 * c + 3] = x.w;
        } else {
          const float2 x = *reinterpret_cast<const float2*>(row + c * kGrid * 2);
          bv[2 * c] = x.x;
          bv[2 * c + 1] = x.y;
        }
      }
#pragma unroll
      for (int i = 0; i < RI; ++i) {
        const float ak = component(av[i], kk);
#pragma unroll
        for (int e = 0; e < H::kCols; ++e) acc[i][e] = fmaf(ak, bv[e], acc[i][e]);
      }
    }
  }
}

// Writes the thread's head-dim columns of rows ty + 16i < rows (row stride ld) from acc,
// each rounded once when A is bf16.
template <int D, int RI, typename A>
__device__ __forceinline__ void store_rows(A* __restrict__ dst, int64_t ld, int rows, const Geometry& g,
                                           const float (&acc)[RI][HeadDim<D>::kCols]) {
  using H = HeadDim<D>;
  const int ty = static_cast<int>(threadIdx.x) / kGrid, tx = static_cast<int>(threadIdx.x) % kGrid;
#pragma unroll
  for (int i = 0; i < RI; ++i) {
    const int r = ty + kGrid * i;
    if (r >= rows) continue;
    A* row = dst + r * ld;
#pragma unroll
    for (int c = 0; c < H::kChunks; ++c) {
      const int d = c * kGrid * H::kVec + tx * H::kVec;
      const float* x = &acc[i][c * H::kVec];
      if (H::kVec == 4 && g.vec4 && d < g.head_dim) {  // then all 4 columns are real
        store_act4(row + d, x);
      } else {
#pragma unroll
        for (int e = 0; e < H::kVec; ++e) {
          if (d + e < g.head_dim) model::store_act(row + d + e, x[e]);
        }
      }
    }
  }
}

// Max and sum over the 16 lanes holding one score row; every lane gets the same bits.
__device__ __forceinline__ float row_max(float x) {
#pragma unroll
  for (int offset = kGrid / 2; offset > 0; offset /= 2) x = fmaxf(x, __shfl_xor_sync(kFullMask, x, offset));
  return x;
}

__device__ __forceinline__ float row_sum(float x) {
#pragma unroll
  for (int offset = kGrid / 2; offset > 0; offset /= 2) x += __shfl_xor_sync(kFullMask, x, offset);
  return x;
}

// ---- forward -----------------------------------------------------------------------------------

// One block: query tile `qt` of head h, batch b. Online softmax over the key tiles: each
// row keeps its running max m and sum l of exp(s - m), and the output accumulator o is
// rescaled whenever m grows; out = o / l and lse = m + log l at the end.
template <int D, typename A>
__global__ void __launch_bounds__(kThreads, 2)
    attention_forward_kernel(Geometry g, const A* __restrict__ q, const A* __restrict__ k, const A* __restrict__ v,
                             A* __restrict__ out, float* __restrict__ lse) {
  using H = HeadDim<D>;
  using T = ForwardTiles<D>;
  constexpr int RI = T::kRows / kGrid, CJ = T::kKeys / kGrid;
  float* const q_s = shared_floats() + T::kQ;
  float* const kv_s = shared_floats() + T::kKv;
  float* const p_s = shared_floats() + T::kP;
  const int ty = static_cast<int>(threadIdx.x) / kGrid, tx = static_cast<int>(threadIdx.x) % kGrid;

  const int64_t bh = blockIdx.x % g.heads;  // b·n_heads + h
  const int qt = g.tiles - 1 - static_cast<int>(blockIdx.x / g.heads);
  const int64_t b = bh / g.n_heads, h = bh % g.n_heads;
  const int q0 = qt * T::kRows;
  const int q_rows = min(T::kRows, g.seq - q0);
  const int64_t q_at = (b * g.seq + q0) * g.ld_q + h * g.head_dim;
  const A* const k_head = k + b * g.seq * g.ld_kv + h / g.group * g.head_dim;
  const A* const v_head = v + b * g.seq * g.ld_kv + h / g.group * g.head_dim;

  load_tile<D, T::kRows>(q_s, q + q_at, g.ld_q, q_rows, g);

  float o[RI][H::kCols];
  float m[RI], l[RI];
#pragma unroll
  for (int i = 0; i < RI; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
#pragma unroll
    for (int e = 0; e < H::kCols; ++e) o[i][e] = 0.0f;
  }

  const int key_end = q0 + q_rows;  // no row of the tile sees a key at or past this
  for (int k0 = 0; k0 < key_end; k0 += T::kKeys) {
    const int k_rows = min(T::kKeys, g.seq - k0);
    __syncthreads();  // the previous P·V is done with kv_s and p_s
    load_tile<D, T::kKeys>(kv_s, k_head + k0 * g.ld_kv, g.ld_kv, k_rows, g);
    __syncthreads();

    float s[RI][CJ];
    score_tile<RI, CJ, H::kPitch, H::kPitch>(q_s, kv_s, g.d_end, s);
#pragma unroll
    for (int i = 0; i < RI; ++i) {
      const int r = q0 + ty + kGrid * i;
      float tile_max = -INFINITY;
#pragma unroll
      for (int j = 0; j < CJ; ++j) {
        s[i][j] = visible(r, k0 + tx + kGrid * j, g.seq) ? scaled(s[i][j], g.scale) : -INFINITY;
        tile_max = fmaxf(tile_max, s[i][j]);
      }
      const float m_new = fmaxf(m[i], row_max(tile_max));
      const float rescale = ops::online_softmax_rescale(m[i], m_new);
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < CJ; ++j) {
        const float p = ops::softmax_exp(s[i][j], m_new);
        sum += p;
        p_s[(ty + kGrid * i) * T::kScorePitch + tx + kGrid * j] = p;
      }
      l[i] = l[i] * rescale + row_sum(sum);
      m[i] = m_new;
#pragma unroll
      for (int e = 0; e < H::kCols; ++e) o[i][e] *= rescale;
    }
    __syncthreads();  // K is consumed and P is complete
    load_tile<D, T::kKeys>(kv_s, v_head + k0 * g.ld_kv, g.ld_kv, k_rows, g);
    __syncthreads();
    accumulate_product<D, RI, T::kKeys, T::kScorePitch>(p_s, kv_s, o);
  }

  // A row below seq sees its own key, so l >= 1 (its max contributes exp(0)); the padding
  // rows past seq have l = 0 and are never written.
#pragma unroll
  for (int i = 0; i < RI; ++i) {
    const float norm = l[i] > 0.0f ? l[i] : 1.0f;
#pragma unroll
    for (int e = 0; e < H::kCols; ++e) o[i][e] /= norm;
  }
  store_rows<D, RI>(out + q_at, g.ld_q, q_rows, g, o);
  if (tx == 0) {
#pragma unroll
    for (int i = 0; i < RI; ++i) {
      const int r = ty + kGrid * i;
      if (r < q_rows) lse[bh * g.seq + q0 + r] = ops::log_sum_exp(m[i], l[i]);
    }
  }
}

// ---- backward ----------------------------------------------------------------------------------

// delta[b, h, i] = grad_out[b, i, h, :] · out[b, i, h, :], one warp per row (rows in memory
// order, (b·seq + i)·n_heads + h), summed in double like the CPU and rounded once.
template <typename A>
__global__ void __launch_bounds__(kThreads)
    attention_delta_kernel(int64_t rows, int64_t n_heads, int64_t seq, int head_dim, const A* __restrict__ out,
                           const A* __restrict__ grad_out, float* __restrict__ delta) {
  const int64_t row = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  if (row >= rows) return;  // whole warps leave together, so the shuffles below see full warps
  const A* o = out + row * head_dim;
  const A* go = grad_out + row * head_dim;
  double acc = 0.0;
  for (int d = lane; d < head_dim; d += 32) acc += static_cast<double>(ldg_act(o + d)) * ldg_act(go + d);
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) acc += __shfl_xor_sync(kFullMask, acc, offset);
  if (lane == 0) {
    const int64_t h = row % n_heads, pos = row / n_heads;  // pos = b·seq + i
    const int64_t b = pos / seq, i = pos % seq;
    delta[(b * n_heads + h) * seq + i] = static_cast<float>(acc);
  }
}

// The same for bf16 rows of head_dim = 8·kLanes, 16-byte aligned: kLanes lanes a row, 8
// elements (one 16-byte load of each input) a lane, so that a warp reads whole rows with
// full-width loads (2-byte loads, a row a warp, left most of the bandwidth idle).
// Each bf16 product is exact in double and so are sums of 64 or 128 of them unless their
// magnitudes span more than ~2^37, so the order of the sum does not show in the result.
template <int kLanes>
__global__ void __launch_bounds__(kThreads)
    attention_delta_bf16_kernel(int64_t rows, int64_t n_heads, int64_t seq, const uint16_t* __restrict__ out,
                                const uint16_t* __restrict__ grad_out, float* __restrict__ delta) {
  static_assert(kLanes >= 1 && kLanes <= 32 && (kLanes & (kLanes - 1)) == 0, "a power of two lanes a row");
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const int64_t row = t / kLanes;
  double acc = 0.0;
  if (row < rows) {
    const uint4 o = __ldg(reinterpret_cast<const uint4*>(out) + t);
    const uint4 g = __ldg(reinterpret_cast<const uint4*>(grad_out) + t);
    const uint32_t ow[4] = {o.x, o.y, o.z, o.w}, gw[4] = {g.x, g.y, g.z, g.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      acc += static_cast<double>(bf16_to_float(static_cast<uint16_t>(ow[i] & 0xffffu))) *
             bf16_to_float(static_cast<uint16_t>(gw[i] & 0xffffu));
      acc += static_cast<double>(bf16_to_float(static_cast<uint16_t>(ow[i] >> 16))) *
             bf16_to_float(static_cast<uint16_t>(gw[i] >> 16));
    }
  }
  // Every lane takes part (rows past the end add zeros), so the warp's shuffles are whole.
#pragma unroll
  for (int offset = kLanes / 2; offset > 0; offset /= 2) acc += __shfl_xor_sync(kFullMask, acc, offset);
  if (row < rows && t % kLanes == 0) {
    const int64_t h = row % n_heads, pos = row / n_heads;  // pos = b·seq + i
    const int64_t b = pos / seq, i = pos % seq;
    delta[(b * n_heads + h) * seq + i] = static_cast<float>(acc);
  }
}

// One block: key tile `kt` of kv head kvh, batch b. For every query head of the group in
// increasing order and every query tile that can see the tile, in increasing order:
//   Sᵀ = K·Qᵀ, Pᵀ = exp(scale·Sᵀ − lse), dPᵀ = V·dOᵀ, dSᵀ = Pᵀ ∘ (dPᵀ − delta),
//   dV += Pᵀ·dO, dK += dSᵀ·Q;
// then grad_k = scale·dK and grad_v = dV.
template <int D, typename A>
__global__ void __launch_bounds__(kThreads, 2)
    attention_grad_kv_kernel(Geometry g, const A* __restrict__ q, const A* __restrict__ k, const A* __restrict__ v,
                             const float* __restrict__ lse, const float* __restrict__ delta,
                             const A* __restrict__ grad_out, A* __restrict__ grad_k, A* __restrict__ grad_v) {
  using H = HeadDim<D>;
  using T = GradKvTiles<D>;
  constexpr int RI = T::kKeys / kGrid, CJ = T::kRows / kGrid;
  float* const k_s = shared_floats() + T::kK;
  float* const v_s = shared_floats() + T::kV;
  float* const q_s = shared_floats() + T::kQ;
  float* const do_s = shared_floats() + T::kGradOut;
  float* const p_s = shared_floats() + T::kP;
  float* const ds_s = shared_floats() + T::kGradS;
  const int ty = static_cast<int>(threadIdx.x) / kGrid, tx = static_cast<int>(threadIdx.x) % kGrid;

  const int64_t bkv = blockIdx.x % g.heads;  // b·n_kv_heads + kvh
  const int kt = static_cast<int>(blockIdx.x / g.heads);
  const int64_t b = bkv / g.n_kv_heads, kvh = bkv % g.n_kv_heads;
  const int k0 = kt * T::kKeys;
  const int k_rows = min(T::kKeys, g.seq - k0);
  const int64_t kv_at = (b * g.seq + k0) * g.ld_kv + kvh * g.head_dim;

  load_tile<D, T::kKeys>(k_s, k + kv_at, g.ld_kv, k_rows, g);
  load_tile<D, T::kKeys>(v_s, v + kv_at, g.ld_kv, k_rows, g);

  float dk[RI][H::kCols], dv[RI][H::kCols];
#pragma unroll
  for (int i = 0; i < RI; ++i) {
#pragma unroll
    for (int e = 0; e < H::kCols; ++e) dk[i][e] = dv[i][e] = 0.0f;
  }

  const int q_first = k0 / T::kRows * T::kRows;  // the query tile holding query k0, the first to see key k0
  for (int64_t h = kvh * g.group; h < (kvh + 1) * g.group; ++h) {
    const int64_t row_stats = (b * g.n_heads + h) * g.seq;  // lse and delta of this head
    for (int q0 = q_first; q0 < g.seq; q0 += T::kRows) {
      const int q_rows = min(T::kRows, g.seq - q0);
      const int64_t q_at = (b * g.seq + q0) * g.ld_q + h * g.head_dim;
      float col_lse[CJ], col_delta[CJ];  // of the queries tx + 16j, this thread's score columns
#pragma unroll
      for (int j = 0; j < CJ; ++j) {
        const int r = tx + kGrid * j;
        col_lse[j] = r < q_rows ? __ldg(lse + row_stats + q0 + r) : 0.0f;
        col_delta[j] = r < q_rows ? __ldg(delta + row_stats + q0 + r) : 0.0f;
      }
      __syncthreads();  // the previous products are done with q_s, do_s, p_s, ds_s
      load_tile<D, T::kRows>(q_s, q + q_at, g.ld_q, q_rows, g);
      load_tile<D, T::kRows>(do_s, grad_out + q_at, g.ld_q, q_rows, g);
      __syncthreads();

      float s[RI][CJ], dp[RI][CJ];
      score_tile<RI, CJ, H::kPitch, H::kPitch>(k_s, q_s, g.d_end, s);
      score_tile<RI, CJ, H::kPitch, H::kPitch>(v_s, do_s, g.d_end, dp);
#pragma unroll
      for (int i = 0; i < RI; ++i) {
        const int c = k0 + ty + kGrid * i;
#pragma unroll
        for (int j = 0; j < CJ; ++j) {
          const int r = q0 + tx + kGrid * j;
          const float p = ops::softmax_exp(visible(r, c, g.seq) ? scaled(s[i][j], g.scale) : -INFINITY, col_lse[j]);
          const int at = (ty + kGrid * i) * T::kScorePitch + tx + kGrid * j;
          p_s[at] = p;
          ds_s[at] = ops::softmax_input_grad(p, dp[i][j], col_delta[j]);
        }
      }
      __syncthreads();
      accumulate_product<D, RI, T::kRows, T::kScorePitch>(p_s, do_s, dv);
      accumulate_product<D, RI, T::kRows, T::kScorePitch>(ds_s, q_s, dk);
    }
  }

#pragma unroll
  for (int i = 0; i < RI; ++i) {
#pragma unroll
    for (int e = 0; e < H::kCols; ++e) dk[i][e] *= g.scale;
  }
  store_rows<D, RI>(grad_k + kv_at, g.ld_kv, k_rows, g, dk);
  store_rows<D, RI>(grad_v + kv_at, g.ld_kv, k_rows, g, dv);
}

// One block: query tile `qt` of head h, batch b. Over the visible key tiles in increasing
// order: dP = dO·Vᵀ, S = Q·Kᵀ, P = exp(scale·S − lse), dS = P ∘ (dP − delta), dQ += dS·K;
// then grad_q = scale·dQ.
template <int D, typename A>
__global__ void __launch_bounds__(kThreads, 2)
    attention_grad_q_kernel(Geometry g, const A* __restrict__ q, const A* __restrict__ k, const A* __restrict__ v,
                            const float* __restrict__ lse, const float* __restrict__ delta,
                            const A* __restrict__ grad_out, A* __restrict__ grad_q) {
  using H = HeadDim<D>;
  using T = GradQTiles<D>;
  constexpr int RI = T::kRows / kGrid, CJ = T::kKeys / kGrid;
  float* const q_s = shared_floats() + T::kQ;
  float* const do_s = shared_floats() + T::kGradOut;
  float* const kv_s = shared_floats() + T::kKv;
  float* const ds_s = shared_floats() + T::kGradS;
  const int ty = static_cast<int>(threadIdx.x) / kGrid, tx = static_cast<int>(threadIdx.x) % kGrid;

  const int64_t bh = blockIdx.x % g.heads;  // b·n_heads + h
  const int qt = g.tiles - 1 - static_cast<int>(blockIdx.x / g.heads);
  const int64_t b = bh / g.n_heads, h = bh % g.n_heads;
  const int q0 = qt * T::kRows;
  const int q_rows = min(T::kRows, g.seq - q0);
  const int64_t q_at = (b * g.seq + q0) * g.ld_q + h * g.head_dim;
  const A* const k_head = k + b * g.seq * g.ld_kv + h / g.group * g.head_dim;
  const A* const v_head = v + b * g.seq * g.ld_kv + h / g.group * g.head_dim;

  float row_lse[RI], row_delta[RI];  // of this thread's score rows ty + 16i
#pragma unroll
  for (int i = 0; i < RI; ++i) {
    const int r = ty + kGrid * i;
    row_lse[i] = r < q_rows ? __ldg(lse + bh * g.seq + q0 + r) : 0.0f;
    row_delta[i] = r < q_rows ? __ldg(delta + bh * g.seq + q0 + r) : 0.0f;
  }
  load_tile<D, T::kRows>(q_s, q + q_at, g.ld_q, q_rows, g);
  load_tile<D, T::kRows>(do_s, grad_out + q_at, g.ld_q, q_rows, g);

  float dq[RI][H::kCols];
#pragma unroll
  for (int i = 0; i < RI; ++i) {
#pragma unroll
    for (int e = 0; e < H::kCols; ++e) dq[i][e] = 0.0f;
  }

  const int key_end = q0 + q_rows;
  for (int k0 = 0; k0 < key_end; k0 += T::kKeys) {
    const int k_rows = min(T::kKeys, g.seq - k0);
    __syncthreads();  // the previous dS·K is done with kv_s and ds_s
    load_tile<D, T::kKeys>(kv_s, v_head + k0 * g.ld_kv, g.ld_kv, k_rows, g);
    __syncthreads();
    float dp[RI][CJ];
    score_tile<RI, CJ, H::kPitch, H::kPitch>(do_s, kv_s, g.d_end, dp);
    __syncthreads();  // V is consumed
    load_tile<D, T::kKeys>(kv_s, k_head + k0 * g.ld_kv, g.ld_kv, k_rows, g);
    __syncthreads();
    float s[RI][CJ];
    score_tile<RI, CJ, H::kPitch, H::kPitch>(q_s, kv_s, g.d_end, s);
#pragma unroll
    for (int i = 0; i < RI; ++i) {
      const int r = q0 + ty + kGrid * i;
#pragma unroll
      for (int j = 0; j < CJ; ++j) {
        const float p = ops::softmax_exp(visible(r, k0 + tx + kGrid * j, g.seq) ? scaled(s[i][j], g.scale) : -INFINITY,
                                         row_lse[i]);
        ds_s[(ty + kGrid * i) * T::kScorePitch + tx + kGrid * j] = ops::softmax_input_grad(p, dp[i][j], row_delta[i]);
      }
    }
    __syncthreads();  // dS is complete
    accumulate_product<D, RI, T::kKeys, T::kScorePitch>(ds_s, kv_s, dq);
  }

#pragma unroll
  for (int i = 0; i < RI; ++i) {
#pragma unroll
    for (int e = 0; e < H::kCols; ++e) dq[i][e] *= g.scale;
  }
  store_rows<D, RI>(grad_q + q_at, g.ld_q, q_rows, g, dq);
}

// ---- launchers -----------------------------------------------------------------------------------

LaunchResult after_launch(const char* kernel) {
  const cudaError_t e = cudaGetLastError();
  return {e, e == cudaSuccess ? nullptr : kernel};
}

const LaunchResult kTooLarge{cudaErrorInvalidConfiguration, "attention grid (too many heads and tiles for one launch)"};

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Runtime head_dim -> compile-time bucket; fn gets a tag whose value is the bucket.
template <typename Fn>
LaunchResult with_head_dim(int64_t head_dim, Fn&& fn) {
  if (head_dim <= 32) return fn(std::integral_constant<int, 32>{});
  if (head_dim <= 64) return fn(std::integral_constant<int, 64>{});
  if (head_dim <= 128) return fn(std::integral_constant<int, 128>{});
  return fn(std::integral_constant<int, 256>{});
}

// A launch of `heads` x ceil(seq / tile_rows) blocks, all in gridDim.x (gridDim.y stops at
// 65535, which batch·heads may pass).
struct Grid {
  Geometry g;
  unsigned blocks;
};

// False when the blocks would not fit in gridDim.x or a position near seq in int.
// `aligned`: every activation pointer of the call allows 4-element accesses.
bool make_grid(const AttentionLaunch& d, int64_t heads, int64_t tile_rows, bool aligned, Grid* grid) {
  if (d.seq > INT_MAX - 256) return false;
  const int64_t tiles = ceil_div(d.seq, tile_rows);
  if (tiles * heads > INT_MAX) return false;
  Geometry& g = grid->g;
  g.n_heads = d.n_heads;
  g.n_kv_heads = d.n_kv_heads;
  g.group = d.n_heads / d.n_kv_heads;
  g.ld_q = d.n_heads * d.head_dim;
  g.ld_kv = d.n_kv_heads * d.head_dim;
  g.heads = heads;
  g.seq = static_cast<int>(d.seq);
  g.tiles = static_cast<int>(tiles);
  g.head_dim = static_cast<int>(d.head_dim);
  g.d_end = static_cast<int>((d.head_dim + 3) / 4 * 4);
  // Row offsets are multiples of head_dim, so with head_dim % 4 == 0 every 4-column chunk
  // of a row is as aligned as the tensor's base.
  g.vec4 = d.head_dim % 4 == 0 && aligned;
  // As the CPU computes it: in double, rounded once.
  g.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d.head_dim)));
  grid->blocks = static_cast<unsigned>(tiles * heads);
  return true;
}

// Above 48 KB of dynamic shared memory a kernel must opt in, per kernel and per device.
// Setting the attribute on every launch keeps that right whichever device is current; it
// is a host-side write, not a synchronisation.
template <typename Kernel>
LaunchResult allow_shared_memory(Kernel* kernel, size_t bytes, const char* call) {
  const cudaError_t e =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  return {e, e == cudaSuccess ? nullptr : call};
}

int64_t delta_rows(const AttentionLaunch& d) { return d.batch * d.seq * d.n_heads; }

// delta for any activation type and head_dim (attention_delta_kernel), or for bf16 rows of
// 64 or 128 with aligned inputs the vector kernel above.
template <typename A>
LaunchResult launch_attention_delta(const AttentionLaunch& d, const A* out, const A* grad_out, float* delta,
                                    cudaStream_t stream) {
  const int64_t rows = delta_rows(d);
  if constexpr (std::is_same_v<A, uint16_t>) {
    const bool aligned =
        (reinterpret_cast<uintptr_t>(out) & 15u) == 0 && (reinterpret_cast<uintptr_t>(grad_out) & 15u) == 0;
    if (aligned && (d.head_dim == 64 || d.head_dim == 128)) {
      const int64_t blocks = ceil_div(rows * (d.head_dim / 8), kThreads);
      if (blocks > INT_MAX) return kTooLarge;
      if (d.head_dim == 64) {
        attention_delta_bf16_kernel<8><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(rows, d.n_heads, d.seq,
                                                                                               out, grad_out, delta);
      } else {
        attention_delta_bf16_kernel<16><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
            rows, d.n_heads, d.seq, out, grad_out, delta);
      }
      return after_launch("attention delta kernel");
    }
  }
  const int64_t blocks = ceil_div(rows, kThreads / 32);
  if (blocks > INT_MAX) return kTooLarge;
  attention_delta_kernel<A><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      rows, d.n_heads, d.seq, static_cast<int>(d.head_dim), out, grad_out, delta);
  return after_launch("attention delta kernel");
}

template <typename A>
bool all_aligned(std::initializer_list<const void*> pointers) {
  for (const void* p : pointers) {
    if (!model::aligned_for<A, 4>(p)) return false;
  }
  return true;
}

// The SIMT kernels: every activation type and head size up to kMaxAttentionHeadDim.
LaunchResult launch_attention_forward_simt(const AttentionLaunch& d, const void* q, const void* k, const void* v,
                                           void* out, float* lse, HpType act, cudaStream_t stream) {
  return model::with_act(act, [&](auto type) {
    using A = decltype(type);
    const bool aligned = all_aligned<A>({q, k, v, out});
    return with_head_dim(d.head_dim, [&](auto bucket) -> LaunchResult {
      constexpr int D = decltype(bucket)::value;
      using T = ForwardTiles<D>;
      Grid p{};
      if (!make_grid(d, d.batch * d.n_heads, T::kRows, aligned, &p)) return kTooLarge;
      const LaunchResult r = allow_shared_memory(attention_forward_kernel<D, A>, T::kBytes,
                                                 "cudaFuncSetAttribute (attention forward kernel)");
      if (!r.ok()) return r;
      attention_forward_kernel<D, A><<<p.blocks, kThreads, T::kBytes, stream>>>(
          p.g, static_cast<const A*>(q), static_cast<const A*>(k), static_cast<const A*>(v), static_cast<A*>(out), lse);
      return after_launch("attention forward kernel");
    });
  });
}

}  // namespace

LaunchResult launch_attention_forward(const AttentionLaunch& d, const void* q, const void* k, const void* v, void* out,
                                      float* lse, float* row_amax, HpType act, cudaStream_t stream) {
  if (tensor_core_attention_applies(d, act, {q, k, v, out})) {
    return launch_attention_forward_tc(d, q, k, v, out, lse, row_amax, stream);
  }
  const LaunchResult r = launch_attention_forward_simt(d, q, k, v, out, lse, act, stream);
  if (!r.ok() || row_amax == nullptr) return r;
  // The SIMT kernels (fp32, other head sizes) are the slow path; an amax pass beside them
  // costs little and keeps them as they are. Not the cast kernels' pass: out may be
  // misaligned here, which their vector loads do not allow.
  return launch_row_amax(out, d.batch * d.seq, d.n_heads * d.head_dim, row_amax, act, stream);
}

size_t attention_backward_scratch_bytes(const AttentionLaunch& d) {
  const size_t bytes = static_cast<size_t>(delta_rows(d)) * sizeof(float);
  return (bytes + 255) / 256 * 256;
}

LaunchResult launch_attention_backward(const AttentionLaunch& d, const void* q, const void* k, const void* v,
                                       const void* out, const float* lse, const void* grad_out, void* grad_q,
                                       void* grad_k, void* grad_v, void* scratch, HpType act, cudaStream_t stream) {
  float* const delta = static_cast<float*>(scratch);
  if (d.seq > INT_MAX) return kTooLarge;
  return model::with_act(act, [&](auto type) {
    using A = decltype(type);
    const A* const qa = static_cast<const A*>(q);
    const A* const ka = static_cast<const A*>(k);
    const A* const va = static_cast<const A*>(v);
    const A* const grad_out_a = static_cast<const A*>(grad_out);
    if (const LaunchResult r = launch_attention_delta<A>(d, static_cast<const A*>(out), grad_out_a, delta, stream);
        !r.ok()) {
      return r;
    }
    if (tensor_core_attention_applies(d, act, {q, k, v, out, grad_out, grad_q, grad_k, grad_v})) {
      return launch_attention_backward_tc(d, q, k, v, lse, delta, grad_out, grad_q, grad_k, grad_v, stream);
    }

    const bool aligned = all_aligned<A>({q, k, v, grad_out, grad_q, grad_k, grad_v});
    return with_head_dim(d.head_dim, [&](auto bucket) -> LaunchResult {
      constexpr int D = decltype(bucket)::value;
      using KvT = GradKvTiles<D>;
      using QT = GradQTiles<D>;
      Grid kv{}, qp{};
      if (!make_grid(d, d.batch * d.n_kv_heads, KvT::kKeys, aligned, &kv) ||
          !make_grid(d, d.batch * d.n_heads, QT::kRows, aligned, &qp)) {
        return kTooLarge;
      }
      LaunchResult r = allow_shared_memory(attention_grad_kv_kernel<D, A>, KvT::kBytes,
                                           "cudaFuncSetAttribute (attention grad_kv kernel)");
      if (!r.ok()) return r;
      attention_grad_kv_kernel<D, A><<<kv.blocks, kThreads, KvT::kBytes, stream>>>(
          kv.g, qa, ka, va, lse, delta, grad_out_a, static_cast<A*>(grad_k), static_cast<A*>(grad_v));
      if (r = after_launch("attention grad_kv kernel"); !r.ok()) return r;
      r = allow_shared_memory(attention_grad_q_kernel<D, A>, QT::kBytes,
                              "cudaFuncSetAttribute (attention grad_q kernel)");
      if (!r.ok()) return r;
      attention_grad_q_kernel<D, A><<<qp.blocks, kThreads, QT::kBytes, stream>>>(qp.g, qa, ka, va, lse, delta,
                                                                                 grad_out_a, static_cast<A*>(grad_q));
      return after_launch("attention grad_q kernel");
    });
  });
}

}  // namespace fp8::cuda
