// The public face of the fp8 numerics core: formats, scaling, casts and scaled GEMMs.
//
// One interface, `Backend`, with a CPU implementation (vectorised and multithreaded,
// GEMMs through OpenBLAS), a plain scalar reference, and a CUDA implementation
// (cuBLASLt). All three keep the same contracts, so one test suite runs against each.
// Tools outside the engine include this header alone.
//
// Conventions
//  * Matrices are dense and row-major. A vector is a [1, n] matrix.
//  * Pointers live in the backend's memory: host memory for the CPU backends, device
//    memory for CUDA (allocate with Backend::allocate). CUDA calls are asynchronous on
//    the backend's stream; no call synchronises the host unless it says so.
//  * A scale multiplies on the way into fp8: q = saturate(x * scale); dequantization
//    divides (x ≈ q / scale). GEMMs take the dequantization factors 1/scale, as
//    cuBLASLt and torch._scaled_mm do, so no reciprocal is computed per call.
//  * Bad arguments return InvalidArgument naming the argument and never touch memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fp8/arith.h"

namespace fp8 {

enum class DType : uint8_t { kFloat32, kBFloat16, kE4M3, kE5M2 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);
const char* format_name(Format f);
DType fp8_dtype(Format f);

// Which elements one amax or one scale covers, for a [rows, cols] matrix.
enum class Granularity : uint8_t {
  kTensorwise,  // one value for the whole matrix
  kRowwise,     // one value per row: `rows` values
  kColumnwise,  // one value per column: `cols` values
  // Block scaling (DeepSeek-V3, TransformerEngine's Float8BlockScaling): one value per
  // 1×128 tile of a row (activations, gradients) or per 128×128 block (weights). The last
  // tile or block of a row or column may be partial; it is scaled like a whole one.
  kBlock1x128,
  kBlock128x128,
};
const char* granularity_name(Granularity g);
// Entries of a scale (or amax) vector at granularity g, padding included (below).
int64_t scale_count(Granularity g, int64_t rows, int64_t cols);

// Block scales are laid out as cuBLASLt takes them on Hopper (CUBLASLT_MATMUL_MATRIX_SCALE_
// VEC128_32F and _BLK128x128_32F, cuBLAS docs "Scaling factors layouts"), so that the CUDA
// backend can hand the vectors to cuBLASLt unchanged. For a row-major [rows, cols] matrix
// whose cols run along the GEMM's K (every operand here is K-contiguous):
//   kBlock1x128    rows × ceil(cols/128) entries, rows fastest: the scale of element (r, c)
//                  is at (c/128)·rows + r ("M-major": each 128-column stripe's scales are
//                  contiguous over the rows).
//   kBlock128x128  ceil(rows/128) × ld entries with ld = ceil(cols/128) rounded up to a
//                  multiple of 4 (cuBLASLt wants 16-byte rows): the scale of element (r, c)
//                  is at (r/128)·ld + c/128. The padding entries belong to no block; the
//                  core writes them as an all-zero block's (amax 0 and its scale), so every
//                  backend writes the same bytes.
constexpr int64_t kScaleBlock = 128;
inline int64_t scale_blocks(int64_t n) { return (n + kScaleBlock - 1) / kScaleBlock; }
// ld of a kBlock128x128 scale vector for a matrix of `cols` columns.
inline int64_t block128x128_ld(int64_t cols) { return (scale_blocks(cols) + 3) / 4 * 4; }
inline bool is_block_granularity(Granularity g) {
  return g == Granularity::kBlock1x128 || g == Granularity::kBlock128x128;
}
// Index of the scale (or amax) that covers element (r, c) of a [rows, cols] matrix.
inline int64_t scale_index(Granularity g, int64_t rows, int64_t cols, int64_t r, int64_t c) {
  switch (g) {
    case Granularity::kTensorwise: return 0;
    case Granularity::kRowwise: return r;
    case Granularity::kColumnwise: return c;
    case Granularity::kBlock1x128: return (c / kScaleBlock) * rows + r;
    case Granularity::kBlock128x128: return (r / kScaleBlock) * block128x128_ld(cols) + c / kScaleBlock;
  }
  return 0;
}
// Transposes and block scales. A transposed fp8 copy (CastArgs::out_t) is what a GEMM
// contracting over the other dimension reads, so it must be scaled along its own rows:
// TransformerEngine casts the transpose [cols, rows] with 1×128 tiles of its new rows, i.e.
// 128×1 tiles of the original, scales of their own that the rows' scales cannot give.
// Quantize the transposed input at kBlock1x128 for that copy. The fused out_t output and
// QuantizeArgs::columnwise are refused at the block granularities for now (the codes of a
// 128×128-scaled transpose are the transposed codes: Backend::transpose_bytes makes them).

// How an op stores a result: overwriting its buffer, or adding to what the buffer holds,
// in fp32 and rounded once (out = round(float(out) + result)). Gradients of branches that
// meet (q, k and v reading one normed input; a residual stream) then sum into one buffer
// in the op that makes the last of them, instead of in a pass of their own.
enum class Store : uint8_t { kOverwrite, kAccumulate };

// A dense row-major matrix in backend memory.
struct MatrixRef {
  const void* data = nullptr;
  DType dtype = DType::kFloat32;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t size() const { return rows * cols; }
};

// Cast a fp32/bf16 matrix to fp8 with given scales. Any of the three fused outputs may
// be requested in the one pass over the input:
//   out      [rows, cols] fp8
//   out_t    [cols, rows] fp8, the transpose (Hopper's fp8 GEMM wants K-contiguous
//            operands, so backward GEMMs need transposed fp8 copies)
//   amax_out the input's amax at `granularity` (what delayed scaling records)
//   range_counts  how many values saturated and underflowed: count_cast_range of the
//            same input, format, granularity and scales (below), without a pass of its
//            own on the GPU; backend memory, overwritten
// At least one of out / out_t is required.
struct CastRangeCounts;
struct CastArgs {
  MatrixRef input;
  Format format = Format::kE4M3;
  Granularity granularity = Granularity::kTensorwise;
  const float* scale = nullptr;  // scale_count(granularity) entries
  bool saturate = true;
  uint8_t* out = nullptr;
  uint8_t* out_t = nullptr;
  float* amax_out = nullptr;
  CastRangeCounts* range_counts = nullptr;
};

// Dynamic scaling: amax, then scale = fp8_max / max(amax, 1e-12) (optionally rounded
// down to a power of two), then the cast. Writes the scales it used to `scale_out` and,
// if given, the amaxes to `amax_out`.
//
// `row_amax`, when given, holds the amax of each input row already (ModelOps'
// rmsnorm_forward writes them for its output): the amax step then reduces those `rows`
// values instead of reading the whole input, which saves one pass over it. Tensorwise
// and rowwise granularity only (a column's amax cannot be had from the rows'). They must
// be the input's exact row amaxes, |value| as stored: the scales, codes and amax_out are
// then bit for bit those of a quantize without them.
struct QuantizeArgs {
  MatrixRef input;
  Format format = Format::kE4M3;
  Granularity granularity = Granularity::kTensorwise;
  bool pow2_scale = false;
  bool saturate = true;
  uint8_t* out = nullptr;
  uint8_t* out_t = nullptr;
  float* scale_out = nullptr;       // required, scale_count entries
  float* amax_out = nullptr;        // optional
  const float* row_amax = nullptr;  // optional, input.rows entries
  // Optional, scale_count entries: inverse_scale(scale_out[i]) (arith.h), the factors a
  // scaled GEMM dequantizes with, written in the same step as the scales.
  float* inv_scale_out = nullptr;
  // Optional: the cast's range counts, as CastArgs::range_counts, with the scales computed.
  CastRangeCounts* range_counts = nullptr;

