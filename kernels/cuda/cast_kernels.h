// Host entry points for the CUDA backend's elementwise and reduction kernels.
//
// The kernels live in cast_kernels.cu; this header is plain C++ so that the backend's .cc
// files, compiled by the host compiler, can queue them without nvcc. It deliberately does
// not include fp8.h (and through it absl) so that nvcc never parses absl headers.
//
// Every launcher only enqueues work on `stream` (no host synchronisation) and assumes its
// arguments were validated by the caller (detail::check_*). Each returns the first failed
// CUDA call, named, or {cudaSuccess, nullptr}.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "fp8/arith.h"

namespace fp8::cuda {

// The kernels' view of fp8::Granularity: which scale / amax entry covers an element.
enum class Axis : uint8_t { kTensor, kRow, kColumn };

// The high-precision element types (fp8::DType::kFloat32 / kBFloat16).
enum class HpType : uint8_t { kFloat32, kBFloat16 };

struct LaunchResult {
  cudaError_t error = cudaSuccess;
  const char* call = nullptr;  // the CUDA call (or kernel) that failed
  bool ok() const { return error == cudaSuccess; }
};

// out[0 .. scale_count) = max |x| over the tensor / each row / each column, NaN-propagating
// (integer max of the magnitudes' bit patterns). A small tensor's amax (up to
// kSmallAmaxElements, e.g. a cast's row amaxes) is written by one block; otherwise `out` is
// zeroed first and folded into, so an empty matrix gives 0 either way.
LaunchResult launch_amax(const void* x, HpType type, int64_t rows, int64_t cols, Axis axis, float* out,
                         cudaStream_t stream);

// scale[i] = scale_from_amax(amax[i], format, pow2); inv_scale (optional, null for none)
// [i] = inverse_scale(scale[i]).
LaunchResult launch_compute_scales(const float* amax, int64_t n, Format format, bool pow2, float* scale,
                                   float* inv_scale, cudaStream_t stream);

struct CastLaunch {
  const void* input = nullptr;
  HpType type = HpType::kFloat32;
  int64_t rows = 0;
  int64_t cols = 0;
  Format format = Format::kE4M3;
  Axis axis = Axis::kTensor;
  const float* scale = nullptr;
  bool saturate = true;
  uint8_t* out = nullptr;    // [rows, cols] or null
  uint8_t* out_t = nullptr;  // [cols, rows] or null
  float* amax = nullptr;     // amax at `axis`, or null
  // Dynamic scaling in the same pass (tensorwise and rowwise only): when scale_amax is set,
  // `scale` is ignored and each tensor's or row's scale is scale_from_amax(scale_amax[i],
  // format, pow2_scale), also written to scale_out and its inverse_scale to inv_scale_out
  // (each optional), as launch_compute_scales would, without a launch of its own (except a
  // rowwise cast without out_t whose rows are not a multiple of 16 long, which still takes
  // that launch first; it then needs scale_out).
  const float* scale_amax = nullptr;
  bool pow2_scale = false;
  float* scale_out = nullptr;
  float* inv_scale_out = nullptr;
  // Optional: counts[0] / counts[1] = the cast's saturated / underflowed values, as
  // launch_range_count gives them, taken in the same pass (zeroed first).
  uint64_t* range_counts = nullptr;
  // A dual cast (axis kRow, out_t and amax null; set out_t here to ask for one): in the
  // same pass, the columnwise cast of the same input, scaled per input column with `scale`
  // as given, to out_t [cols, rows], counting its range (optional, zeroed first) apart.
  struct Columnwise {
    uint8_t* out_t = nullptr;
    const float* scale = nullptr;
    uint64_t* range_counts = nullptr;
  } columnwise;
};

// One fused pass: quantize, write out and/or out_t, reduce the amax and count the range.
LaunchResult launch_cast(const CastLaunch& args, cudaStream_t stream);

// row_amax[rows] and col_amax[cols] of x in one read (both zeroed first): the amaxes of a
// dual cast (CastLaunch::columnwise).
LaunchResult launch_row_and_column_amax(const void* x, HpType type, int64_t rows, int64_t cols, float* row_amax,
                                        float* col_amax, cudaStream_t stream);

// counts[0] = values whose x·scale saturates, counts[1] = nonzero values whose x·scale
// underflows to zero (fp8::CastRangeArgs; the predicates are arith.h's fp8_saturates /
// fp8_underflows). Zeroes the two counters first, then one read of the input: a
// grid-stride reduction with one 64-bit atomic per counter per block.
LaunchResult launch_range_count(const void* input, HpType type, int64_t rows, int64_t cols, Format format, Axis axis,
                                const float* scale, uint64_t* counts, cudaStream_t stream);

// out = fp8_to_float(q) / scale, as fp32 or bf16.
LaunchResult launch_dequantize(const uint8_t* input, Format format, int64_t rows, int64_t cols, Axis axis,
                               const float* scale, HpType out_type, void* out, cudaStream_t stream);

// Block granularities (fp8.h's kBlock1x128, or kBlock128x128 with square set): one fused
// pass over the input per call, each 1x128 tile or 128x128 block reduced, scaled and cast
// by one block of threads. Scales and amaxes are laid out as fp8.h's scale_index (the
// 128x128 vector's padding entries included: an all-zero block's amax and scale).
struct BlockCastLaunch {
  const void* input = nullptr;
  HpType type = HpType::kFloat32;
  int64_t rows = 0;
  int64_t cols = 0;
  Format format = Format::kE4M3;
  bool square = false;           // kBlock128x128, else kBlock1x128
  const float* scale = nullptr;  // given scales; null: scale_from_amax of each amax (pow2_scale)
  bool pow2_scale = false;
  bool saturate = true;
  uint8_t* out = nullptr;            // [rows, cols] codes, or null (amaxes or counts alone)
  float* amax = nullptr;             // amaxes, or null
  float* scale_out = nullptr;        // with derived scales: the scales, or null
  float* inv_scale_out = nullptr;    // with derived scales: inverse_scale of each, or null
  uint64_t* range_counts = nullptr;  // as CastLaunch::range_counts (zeroed first), or null
};
LaunchResult launch_block_cast(const BlockCastLaunch& args, cudaStream_t stream);

// out = fp8_to_float(q) / scale at a block granularity (square: kBlock128x128).
LaunchResult launch_block_dequantize(const uint8_t* input, Format format, int64_t rows, int64_t cols, bool square,
                                     const float* scale, HpType out_type, void* out, cudaStream_t stream);

// fp32 <-> bf16 of n elements (in_type != out_type). Pointers of any alignment; 16-byte
// aligned ones take the vectorised path.
LaunchResult launch_convert(const void* in, HpType in_type, void* out, HpType out_type, int64_t n,
                            cudaStream_t stream);

// dst [cols, rows] = src [rows, cols]ᵀ of one-byte elements (fp8 codes), through a
// shared-memory tile so that both the reads and the writes are coalesced.
LaunchResult launch_transpose_bytes(const uint8_t* src, int64_t rows, int64_t cols, uint8_t* dst,
                                    cudaStream_t stream);

// out[i] = *scalar for i < n: turns a tensorwise factor into a per-row vector.
LaunchResult launch_broadcast(const float* scalar, float* out, int64_t n, cudaStream_t stream);

// out[i, j] = (beta != 0 ? beta * out[i, j] : 0) + (bias ? bias[j] : 0) for an [m, n]
// fp32 or bf16 matrix. The GEMMs' k == 0 case and their exact-fp32 bias.
LaunchResult launch_bias_fill(void* out, HpType out_type, int64_t m, int64_t n, const float* bias, float beta,
                              cudaStream_t stream);

// out[i] = beta * out[i] + product[i] (+ bias[i % bias_period], fp32 or bf16, when bias is
// given) for i < n, rounded once to out's type: a GEMM's accumulation and bias epilogue
// when the GEMM itself wrote only its product, to fp32 scratch.
LaunchResult launch_add_product(void* out, HpType out_type, const float* product, float beta, int64_t n,
                                const void* bias, HpType bias_type, int64_t bias_period, cudaStream_t stream);

// Whether this build's kernel image can run on the current device (e.g. an sm_90-only
// build on an older GPU cannot): cudaSuccess or the runtime's reason.
cudaError_t probe_kernel_image();

}  // namespace fp8::cuda
