// The cast kernels of the CUDA backend (cast_kernels.cu launches them), in a header of
// their own so that tests/kernels/cast_kernels_emulation_test.cc can run them on the CPU
// under tests/ops/emulation/ (their logic, bit for bit against the reference backend).
//
// Every per-element formula comes from fp8/arith.h (the functions the CPU backends run),
// so casts, scales, amaxes and dequantizations are bit-identical to the CPU. Formats and
// scale granularities are template parameters: the format constants then fold into the
// conversion code, which matters because these kernels sit close to the ALU/bandwidth
// balance point on Hopper (about 25 integer ops per element against 5-6 bytes of traffic).
//
// Two cast kernels:
//  * flat:  no transpose. Each thread owns 16 consecutive elements of the dense matrix
//           (16-byte fp8 store, 4 x 16-byte fp32 or 2 x 16-byte bf16 loads), so rows need
//           not be 16-byte aligned: only the last chunk of the whole matrix is partial.
//  * tiled: 64 x 64 tiles (one, or a group of two stacked, per block and iteration),
//           staged through shared memory as fp8 so that both `out` and the transpose
//           `out_t` are written with coalesced stores. Also used for columnwise amax, whose
//           reduction runs down the tile's columns.
// amax is accumulated on the magnitudes' bit patterns (amax_bits_update) and combined with
// atomicMax on the output words themselves: for non-negative floats integer order is
// numeric order and NaN sorts above Inf, so the final word is the amax with NaN propagated,
// and integer max is order-independent, so the result is bit-identical to the CPU's.
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/cast_kernels.h"
#include "fp8/arith.h"