  // Optional, rowwise quantizes only (out_t then null): the columnwise quantize of the same
  // input in the same passes, bit for bit what a quantize at kColumnwise with these outputs
  // (and this format, pow2_scale and saturate) makes of it. torchao's rowwise recipe casts
  // each GEMM operand both ways, scaled along the rows for one GEMM and along the columns,
  // transposed, for another; together the input is read twice (its row and column amaxes in
  // one pass, both casts in the next) instead of four times. row_amax, when given, serves
  // the rowwise half only.
  struct Columnwise {
    uint8_t* out_t = nullptr;                 // [cols, rows]; set to ask for this half
    float* scale_out = nullptr;               // required then, cols entries
    float* inv_scale_out = nullptr;           // optional
    float* amax_out = nullptr;                // optional
    CastRangeCounts* range_counts = nullptr;  // optional
  } columnwise;
  bool has_columnwise() const {
    return columnwise.out_t != nullptr || columnwise.scale_out != nullptr || columnwise.inv_scale_out != nullptr ||
           columnwise.amax_out != nullptr || columnwise.range_counts != nullptr;
  }
};

// The two quantizes a rowwise quantize with columnwise outputs stands for: its rowwise half
// (without them), and the columnwise quantize of the same input.
inline QuantizeArgs rowwise_half_of(const QuantizeArgs& q) {
  QuantizeArgs r = q;
  r.columnwise = {};
  return r;
}
inline QuantizeArgs columnwise_half_of(const QuantizeArgs& q) {
  QuantizeArgs c;
  c.input = q.input;
  c.format = q.format;
  c.granularity = Granularity::kColumnwise;
  c.pow2_scale = q.pow2_scale;
  c.saturate = q.saturate;
  c.out_t = q.columnwise.out_t;
  c.scale_out = q.columnwise.scale_out;
  c.inv_scale_out = q.columnwise.inv_scale_out;
  c.amax_out = q.columnwise.amax_out;
  c.range_counts = q.columnwise.range_counts;
  return c;
}

// What a quantize takes its amaxes from: the input, or the [rows, 1] vector of its row
// amaxes (whose tensorwise and rowwise amaxes are the input's).
inline MatrixRef amax_source_of(const QuantizeArgs& q) {
  if (q.row_amax == nullptr) return q.input;
  return MatrixRef{q.row_amax, DType::kFloat32, q.input.rows, 1};
}

// The cast step of a quantize: its input, format, granularity and outputs, with the
// scales it computed (q.scale_out). Every backend's quantize ends with this cast.
inline CastArgs cast_step_of(const QuantizeArgs& q) {
  CastArgs c;
  c.input = q.input;
  c.format = q.format;
  c.granularity = q.granularity;
  c.scale = q.scale_out;
  c.saturate = q.saturate;
  c.out = q.out;
  c.out_t = q.out_t;
  c.range_counts = q.range_counts;
  return c;
}

// How many values of a cast went out of the format's range: the numerics metrics'
// "saturated" and "underflow" ratios. The same input, format, granularity and scales as
// the cast it measures; one read of the input, nothing else written. For each element,
// with y = x · scale in fp32 exactly as the cast computes it (definitions in arith.h,
// fp8_saturates / fp8_underflows, which match float_to_fp8 bit for bit):
//   saturated  y rounds past fp8_max: the (saturating) cast clamps it to ±max. ±Inf
//              counts; a |y| within half an fp8 ulp of max just rounds to max and does not.
//   underflow  x ≠ 0 and y rounds to ±0 (|y| ≤ half the smallest subnormal).
//   NaN        neither: it is not clipped or flushed but carried as NaN, and amax reports it.
// Counts do not depend on CastArgs::saturate: out-of-range values are counted either way.
struct CastRangeCounts {
  uint64_t saturated = 0;
  uint64_t underflow = 0;
};

struct CastRangeArgs {
  MatrixRef input;
  Format format = Format::kE4M3;
  Granularity granularity = Granularity::kTensorwise;
  const float* scale = nullptr;       // scale_count(granularity) entries
  CastRangeCounts* counts = nullptr;  // backend memory; overwritten (zeros for an empty input)
};

// The range count of exactly what `c` casts.
inline CastRangeArgs range_args_of(const CastArgs& c, CastRangeCounts* counts) {
  CastRangeArgs r;
  r.input = c.input;
  r.format = c.format;
  r.granularity = c.granularity;
  r.scale = c.scale;
  r.counts = counts;
  return r;
}

// out = q / scale, in fp32 or bf16.
struct DequantizeArgs {
  const uint8_t* input = nullptr;
  Format format = Format::kE4M3;
  int64_t rows = 0;
  int64_t cols = 0;
  Granularity granularity = Granularity::kTensorwise;
  const float* scale = nullptr;
  DType out_dtype = DType::kFloat32;
  void* out = nullptr;
};

// One fp8 GEMM operand, stored K-contiguous: A as [m, k], B as its transpose [n, k].
struct ScaledOperand {
  const uint8_t* data = nullptr;
  Format format = Format::kE4M3;
  // kTensorwise: one factor. kRowwise: one per row of this [rows, k] operand, i.e. per
  // row of A (m) or per column of B (n): the "axiswise" scaling of torchao.
  // kBlock1x128 / kBlock128x128: one per tile or block of this [rows, k] operand, laid out
  // as scale_index above (rows = m for A, n for B; cols = k).
  Granularity granularity = Granularity::kTensorwise;
  const float* inv_scale = nullptr;  // dequantization factors, 1/scale
};

// out[m, n] = (A / sa) · (B / sb) (+ bias) (+ out if accumulate) (+ addend), where B is
// given as Bᵀ [n, k]. fp8 products are exact in fp32; they are accumulated in fp32 and
// the scales are applied to the accumulated sums. E5M2 × E5M2 is not supported (cuBLASLt
// has no such kernel).
//
// Block-scaled operands, as cuBLASLt on Hopper takes them: both operands block-scaled,
// as 1×128 × 128×128, 128×128 × 1×128 or 1×128 × 1×128 (A × B; no 128×128 × 128×128, and
// no block operand beside a tensorwise or rowwise one). Both operands' scales step along K
// by 128, so k must be a multiple of 128; other shapes are refused (InvalidArgument naming
// them). Then out[m, n] = Σ_kb sa(m, kb) · sb(n, kb) · Σ_{k in kb} A[m, k] · B[n, k]: each
// 128-wide K block's sum is scaled by its two factors and added (Hopper's promoted
// accumulation). The reference sums in fp64; the CPU sums each block in fp32, scales it
// in fp32 and adds it to an fp32 accumulator, within
//   |cpu − ref| ≤ (k/128 + 131) · 2^-24 · Σ_k |A[m, k] · sa · B[n, k] · sb|
// before the output's own rounding (and the bias and addend, added as for other operands).
struct ScaledGemmArgs {
  int64_t m = 0, n = 0, k = 0;
  ScaledOperand a;
  ScaledOperand b;
  DType out_dtype = DType::kFloat32;  // kFloat32 or kBFloat16
  void* out = nullptr;
  const float* bias = nullptr;  // optional, n entries
  bool accumulate = false;      // out += result instead of out = result
  // Optional [m, n] of out_dtype, added to the result in the GEMM's epilogue (cuBLASLt's C):
  // out = result + addend, rounded once. A residual connection rides on the GEMM this
  // way instead of a pass of its own. May be `out` itself (then it is accumulate, which
  // must not be set as well); must not otherwise overlap out.
  const void* addend = nullptr;
  bool fast_accum = false;      // cuBLASLt FAST_ACCUM (GPU); the CPU always accumulates in fp32
};

// High-precision GEMM, the baseline every fp8 speedup is measured against, and the
// GEMM of every layer kept in high precision:
//   out[m, n] = alpha · op(A) · op(B) + beta · C      C = addend if given, else out
// op(A) is [m, k]: A is stored [m, k], or [k, m] with trans_a. op(B) is [k, n]: B is
// stored [k, n], or [n, k] with trans_b. Inputs fp32 or bf16 (both the same), output fp32
// or bf16. The CPU computes in fp32 (bf16 inputs are widened exactly).
struct GemmArgs {
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  const void* b = nullptr;
  DType in_dtype = DType::kFloat32;
  bool trans_a = false;
  bool trans_b = false;
  DType out_dtype = DType::kFloat32;
  void* out = nullptr;
  float alpha = 1.0f;
  float beta = 0.0f;
  // Optional [m, n] of out_dtype that beta scales instead of out (cuBLASLt's C distinct
  // from D): a residual connection added in the epilogue. May be out; must not otherwise
  // overlap it.
  const void* addend = nullptr;
  const float* bias = nullptr;  // optional, n entries (alpha does not scale it)
};

// Delayed scaling's end of a step for `count` casts (fp8/delayed_state.h), queued like a
// kernel so that the step never waits for its amaxes: state i, the
// delayed::state_floats(history_len) floats at states + i * that, records amaxes[i]
// (delayed::record); then scales[i * scale_stride] receives the scale for that cast's next
// step and scales[i * scale_stride + inverse_offset] its inverse (inverse_scale), both 1
// while the state has no scale yet. Every backend computes the same bits as the host's
// delayed::record.
struct DelayedRecordArgs {
  float* states = nullptr;
  int64_t count = 0;
  int history_len = 0;
  const float* amaxes = nullptr;
  float* scales = nullptr;
  int64_t scale_stride = 2;
  int64_t inverse_offset = 1;
};

// What a backend's allocations hold, in bytes. `allocated` counts the bytes callers asked
// for and have not given back; `peak_allocated` its highest value since the last
// reset_peak_memory(); `reserved` what the backend holds from the system, its cache of
// freed blocks included (equal to `allocated` where nothing is cached).
struct MemoryStats {
  int64_t allocated = 0;
  int64_t peak_allocated = 0;
  int64_t reserved = 0;
};

// A point in a backend's queue of work: wait() returns once everything queued before the
// fence was made has finished (or the first error among it). It lets another thread, one
// that hands buffers to a collective on another stream, wait for the device without
// holding up the thread that keeps queuing kernels. May be waited on from any thread.
class Fence {
 public:
  virtual ~Fence() = default;
  virtual absl::Status wait() = 0;
};

// A few bytes of backend memory on their way to the host (Backend::queue_read): queued
// like a kernel, so that the host can ask for a value now and collect it a step later
// without the device ever standing idle. wait() blocks until the bytes arrived and copies
// them to dst (`bytes` of host memory). Must not outlive its backend.
class QueuedRead {
 public:
  virtual ~QueuedRead() = default;
  virtual absl::Status wait(void* dst) = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual bool is_cuda() const { return false; }

  // Memory of this backend, aligned to 256 bytes. Host memory for the CPU backends.
  // The CUDA backend caches freed blocks and hands them out again in stream order: a
  // block may be deallocated while work queued on the backend's stream still reads it,
  // and is reused only by work queued after. Memory used on another stream (a collective)
  // must be done there before it is deallocated.
  virtual absl::StatusOr<void*> allocate(size_t bytes) = 0;
  virtual void deallocate(void* p) = 0;
  virtual MemoryStats memory_stats() const = 0;
  // Starts a new peak: peak_allocated becomes the current allocated.
  virtual void reset_peak_memory() = 0;
  // Copies that return once done: the host waits for the device (CUDA: for its stream).
  virtual absl::Status copy_from_host(void* dst, const void* src, size_t bytes) = 0;
  virtual absl::Status copy_to_host(void* dst, const void* src, size_t bytes) = 0;
  // dst = src (bytes of host memory), queued like a kernel: the host does not wait for the
  // device, src may be reused as soon as this returns, and work queued after reads the new
  // bytes. Work on another stream (a collective) must wait on a fence() first. What a
  // training step uploads (token ids, delayed-scaling scales) goes this way, so the step
  // never stalls the device. The host backends copy at once.
  virtual absl::Status queue_copy_from_host(void* dst, const void* src, size_t bytes) {
    return copy_from_host(dst, src, bytes);
  }
  // Within this backend's memory, queued like a kernel (no host wait). Ranges must not overlap.
  virtual absl::Status copy(void* dst, const void* src, size_t bytes) = 0;
  // `rows` runs of `row_bytes` bytes, run i from src + i·src_pitch to dst + i·dst_pitch,
  // queued like one copy (CUDA: one cudaMemcpy2DAsync where a row-by-row copy would queue
  // `rows`). FSDP moves a parameter's block of every rank this way in and out of its
  // collectives' buffers. Pitches at least row_bytes; ranges must not overlap. The default
  // copies row by row.
  virtual absl::Status copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
                                 size_t rows);
  // Sets `bytes` bytes to zero, queued like a kernel.
  virtual absl::Status fill_zero(void* dst, size_t bytes) = 0;
  // dst [cols, rows] = src [rows, cols]ᵀ for one-byte elements (fp8 codes), queued like a
  // kernel. FSDP gathers an fp8 weight as [out, in] bytes and the backward GEMM wants it
  // K-contiguous the other way round: transposing codes is exact, re-casting would not be
  // free. Ranges must not overlap.
  virtual absl::Status transpose_bytes(const uint8_t* src, int64_t rows, int64_t cols, uint8_t* dst) = 0;
  // Waits for all work queued on this backend; surfaces asynchronous errors.
  virtual absl::Status synchronize() = 0;
  // A fence after the work queued so far. The host backends finish every call before it
  // returns, so theirs is passed already.
  virtual absl::StatusOr<std::unique_ptr<Fence>> fence();
  // src[0, bytes) as of the work queued so far, read back without waiting now (QueuedRead);
  // at most kMaxQueuedReadBytes. The host backends read at once; CUDA copies into pinned
  // memory behind the queued work and waits for an event when asked.
  static constexpr size_t kMaxQueuedReadBytes = 256;
  virtual absl::StatusOr<std::unique_ptr<QueuedRead>> queue_read(const void* src, size_t bytes);