namespace fp8::cuda::cast_device {
// Internal linkage: each including file (the launchers' .cu, the CPU emulation test) has
// its own copy, so the emulated host versions never meet the device build's at link time.
namespace {

constexpr int kThreads = 256;          // threads per block, every kernel here
constexpr int kChunk = 16;             // elements per thread in the flat kernels
constexpr int kTile = 64;              // the tiled kernel's tile is kTile x kTile elements
constexpr int kPitch = kTile / 4 + 1;  // 32-bit words per shared tile row; the +1 staggers banks
constexpr int kMaxGridY = 65535;
// Streaming kernels ask for 4 resident blocks per SM (at most 64 registers a thread): 1024
// threads with 32-64 bytes of loads each in flight cover HBM3 latency.
constexpr int kMinBlocks = 4;
constexpr unsigned kFullMask = 0xffffffffu;

using bf16_bits = uint16_t;  // bf16 travels as raw bits, as in arith.h

// ---- loads and stores ----------------------------------------------------------------------

template <typename T>
struct Hp;

template <>
struct Hp<float> {
  static constexpr int kVec = 4;  // elements per 16-byte load
  __device__ static float load(const float* p) { return __ldg(p); }
  __device__ static void load_vec(const float* p, float* v) {
    const float4 x = __ldg(reinterpret_cast<const float4*>(p));
    v[0] = x.x;
    v[1] = x.y;
    v[2] = x.z;
    v[3] = x.w;
  }
};

template <>
struct Hp<bf16_bits> {
  static constexpr int kVec = 8;
  __device__ static float load(const bf16_bits* p) { return bf16_to_float(__ldg(p)); }
  __device__ static void load_vec(const bf16_bits* p, float* v) {
    const uint4 x = __ldg(reinterpret_cast<const uint4*>(p));
    const uint32_t w[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      v[2 * i] = bf16_to_float(static_cast<uint16_t>(w[i] & 0xffffu));
      v[2 * i + 1] = bf16_to_float(static_cast<uint16_t>(w[i] >> 16));
    }
  }
};

// Loads the n <= kChunk elements at p and zero-fills the rest (zeros leave an amax
// unchanged). A full chunk starts at a multiple of 16 elements of a 16-byte aligned
// matrix, so its vector loads are aligned.
template <typename T>
__device__ __forceinline__ void load_chunk(const T* p, int n, float (&v)[kChunk]) {
  constexpr int kVec = Hp<T>::kVec;
  if (n == kChunk) {
#pragma unroll
    for (int j = 0; j < kChunk / kVec; ++j) Hp<T>::load_vec(p + j * kVec, v + j * kVec);
  } else {
#pragma unroll
    for (int i = 0; i < kChunk; ++i) v[i] = i < n ? Hp<T>::load(p + i) : 0.0f;
  }
}

__device__ __forceinline__ void store_fp8_chunk(uint8_t* p, int n, const uint32_t (&w)[4]) {
  if (n == kChunk) {
    *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
  } else {
    // Unrolled with guards: a runtime index would push w into local memory.
#pragma unroll
    for (int i = 0; i < kChunk; ++i) {
      if (i < n) p[i] = static_cast<uint8_t>(w[i / 4] >> (8 * (i % 4)));
    }
  }
}

// ---- positions and reductions ----------------------------------------------------------------

struct Pos {
  int64_t row;
  int64_t col;
};

// Row and column of flat element e; 32-bit division when it fits (one per 16 elements).
__device__ __forceinline__ Pos position(int64_t e, int64_t cols) {
  if (((e | cols) >> 32) == 0) {
    const uint32_t r = static_cast<uint32_t>(e) / static_cast<uint32_t>(cols);
    return {r, e - static_cast<int64_t>(r) * cols};
  }
  const int64_t r = e / cols;
  return {r, e - r * cols};
}

// Block-wide max of v, folded into *dst with one atomic per block (a single hot word
// would serialise one atomic per warp). Every thread of the block must call it.
__device__ __forceinline__ void block_max_atomic(unsigned* dst, uint32_t v) {
  __shared__ uint32_t warp_max[kThreads / 32];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  v = __reduce_max_sync(kFullMask, v);
  if (lane == 0) warp_max[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = __reduce_max_sync(kFullMask, lane < kThreads / 32 ? warp_max[lane] : 0u);
    if (lane == 0 && v != 0) atomicMax(dst, v);
  }
}

// Block-wide sums of two counters, added to dst[0] and dst[1] with one 64-bit atomic each
// per block. Every thread of the block must call it.
__device__ __forceinline__ void block_sum2_atomic(unsigned long long* dst, uint32_t a, uint32_t b) {
  __shared__ uint32_t warp_a[kThreads / 32];
  __shared__ uint32_t warp_b[kThreads / 32];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  a = __reduce_add_sync(kFullMask, a);
  b = __reduce_add_sync(kFullMask, b);
  if (lane == 0) {
    warp_a[warp] = a;
    warp_b[warp] = b;
  }
  __syncthreads();
  if (warp == 0) {
    a = __reduce_add_sync(kFullMask, lane < kThreads / 32 ? warp_a[lane] : 0u);
    b = __reduce_add_sync(kFullMask, lane < kThreads / 32 ? warp_b[lane] : 0u);
    if (lane == 0) {
      if (a != 0) atomicAdd(dst, static_cast<unsigned long long>(a));
      if (b != 0) atomicAdd(dst + 1, static_cast<unsigned long long>(b));
    }
  }
}

// Rowwise amax across a warp whose lanes hold consecutive chunks: lanes with the same
// row form one contiguous segment (rows never decrease along the lanes), reduced with a
// segmented shuffle so that each segment issues one atomic. Inactive lanes (past the end
// of the matrix) hold 0 and never write. Every lane of the warp must call it.
__device__ __forceinline__ void row_segment_max_atomic(unsigned* amax, bool active, int64_t row, uint32_t v) {
  const int lane = threadIdx.x & 31;
  // Truncating the key is safe: a warp spans at most 512 elements, so two of its rows
  // cannot differ by 2^32.
  const uint32_t key = active ? static_cast<uint32_t>(row) : 0xffffffffu;
#pragma unroll
  for (int offset = 1; offset < 32; offset <<= 1) {
    const uint32_t other_key = __shfl_down_sync(kFullMask, key, offset);
    const uint32_t other = __shfl_down_sync(kFullMask, v, offset);
    if (lane + offset < 32 && other_key == key) v = v > other ? v : other;
  }
  const uint32_t prev_key = __shfl_up_sync(kFullMask, key, 1);
  const bool head = lane == 0 || prev_key != key;
  if (active && head && v != 0) atomicMax(amax + row, v);
}

// ---- byte transpose --------------------------------------------------------------------------

// dst [cols, rows] = src [rows, cols]ᵀ, bytes (fp8 codes), in 64 x 64 byte tiles moved as
// 32-bit words: when rows and cols are multiples of 4 and both pointers 4-byte aligned
// (the launcher checks; otherwise a kernel of single bytes runs). A block of kThreads
// loads a tile row by row (16 threads a 64-byte row: 128 bytes a warp instruction), then
// each thread turns one 4 x 4 byte block around with __byte_perm and stores four words,
// one into each of four dst rows (16 threads a 64-byte dst row). Grid: x over column
// tiles, y over row tiles (looping past 65535). A FSDP rank transposes each gathered fp8
// weight once a step this way (the backward's grad_input GEMM reads it).
constexpr int kWordTile = 64;                 // bytes a side
constexpr int kWordTileWords = kWordTile / 4;  // words a tile row
static_assert(kThreads == kWordTileWords * kWordTileWords, "a thread per 4 x 4 byte block");

__global__ void __launch_bounds__(kThreads)
    transpose_words_kernel(const uint8_t* __restrict__ src, int64_t rows, int64_t cols, uint8_t* __restrict__ dst) {
  // One word of padding a row: the load phase's writes and the transpose phase's reads
  // meet at most two to a bank.
  __shared__ uint32_t tile[kWordTile][kWordTileWords + 1];
  const int t = threadIdx.x;
  const int load_row = t / kWordTileWords, load_word = t % kWordTileWords;
  // Transpose phase: source rows 4 bi .. 4 bi + 3, source word bj (dst rows 4 bj .. +3);
  // consecutive threads take consecutive bi, i.e. consecutive words of one dst row.
  const int bi = t % kWordTileWords, bj = t / kWordTileWords;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kWordTile;
  const int64_t col = c0 + 4 * load_word;
#pragma unroll 1
  for (int64_t r0 = static_cast<int64_t>(blockIdx.y) * kWordTile; r0 < rows;
       r0 += static_cast<int64_t>(gridDim.y) * kWordTile) {
#pragma unroll
    for (int k = 0; k < kWordTile / 16; ++k) {
      const int row = 16 * k + load_row;
      const int64_t r = r0 + row;
      uint32_t w = 0;
      if (r < rows && col < cols) w = *reinterpret_cast<const uint32_t*>(src + r * cols + col);
      tile[row][load_word] = w;
    }
    __syncthreads();
    const int64_t r = r0 + 4 * bi;      // dst column (a multiple of 4: rows % 4 == 0)
    const int64_t c = c0 + 4 * bj;      // dst row of byte 0
    if (r < rows && c < cols) {
      const uint32_t w0 = tile[4 * bi][bj], w1 = tile[4 * bi + 1][bj];
      const uint32_t w2 = tile[4 * bi + 2][bj], w3 = tile[4 * bi + 3][bj];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        // Dst row c + j: byte j of each source row's word, in source-row order (selector
        // 0x00(4+j)j picks byte j of the first word, then of the second).
        const uint32_t select = 0x0040u + 0x11u * static_cast<uint32_t>(j);
        const uint32_t rows01 = __byte_perm(w0, w1, select), rows23 = __byte_perm(w2, w3, select);
        *reinterpret_cast<uint32_t*>(dst + (c + j) * rows + r) = __byte_perm(rows01, rows23, 0x5410);
      }
    }
    __syncthreads();
  }
}

// ---- programmatic dependent launch (sm_90) ---------------------------------------------------

// A cast whose scales come from amaxes reduced by the launch just before it is launched
// with programmatic stream serialization (launch_cast): its blocks may start while that
// launch (small_amax_kernel, which allows it at its start) still runs, load their first
// input tiles, and wait here before reading the amaxes. Only the input is read before the
// wait; the launch before never writes it (it writes the amaxes alone), and whatever wrote
// the input finished before that launch began. Without such a launch the wait returns at
// once; the CPU emulation runs kernels in order, so it is nothing there.
__device__ __forceinline__ void wait_for_prerequisite_grid() {
#if !defined(FP8_CUDA_EMULATION) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the next launch on the stream, if it asked for programmatic serialization, start.
__device__ __forceinline__ void allow_dependent_launch() {
#if !defined(FP8_CUDA_EMULATION) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// ---- where a cast's scales come from --------------------------------------------------------------

// `scale` as given (always, for columnwise casts); or, with dynamic scaling fused into the
// cast (tensorwise and rowwise), scale_from_amax of `amax`, computed where each is needed
// and written once, with its inverse, to scale_out and inv_scale_out (each optional) by the
// thread that owns the tensor's or the row's first element: compute_scales_kernel's
// results, bit for bit, without its launch.
struct ScaleSource {
  const float* scale = nullptr;
  const float* amax = nullptr;
  bool pow2 = false;
  float* scale_out = nullptr;
  float* inv_scale_out = nullptr;

  template <Format F>
  __device__ float at(int64_t i) const {
    return amax != nullptr ? scale_from_amax(__ldg(amax + i), F, pow2) : __ldg(scale + i);
  }
  __device__ void publish(int64_t i, float s) const {
    if (amax == nullptr) return;
    if (scale_out != nullptr) scale_out[i] = s;
    if (inv_scale_out != nullptr) inv_scale_out[i] = inverse_scale(s);
  }
};

// The range counts (fp8.h's CastRangeCounts: what count_cast_range gives) of the elements a
// thread casts, on the same y = x · scale as its cast; summed per block at the kernel's end.
struct RangeTally {
  uint32_t saturated = 0;
  uint32_t underflow = 0;

  template <Format F>
  __device__ __forceinline__ void add(float x, float scale) {
    const float y = x * scale;
    saturated += fp8_saturates(y, F) ? 1u : 0u;
    underflow += fp8_underflows(x, y, F) ? 1u : 0u;
  }
};

// The columnwise half of a dual cast (the tiled kernel's kDual, a rowwise cast that also
// makes the columnwise one): out_t is scaled per input column with `scale` as given, and the
// column amaxes and that half's range counts go here. The kernel takes it always; only kDual
// reads it.
struct ColumnHalf {
  const float* scale = nullptr;
  unsigned* amax = nullptr;
  unsigned long long* counts = nullptr;
};

// ---- flat cast / amax ----------------------------------------------------------------------------

// One 16-element chunk per thread. kQuantize: write `out`; kAmax: reduce the amax at A
// (tensor or row; columnwise amax goes to the tiled kernel); kCount: add the cast's range
// counts to `counts`.
template <typename T, Format F, Axis A, bool kQuantize, bool kAmax, bool kCount = false>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    flat_cast_kernel(const T* __restrict__ in, int64_t total, int64_t cols, ScaleSource scale, bool saturate,
                     uint8_t* __restrict__ out, unsigned* __restrict__ amax, unsigned long long* __restrict__ counts) {
  static_assert(!(kAmax && A == Axis::kColumn), "columnwise amax runs in the tiled kernel");
  static_assert(kQuantize || !kCount, "range counts are of a cast");
  const int64_t e0 = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) * kChunk;
  const int n = e0 < total ? static_cast<int>(total - e0 < kChunk ? total - e0 : kChunk) : 0;

  Pos pos{0, 0};
  if (A != Axis::kTensor && n > 0) pos = position(e0, cols);

  // The scale of the chunk's first element, before the chunk is loaded: derived from an
  // amax, its double-precision arithmetic then runs while few registers are live.
  float first_scale = 0.0f;
  if constexpr (kQuantize) wait_for_prerequisite_grid();
  if (kQuantize && A != Axis::kColumn && n > 0) {
    const int64_t at = A == Axis::kTensor ? 0 : pos.row;
    first_scale = scale.at<F>(at);
    if (A == Axis::kTensor ? e0 == 0 : pos.col == 0) scale.publish(at, first_scale);
  }

  float v[kChunk];
  load_chunk(in + (n > 0 ? e0 : 0), n, v);

  uint32_t words[4] = {0u, 0u, 0u, 0u};
  uint32_t run = 0;  // amax bits of this thread's elements not yet flushed
  RangeTally tally;
  if (A == Axis::kTensor || pos.col + n <= cols) {
    // The chunk lies in one row: always the case when cols % 16 == 0.
    const float s = first_scale;
#pragma unroll
    for (int i = 0; i < kChunk; ++i) {
      if (i < n) {
        if constexpr (kQuantize) {
          const float si = A == Axis::kColumn ? __ldg(scale.scale + pos.col + i) : s;
          words[i / 4] |= static_cast<uint32_t>(quantize_value(v[i], si, F, saturate)) << (8 * (i % 4));
          if constexpr (kCount) tally.add<F>(v[i], si);
        }
        if constexpr (kAmax) run = amax_bits_update(run, v[i]);
      }
    }
  } else {
    // The chunk crosses the end of at least one row: walk the position.
    int64_t r = pos.row;
    int64_t c = pos.col;
    float s = first_scale;
#pragma unroll
    for (int i = 0; i < kChunk; ++i) {
      if (i < n) {
        if constexpr (kQuantize) {
          const float si = A == Axis::kColumn ? __ldg(scale.scale + c) : s;
          words[i / 4] |= static_cast<uint32_t>(quantize_value(v[i], si, F, saturate)) << (8 * (i % 4));
          if constexpr (kCount) tally.add<F>(v[i], si);
        }
        if constexpr (kAmax) run = amax_bits_update(run, v[i]);
        if (++c == cols && i + 1 < n) {
          // Row r ends inside this chunk. Its elements in earlier lanes (if any) meet it
          // in global memory; the chunk's last row is left for the segmented reduction.
          if constexpr (kAmax && A == Axis::kRow) {
            if (run != 0) atomicMax(amax + r, run);
            run = 0;
          }
          c = 0;
          ++r;
          // Given, not derived (launch_cast sees to it): deriving a scale here, with the
          // chunk in registers, would raise every rowwise flat cast's register count.
          if constexpr (kQuantize && A == Axis::kRow) s = __ldg(scale.scale + r);
        }
      }
    }
    pos.row = r;
  }

  if constexpr (kQuantize) {
    if (n > 0) store_fp8_chunk(out + e0, n, words);
  }
  if constexpr (kAmax && A == Axis::kTensor) block_max_atomic(amax, run);
  if constexpr (kAmax && A == Axis::kRow) row_segment_max_atomic(amax, n > 0, pos.row, run);
  if constexpr (kCount) block_sum2_atomic(counts, tally.saturated, tally.underflow);
}

// ---- the amax of a small tensor ------------------------------------------------------------

// Up to this many elements, a tensor's amax is one block's work: no atomics, so no zeroing
// launch before it. What a cast fed by row amaxes reduces (QuantizeArgs::row_amax: one
// value a row) is this small.
constexpr int64_t kSmallAmaxElements = int64_t{1} << 16;

// out[0] = the amax of the n values at x, by one block of kThreads threads, written (not
// folded in): grid-stride over the elements, then a warp and a block max of the bits.
template <typename T>
__global__ void __launch_bounds__(kThreads) small_amax_kernel(const T* __restrict__ x, int64_t n, unsigned* out) {
  // A cast that scales from this amax may start now (see wait_for_prerequisite_grid).
  allow_dependent_launch();
  __shared__ uint32_t warp_max[kThreads / 32];
  uint32_t m = 0;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) m = amax_bits_update(m, Hp<T>::load(x + i));
  m = __reduce_max_sync(kFullMask, m);
  if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = m;
  __syncthreads();
  if (threadIdx.x < 32) {
    m = __reduce_max_sync(kFullMask, threadIdx.x < kThreads / 32 ? warp_max[threadIdx.x] : 0u);
    if (threadIdx.x == 0) *out = m;
  }
}

// ---- tiled cast (transpose) / columnwise amax ------------------------------------------------

// Column within the tile of a thread's element e. A thread owns 16 elements of one tile
// row, taken as 16/V vectors of V elements interleaved with the 3 other threads of that
// row, so that each vector load instruction of a warp reads 64 contiguous bytes per row.
template <int V>
__device__ __forceinline__ int tile_col(int e, int quarter) {
  return (e / V) * (4 * V) + quarter * V + (e % V);
}

// 4x4 byte transpose: word i of `w` holds bytes of tile row i; word j of the result holds
// byte j of each row, i.e. four consecutive rows of column j.
__device__ __forceinline__ void transpose4x4(const uint32_t (&w)[4], uint32_t (&t)[4]) {
  const uint32_t lo01 = __byte_perm(w[0], w[1], 0x5140);  // r0.b0 r1.b0 r0.b1 r1.b1
  const uint32_t hi01 = __byte_perm(w[0], w[1], 0x7362);  // r0.b2 r1.b2 r0.b3 r1.b3
  const uint32_t lo23 = __byte_perm(w[2], w[3], 0x5140);
  const uint32_t hi23 = __byte_perm(w[2], w[3], 0x7362);
  t[0] = __byte_perm(lo01, lo23, 0x5410);
  t[1] = __byte_perm(lo01, lo23, 0x7632);
  t[2] = __byte_perm(hi01, hi23, 0x5410);
  t[3] = __byte_perm(hi01, hi23, 0x7632);
}

// A thread's 16 elements of one tile row as loaded: the input's own bits (16 words of fp32,
// 8 words of bf16 pairs), widened to float only as each element is used, so that a bf16 row
// holds half the registers of an fp32 one. Vector j of the row (elements j*V .. j*V+V-1)
// is words 4j .. 4j+3 either way.
template <typename T>
struct RawRow {
  static constexpr int kWords = kChunk * static_cast<int>(sizeof(T)) / 4;
  uint32_t w[kWords];

  __device__ __forceinline__ float at(int e) const {
    if constexpr (std::is_same_v<T, float>) {
      return bits_float(w[e]);
    } else {
      return bits_float(e % 2 == 0 ? w[e / 2] << 16 : w[e / 2] & 0xffff0000u);
    }
  }
  // Element e from its own bits (the word starts at 0 for bf16's first half).
  __device__ __forceinline__ void set(int e, uint32_t bits) {
    if constexpr (std::is_same_v<T, float>) {
      w[e] = bits;
    } else {
      w[e / 2] = e % 2 == 0 ? bits : w[e / 2] | bits << 16;
    }
  }
};

__device__ __forceinline__ uint32_t raw_bits(const float* p) { return float_bits(__ldg(p)); }
__device__ __forceinline__ uint32_t raw_bits(const bf16_bits* p) { return __ldg(p); }

// Row `row` of the input, this thread's quarter of the tile starting at column c0; elements
// past the matrix (a partial tile, or row_ok false) read as 0, which leaves amaxes as they are.
template <typename T>
__device__ __forceinline__ void load_tile_row(const T* __restrict__ in, int64_t row, bool row_ok, int64_t c0,
                                              int64_t cols, int quarter, bool vec_in, RawRow<T>& r) {
  constexpr int V = Hp<T>::kVec;
  const T* src = in + (row_ok ? row * cols : 0);
#pragma unroll
  for (int j = 0; j < kChunk / V; ++j) {
    const int64_t col = c0 + tile_col<V>(j * V, quarter);
    if (row_ok && vec_in && col < cols) {
      const uint4 x = __ldg(reinterpret_cast<const uint4*>(src + col));
      r.w[4 * j] = x.x;
      r.w[4 * j + 1] = x.y;
      r.w[4 * j + 2] = x.z;
      r.w[4 * j + 3] = x.w;
    } else {
#pragma unroll
      for (int p = 0; p < V; ++p) r.set(j * V + p, row_ok && col + p < cols ? raw_bits(src + col + p) : 0u);
    }
  }
}

// Resident blocks an SM asked of the tiled kernel. A block holds its rows' elements in
// flight while it loads, then none while it quantizes, transposes and stores, so the
// memory pipe stays full only with enough bytes in flight per SM: at 4 blocks (64
// registers) and one row tile a block the fp32 cast+transpose ran near copy bandwidth but
// the bf16 one, with half the bytes a thread in flight, well below it, at about the same
// elements per second either way (bench/RESULTS.md). Two remedies for bf16, chosen at
// launch (tiled_row_tiles): more resident blocks (one row tile: tensorwise casts fit 40
// registers, 6 blocks, rowwise ones 48, 5, without spilling per ptxas -v, sm_90), or two
// row tiles a block, which puts as many bytes a thread in flight as fp32's one tile.
// Columnwise bf16 casts, fp32, and casts that count their range (measured steps only:
// their tallies would spill at 40 or 48 registers; at two row tiles and 64, 8-16 bytes
// still spill) keep 4.
template <typename T, Axis A, int kRowTiles, bool kCount>
constexpr int tiled_min_blocks() {
  if constexpr (std::is_same_v<T, bf16_bits> && kRowTiles == 1 && !kCount) {
    if constexpr (A == Axis::kTensor) return 6;
    if constexpr (A == Axis::kRow) return 5;
  }
  return kMinBlocks;
}

// Grid: x over column tiles, y over groups of kRowTiles row tiles (looping when there are
// more than 65535 groups). 256 threads: in the load phase thread t owns row t/4 of each
// tile of the group, quarter t%4; in the transpose phase it owns a 4x4 block of each tile.
// kQuantize, kAmax and kCount as in flat_cast_kernel (amax at any axis here).
//
// kDual (A = kRow): the rowwise cast writes `out`, and the columnwise cast of the same
// elements, with `column`'s scales, writes `out_t`: each element is quantized twice, into two
// shared tiles. With kAmax it reduces the row amaxes into `amax` and the column amaxes into
// column.amax in one read; with kCount each half counts its own range.
template <typename T, Format F, Axis A, bool kQuantize, bool kAmax, int kRowTiles = 1, bool kCount = false,
          bool kDual = false>
__global__ void __launch_bounds__(kThreads, tiled_min_blocks<T, A, kRowTiles, kCount>())
    tiled_cast_kernel(const T* __restrict__ in, int64_t rows, int64_t cols, ScaleSource scale, bool saturate,
                      uint8_t* __restrict__ out, uint8_t* __restrict__ out_t, unsigned* __restrict__ amax,
                      unsigned long long* __restrict__ counts, ColumnHalf column = {}) {
  static_assert(kQuantize || !kCount, "range counts are of a cast");
  static_assert(!kDual || A == Axis::kRow, "a dual cast is a rowwise cast with its columnwise twin");
  constexpr int V = Hp<T>::kVec;
  constexpr int kGroupRows = kTile * kRowTiles;
  constexpr bool kColumnAmax = kAmax && (A == Axis::kColumn || kDual);
  __shared__ uint32_t tile[kRowTiles * kTile * kPitch];
  // The dual cast's columnwise codes, which out_t takes (otherwise out_t transposes `tile`).
  __shared__ uint32_t tile_t[kDual ? kRowTiles * kTile * kPitch : 1];
  __shared__ uint32_t col_max[kTile];

  const int t = threadIdx.x;
  const int lane = t & 31;
  const int warp = t >> 5;
  const int tr = t >> 2;       // load phase: tile row
  const int quarter = t & 3;   // load phase: which interleaved quarter of the row
  // Transpose phase: a 4x4 block at (4 * r4, 4 * c4). Lanes 0-7 take consecutive r4 so
  // that a warp's stores cover 32 contiguous bytes of four out_t rows, and the shared
  // reads (rows 4 * r4 + i, word c4, pitch 17) hit 32 distinct banks.
  const int r4 = (lane & 7) + 8 * (warp & 1);
  const int c4 = (lane >> 3) + 4 * (warp >> 1);

  // Vector access is possible when every row starts 16-byte aligned (out: 16 bytes;
  // out_t: 4-byte stores of four consecutive rows).
  const bool vec_in = cols % V == 0;
  const bool vec_out = cols % 16 == 0;
  const bool vec_out_t = rows % 4 == 0;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int64_t groups = (rows + kGroupRows - 1) / kGroupRows;
  uint32_t tensor_max = 0;
  RangeTally tally;
  RangeTally tally_t;  // the columnwise half's, kDual only

#pragma unroll 1
  for (int64_t g = blockIdx.y; g < groups; g += gridDim.y) {
    const int64_t r0 = g * kGroupRows;

    // Every load of the group is issued before any of them is used.
    RawRow<T> raw[kRowTiles];
#pragma unroll
    for (int k = 0; k < kRowTiles; ++k) {
      const int64_t row = r0 + k * kTile + tr;
      load_tile_row(in, row, row < rows, c0, cols, quarter, vec_in, raw[k]);
    }

    // The first group's loads are in flight while an early start waits for the amaxes.
    if constexpr (kQuantize) wait_for_prerequisite_grid();
    if constexpr (kQuantize) {
#pragma unroll
      for (int k = 0; k < kRowTiles; ++k) {
        const int64_t row = r0 + k * kTile + tr;
        float s = 0.0f;
        if (A == Axis::kTensor) {
          s = scale.at<F>(0);
          if (g == 0 && k == 0 && blockIdx.x == 0 && t == 0) scale.publish(0, s);
        }
        if (A == Axis::kRow && row < rows) {
          s = scale.at<F>(row);
          if (blockIdx.x == 0 && quarter == 0) scale.publish(row, s);
        }
#pragma unroll
        for (int w = 0; w < 4; ++w) {
          uint32_t word = 0;
          uint32_t word_t = 0;
#pragma unroll
          for (int b = 0; b < 4; ++b) {
            const int e = 4 * w + b;
            float se = s;
            if (A == Axis::kColumn) {
              const int64_t col = c0 + tile_col<V>(e, quarter);
              se = col < cols ? __ldg(scale.scale + col) : 0.0f;  // columnwise: scales as given
            }
            const float x = raw[k].at(e);
            word |= static_cast<uint32_t>(quantize_value(x, se, F, saturate)) << (8 * b);
            if constexpr (kCount) tally.add<F>(x, se);
            if constexpr (kDual) {
              const int64_t col = c0 + tile_col<V>(e, quarter);
              const float sc = col < cols ? __ldg(column.scale + col) : 0.0f;
              word_t |= static_cast<uint32_t>(quantize_value(x, sc, F, saturate)) << (8 * b);
              // Rows past the matrix read as 0, which neither half counts.
              if constexpr (kCount) tally_t.add<F>(x, sc);
            }
          }
          // Four consecutive elements of a vector are four consecutive tile columns.
          const int at = (k * kTile + tr) * kPitch + tile_col<V>(4 * w, quarter) / 4;
          tile[at] = word;
          if constexpr (kDual) tile_t[at] = word_t;
        }
      }
    }

    if constexpr (kAmax) {
      if constexpr (A == Axis::kTensor) {
#pragma unroll
        for (int k = 0; k < kRowTiles; ++k) {
#pragma unroll
          for (int e = 0; e < kChunk; ++e) tensor_max = amax_bits_update(tensor_max, raw[k].at(e));
        }
      }
      if constexpr (A == Axis::kRow) {
#pragma unroll
        for (int k = 0; k < kRowTiles; ++k) {
          const int64_t row = r0 + k * kTile + tr;
          uint32_t m = 0;
#pragma unroll
          for (int e = 0; e < kChunk; ++e) m = amax_bits_update(m, raw[k].at(e));
          // The four threads of a tile row are lanes 4k .. 4k+3.
          m = max(m, __shfl_xor_sync(kFullMask, m, 1));
          m = max(m, __shfl_xor_sync(kFullMask, m, 2));
          if (quarter == 0 && row < rows && m != 0) atomicMax(amax + row, m);
        }
      }
      if constexpr (kColumnAmax) {
        if (t < kTile) col_max[t] = 0;
        __syncthreads();
        // Reduce over the group's tiles in registers, then over the warp's 8 tile rows
        // (lane bits 2-4), then across warps in shared memory.
#pragma unroll
        for (int e = 0; e < kChunk; ++e) {
          uint32_t m = 0;
#pragma unroll
          for (int k = 0; k < kRowTiles; ++k) m = max(m, abs_bits(raw[k].at(e)));
          m = max(m, __shfl_xor_sync(kFullMask, m, 4));
          m = max(m, __shfl_xor_sync(kFullMask, m, 8));
          m = max(m, __shfl_xor_sync(kFullMask, m, 16));
          if (lane < 4 && m != 0) atomicMax(&col_max[tile_col<V>(e, quarter)], m);
        }
      }
    }

    __syncthreads();

    if constexpr (kColumnAmax) {
      unsigned* col_amax = kDual ? column.amax : amax;
      if (t < kTile && c0 + t < cols && col_max[t] != 0) atomicMax(col_amax + c0 + t, col_max[t]);
    }

    if constexpr (kQuantize) {
#pragma unroll
      for (int k = 0; k < kRowTiles; ++k) {
        const int64_t tile_r0 = r0 + k * kTile;
        const uint32_t* sub = tile + k * kTile * kPitch;
        const uint32_t* sub_t = (kDual ? tile_t : tile) + k * kTile * kPitch;
        const int64_t row = tile_r0 + tr;
        if (out != nullptr && row < rows) {
          // 16 consecutive bytes of tile row tr: columns 16 * quarter ...
          uint32_t w[4];
#pragma unroll
          for (int i = 0; i < 4; ++i) w[i] = sub[tr * kPitch + 4 * quarter + i];
          const int64_t col = c0 + 16 * quarter;
          uint8_t* dst = out + row * cols + col;
          if (vec_out) {
            if (col < cols) *reinterpret_cast<uint4*>(dst) = make_uint4(w[0], w[1], w[2], w[3]);
          } else {
#pragma unroll
            for (int i = 0; i < 16; ++i) {
              if (col + i < cols) dst[i] = static_cast<uint8_t>(w[i / 4] >> (8 * (i % 4)));
            }
          }
        }
        if (out_t != nullptr) {
          uint32_t w[4];
          uint32_t tw[4];
#pragma unroll
          for (int i = 0; i < 4; ++i) w[i] = sub_t[(4 * r4 + i) * kPitch + c4];
          transpose4x4(w, tw);
          const int64_t rr = tile_r0 + 4 * r4;  // first of the four rows: a column of out_t
          const int64_t cc0 = c0 + 4 * c4;      // first of the four columns: a row of out_t
          if (rr < rows) {
            uint8_t* dst = out_t + cc0 * rows + rr;
#pragma unroll
            for (int j = 0; j < 4; ++j, dst += rows) {
              if (cc0 + j < cols) {
                if (vec_out_t) {
                  *reinterpret_cast<uint32_t*>(dst) = tw[j];
                } else {
#pragma unroll
                  for (int i = 0; i < 4; ++i) {
                    if (rr + i < rows) dst[i] = static_cast<uint8_t>(tw[j] >> (8 * i));
                  }
                }
              }
            }
          }
        }
      }
    }

    __syncthreads();  // the tile and col_max are rewritten by the next iteration
  }

  if constexpr (kAmax && A == Axis::kTensor) block_max_atomic(amax, tensor_max);
  // A dual cast may count either half alone (a null destination, the same for the block).
  if constexpr (kCount) {
    if (counts != nullptr) block_sum2_atomic(counts, tally.saturated, tally.underflow);
  }
  if constexpr (kCount && kDual) {
    if (column.counts != nullptr) {
      __syncthreads();  // block_sum2_atomic's shared partials are reused
      block_sum2_atomic(column.counts, tally_t.saturated, tally_t.underflow);
    }
  }
}

// ---- block granularities (fp8.h's kBlock1x128 and kBlock128x128) --------------------------------

// A block of kThreads threads owns one 128 x 128 region of the matrix (a 128-column stripe of
// a 128-row band; grid x over the stripes, y over the bands, looping past 65535): warp w takes
// rows w, w + 8, ... of the band, lane l columns 4l .. 4l + 3 of the stripe. Every tile or
// block whose amax a scale needs then lies within one block of threads, so a quantize is one
// kernel and one read of the input: the amaxes (a warp reduction for a 1x128 tile, a block
// reduction for a 128x128 block), the scales (scale_from_amax, as compute_scales), the
// published amaxes, scales and inverses, the codes and the range counts. The same kernel casts
// with given scales, counts a range or reduces amaxes alone (BlockCastArgs' null outputs).
// Elements past the matrix load as 0, which leaves amaxes as they are and is neither cast
// nor counted.
constexpr int kScaleTile = 128;                           // fp8.h's kScaleBlock
constexpr int kBlockWarps = kThreads / 32;                // 8
constexpr int kBlockRowsPerWarp = kScaleTile / kBlockWarps;  // 16
constexpr int kBlockLaneCols = kScaleTile / 32;           // 4
static_assert(kBlockLaneCols * 32 == kScaleTile && kBlockRowsPerWarp * kBlockWarps == kScaleTile,
              "a block of threads covers one 128 x 128 region");

// fp8.h's block128x128_ld and scale_index at the block granularities, restated here
// because this header stays free of fp8.h (and absl); the emulation test compares them.
__host__ __device__ __forceinline__ int64_t block_scale_ld(int64_t cols) {
  return ((cols + kScaleTile - 1) / kScaleTile + 3) / 4 * 4;
}
template <bool kSquare>
__host__ __device__ __forceinline__ int64_t block_scale_index(int64_t rows, int64_t cols, int64_t r, int64_t c) {
  return kSquare ? (r / kScaleTile) * block_scale_ld(cols) + c / kScaleTile : (c / kScaleTile) * rows + r;
}

struct BlockCastArgs {
  const float* scale = nullptr;  // given scales; null: each tile's or block's from its amax
  bool pow2 = false;
  bool saturate = true;
  uint8_t* out = nullptr;                // codes, or null
  float* amax = nullptr;                 // the amaxes, or null
  float* scale_out = nullptr;            // derived scales only: the scales, or null
  float* inv_scale_out = nullptr;        // derived scales only: their inverses, or null
  unsigned long long* counts = nullptr;  // range counts (zeroed by the launcher), or null
};

// The amax, scale and inverse of one scale entry, written by the one thread that owns it.
__device__ __forceinline__ void publish_block(const BlockCastArgs& a, int64_t i, uint32_t amax_bits, float s) {
  if (a.amax != nullptr) a.amax[i] = bits_float(amax_bits);
  if (a.scale == nullptr) {
    if (a.scale_out != nullptr) a.scale_out[i] = s;
    if (a.inv_scale_out != nullptr) a.inv_scale_out[i] = inverse_scale(s);
  }
}

template <typename T, Format F, bool kSquare>
__global__ void __launch_bounds__(kThreads)
    block_cast_kernel(const T* __restrict__ in, int64_t rows, int64_t cols, BlockCastArgs a) {
  __shared__ uint32_t warp_max[kBlockWarps];
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int warp = static_cast<int>(threadIdx.x >> 5);
  const int64_t stripe = blockIdx.x;
  const int64_t stripes = (cols + kScaleTile - 1) / kScaleTile;
  const int64_t bands = (rows + kScaleTile - 1) / kScaleTile;
  const int64_t c0 = stripe * kScaleTile + kBlockLaneCols * lane;
  const bool cast = a.out != nullptr || a.counts != nullptr;
  // Whole words of codes: four consecutive columns of a row start 4-byte aligned.
  const bool word_out = cols % 4 == 0;
  RangeTally tally;

#pragma unroll 1
  for (int64_t band = blockIdx.y; band < bands; band += gridDim.y) {
    const int64_t r0 = band * kScaleTile;
    float v[kBlockRowsPerWarp][kBlockLaneCols];
    uint32_t m[kBlockRowsPerWarp];
#pragma unroll
    for (int i = 0; i < kBlockRowsPerWarp; ++i) {
      const int64_t row = r0 + warp + kBlockWarps * i;
      m[i] = 0;
#pragma unroll
      for (int j = 0; j < kBlockLaneCols; ++j) {
        const bool inside = row < rows && c0 + j < cols;
        v[i][j] = inside ? Hp<T>::load(in + row * cols + c0 + j) : 0.0f;
        m[i] = amax_bits_update(m[i], v[i][j]);
      }
    }

    // The amaxes: per row of the band (1x128) or one for the band's block (128x128).
    uint32_t block_max = 0;
    if constexpr (kSquare) {
#pragma unroll
      for (int i = 0; i < kBlockRowsPerWarp; ++i) block_max = max(block_max, m[i]);
      block_max = __reduce_max_sync(kFullMask, block_max);
      if (lane == 0) warp_max[warp] = block_max;
      __syncthreads();
      block_max = 0;
#pragma unroll
      for (int w = 0; w < kBlockWarps; ++w) block_max = max(block_max, warp_max[w]);
    } else {
#pragma unroll
      for (int i = 0; i < kBlockRowsPerWarp; ++i) m[i] = __reduce_max_sync(kFullMask, m[i]);
    }

    // The scales, published by one thread each; the padding entries of a 128x128 vector
    // (fp8.h) hold an all-zero block's, written by the band's first stripe.
    float s_block = 0.0f;
    if constexpr (kSquare) {
      const int64_t at = band * block_scale_ld(cols) + stripe;
      s_block = a.scale != nullptr ? __ldg(a.scale + at) : scale_from_amax(bits_float(block_max), F, a.pow2);
      if (threadIdx.x == 0) publish_block(a, at, block_max, s_block);
      const int64_t padding = block_scale_ld(cols) - stripes;
      if (stripe == 0 && threadIdx.x < padding) {
        publish_block(a, band * block_scale_ld(cols) + stripes + threadIdx.x, 0u, scale_from_amax(0.0f, F, a.pow2));
      }
    }
#pragma unroll
    for (int i = 0; i < kBlockRowsPerWarp; ++i) {
      const int64_t row = r0 + warp + kBlockWarps * i;
      if (row >= rows) continue;  // uniform across the warp
      float s = s_block;
      if constexpr (!kSquare) {
        const int64_t at = stripe * rows + row;
        s = a.scale != nullptr ? __ldg(a.scale + at) : scale_from_amax(bits_float(m[i]), F, a.pow2);
        if (lane == 0) publish_block(a, at, m[i], s);
      }
      if (!cast) continue;
      uint32_t word = 0;
#pragma unroll
      for (int j = 0; j < kBlockLaneCols; ++j) {
        if (c0 + j < cols) {
          word |= static_cast<uint32_t>(quantize_value(v[i][j], s, F, a.saturate)) << (8 * j);
          if (a.counts != nullptr) tally.add<F>(v[i][j], s);
        }
      }
      if (a.out != nullptr && c0 < cols) {
        uint8_t* dst = a.out + row * cols + c0;
        if (word_out && c0 + kBlockLaneCols <= cols) {
          *reinterpret_cast<uint32_t*>(dst) = word;
        } else {
#pragma unroll
          for (int j = 0; j < kBlockLaneCols; ++j) {
            if (c0 + j < cols) dst[j] = static_cast<uint8_t>(word >> (8 * j));
          }
        }
      }
    }
    if constexpr (kSquare) __syncthreads();  // warp_max is rewritten by the next band
  }
  if (a.counts != nullptr) block_sum2_atomic(a.counts, tally.saturated, tally.underflow);
}

// out = q / scale at a block granularity, one element a thread, grid-stride: dequantizing
// is off the training step's path, so plainness wins over the flat kernels' vectors.
template <typename OutT, Format F, bool kSquare>
__global__ void __launch_bounds__(kThreads)
    block_dequantize_kernel(const uint8_t* __restrict__ in, int64_t rows, int64_t cols,
                            const float* __restrict__ scale, OutT* __restrict__ out) {
  const int64_t total = rows * cols;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
#pragma unroll 1
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; e < total; e += stride) {
    const Pos p = position(e, cols);
    const float y = dequantize_value(in[e], F, __ldg(scale + block_scale_index<kSquare>(rows, cols, p.row, p.col)));
    if constexpr (std::is_same_v<OutT, float>) {
      out[e] = y;
    } else {
      out[e] = float_to_bf16(y);
    }
  }
}

}  // namespace
}  // namespace fp8::cuda::cast_device