  virtual absl::Status amax(const MatrixRef& x, Granularity g, float* out) = 0;
  // scale[i] = scale_from_amax(amax[i]) (arith.h), queued like a kernel; with inv_scale,
  // also inv_scale[i] = inverse_scale(scale[i]), the factor a scaled GEMM dequantizes with.
  virtual absl::Status compute_scales(const float* amax, int64_t n, Format f, bool pow2, float* scale,
                                      float* inv_scale = nullptr) = 0;
  virtual absl::Status cast(const CastArgs& args) = 0;
  virtual absl::Status record_delayed_amaxes(const DelayedRecordArgs& args) = 0;
  // Counts the values a cast with these arguments saturates or flushes to zero (see
  // CastRangeArgs). Queued like a kernel: read the counts with copy_to_host.
  virtual absl::Status count_cast_range(const CastRangeArgs& args) = 0;
  virtual absl::Status quantize(const QuantizeArgs& args) = 0;
  virtual absl::Status dequantize(const DequantizeArgs& args) = 0;
  // Elementwise fp32 <-> bf16 (or a same-type copy) of n elements.
  virtual absl::Status convert(const void* in, DType in_dtype, void* out, DType out_dtype,
                               int64_t n) = 0;
  virtual absl::Status scaled_gemm(const ScaledGemmArgs& args) = 0;
  virtual absl::Status gemm(const GemmArgs& args) = 0;
};

// The fast CPU backend: vectorised casts, multithreaded, GEMMs through OpenBLAS with
// fp8 operands widened in cache-sized blocks (bounded extra memory).
Backend& cpu_backend();

// Plain scalar loops, one obvious line per formula; what the fast paths are tested
// against. Its scaled GEMM accumulates in fp64.
Backend& reference_backend();

// True when this build contains the CUDA backend.
bool cuda_compiled();

// The CUDA backend on `device`, queuing work on `stream` (a cudaStream_t; null for the
// default stream). Fails with Unavailable when the build has no CUDA or no GPU is
// present, saying which.
struct CudaBackendOptions {
  // Treat every GEMM's C as one cuBLASLt refuses, so that tests reach the fallback (the
  // product into scratch, then one pass adding it onto D) on GPUs whose cuBLASLt takes C.
  bool refuse_gemm_c = false;
};
absl::StatusOr<std::unique_ptr<Backend>> make_cuda_backend(int device = 0, void* stream = nullptr,
                                                           const CudaBackendOptions& options = {});

// A new non-blocking stream on CUDA device `device` (it never waits for the legacy
// default stream), for a backend and the model ops to share: get() is the cudaStream_t.
// The stream is destroyed, after its queued work, with the last copy of the handle, which
// must therefore outlive the backend and model ops using it. Unavailable without CUDA or
// that device.
absl::StatusOr<std::shared_ptr<void>> make_cuda_stream(int device);

}  // namespace fp8
