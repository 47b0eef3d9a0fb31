// The CUDA backend: validation (with cuBLASLt's alignment rules), then kernels queued on
// the backend's stream.
//
// Device: every method makes the backend's device current for its duration and restores
// the caller's (DeviceGuard), so backends on several GPUs can share a thread.
// Asynchrony: methods only queue work on the stream. The exceptions are synchronize(),
// copy_from_host()/copy_to_host() (they wait for the copy, so host buffers may be reused
// at once), and the rare growth of the backend's scratch buffer (see DeviceBuffer).
// queue_copy_from_host() stages the bytes in pinned memory and does not wait
// (pinned_uploads.h); queue_read() copies into pinned memory and waits only when the
// read's value is asked for (pinned_reads.h).
// allocate()/deallocate() are stream-ordered and do not wait (caching_allocator.h).
// Threads: methods that use the backend's scratch or GEMM plan cache hold a mutex, which
// also keeps each call's launches contiguous on the stream; the others are stateless.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "backend/validate.h"
#include "cuda/caching_allocator.h"
#include "cuda/cast_kernels.h"
#include "cuda/cuda_status.h"
#include "cuda/delayed_scaling_kernels.h"
#include "cuda/device_buffer.h"
#include "cuda/device_check.h"
#include "cuda/event_fence.h"
#include "cuda/gemm_cublaslt.h"
#include "cuda/pinned_reads.h"
#include "cuda/pinned_uploads.h"
#include "fp8/fp8.h"

namespace fp8 {
namespace {

using cuda::cuda_status;
using cuda::DeviceGuard;
using detail::Requirements;

// cuBLASLt's fp8 rules: 16-byte aligned pointers everywhere (which also lets every kernel
// use 16-byte vector accesses), and k, n multiples of 16 for fp8 GEMMs.
constexpr Requirements kRequirements{16, 16};
// The high-precision GEMM has no shape constraints, only the alignment.
constexpr Requirements kGemmRequirements{16, 1};

// Block granularities never get here: they take the block kernels (block_launch_of).
cuda::Axis axis_of(Granularity g) {
  switch (g) {
    case Granularity::kTensorwise: return cuda::Axis::kTensor;
    case Granularity::kRowwise: return cuda::Axis::kRow;
    case Granularity::kColumnwise:
    case Granularity::kBlock1x128:
    case Granularity::kBlock128x128: break;
  }
  return cuda::Axis::kColumn;
}

cuda::HpType hp_of(DType t) { return t == DType::kFloat32 ? cuda::HpType::kFloat32 : cuda::HpType::kBFloat16; }

// The block kernels' launch for a [rows, cols] input at block granularity g (fp8.h's
// kBlock1x128 or kBlock128x128); the caller sets the scales and outputs.
cuda::BlockCastLaunch block_launch_of(const MatrixRef& x, Format f, Granularity g) {
  cuda::BlockCastLaunch b;
  b.input = x.data;
  b.type = hp_of(x.dtype);
  b.rows = x.rows;
  b.cols = x.cols;
  b.format = f;
  b.square = g == Granularity::kBlock128x128;
  return b;
}

class CudaBackend final : public Backend {
 public:
  static absl::StatusOr<std::unique_ptr<Backend>> create(int device, cudaStream_t stream,
                                                       const CudaBackendOptions& options);

  ~CudaBackend() override {
    DeviceGuard guard(device_);
    // Let queued work finish before its scratch and workspace go away. An error here
    // belongs to work whose caller never synchronised; nothing is left to report it to.
    cudaStreamSynchronize(stream_);
    gemm_.reset();
    scratch_.release();
  }

  std::string name() const override { return name_; }
  bool is_cuda() const override { return true; }

  absl::StatusOr<void*> allocate(size_t bytes) override {
    DeviceGuard guard(device_);
    if (!guard.status().ok()) return guard.status();
    absl::StatusOr<void*> p = allocator_->allocate(bytes);
    if (!p.ok()) return absl::Status(p.status().code(), absl::StrCat(p.status().message(), " on ", name_));
    return p;
  }

  void deallocate(void* p) override {
    if (p == nullptr) return;
    DeviceGuard guard(device_);
    allocator_->deallocate(p);
  }

  MemoryStats memory_stats() const override { return allocator_->stats(); }
  void reset_peak_memory() override { allocator_->reset_peak(); }

  absl::Status copy_from_host(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return absl::OkStatus();
    if (dst == nullptr || src == nullptr) return absl::InvalidArgumentError("copy_from_host: null pointer");
    DeviceGuard guard(device_);
    if (!guard.status().ok()) return guard.status();
    if (auto s = cuda_status(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync");
        !s.ok()) {
      return s;
    }
    return cuda_status(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }

  absl::Status queue_copy_from_host(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return absl::OkStatus();
    if (dst == nullptr || src == nullptr) return absl::InvalidArgumentError("queue_copy_from_host: null pointer");
    DeviceGuard guard(device_);
    if (!guard.status().ok()) return guard.status();
    std::lock_guard<std::mutex> lock(uploads_mu_);
    return uploads_.upload(dst, src, bytes);
  }

  absl::Status copy_to_host(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return absl::OkStatus();
    if (dst == nullptr || src == nullptr) return absl::InvalidArgumentError("copy_to_host: null pointer");
    DeviceGuard guard(device_);
    if (!guard.status().ok()) return guard.status();
    if (auto s = cuda_status(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync");
        !s.ok()) {
      return s;
    }
    return cuda_status(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }

  absl::Status copy(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return absl::OkStatus();
    if (dst == nullptr || src == nullptr) return absl::InvalidArgumentError("copy: null pointer");
    DeviceGuard guard(device_);
    if (!guard.status().ok()) return guard.status();
    return cuda_status(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_), "cudaMemcpyAsync");
  }

  absl::Status copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
                         size_t rows) override {
    if (auto s = detail::check_copy_rows(dst, dst_pitch, src, src_pitch, row_bytes, rows); !s.ok()) return s;
    if (rows == 0 || row_bytes == 0) return absl::OkStatus();
    DeviceGuard guard(device_);
    if (!guard.status().ok()) return guard.status();
    const cudaError_t e = cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, row_bytes, rows,
                                            cudaMemcpyDeviceToDevice, stream_);
    // A pitch beyond the device's limit (cudaDevAttrMaxPitch) is refused before anything
    // is queued, and the error is not sticky: the rows then go one copy each.
    if (e == cudaErrorInvalidPitchValue) {
      (void)cudaGetLastError();
      return Backend::copy_rows(dst, dst_pitch, src, src_pitch, row_bytes, rows);
    }
    return cuda_status(e, "cudaMemcpy2DAsync");
  }

  absl::Status fill_zero(void* dst, size_t bytes) override {
    if (bytes == 0) return absl::OkStatus();
    if (dst == nullptr) return absl::InvalidArgumentError("fill_zero: null pointer");
    DeviceGuard guard(device_);
    if (!guard.status().ok()) return guard.status();
    return cuda_status(cudaMemsetAsync(dst, 0, bytes, stream_), "cudaMemsetAsync");
  }

  absl::Status transpose_bytes(const uint8_t* src, int64_t rows, int64_t cols, uint8_t* dst) override {
    if (rows < 0 || cols < 0) return absl::InvalidArgumentError("transpose_bytes: negative shape");
    if (rows == 0 || cols == 0) return absl::OkStatus();
    if (dst == nullptr || src == nullptr) return absl::InvalidArgumentError("transpose_bytes: null pointer");
    DeviceGuard guard(device_);
    if (!guard.status().ok()) return guard.status();
    return cuda_status(cuda::launch_transpose_bytes(src, rows, cols, dst, stream_));
  }

  absl::Status synchronize() override {
    DeviceGuard guard(device_);
    if (!guard.status().ok()) return guard.status();
    return cuda_status(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }

  absl::StatusOr<std::unique_ptr<Fence>> fence() override {
    DeviceGuard guard(device_);
    if (!guard.status().ok()) return guard.status();
    return cuda::EventFence::record(device_, stream_);
  }

  absl::StatusOr<std::unique_ptr<QueuedRead>> queue_read(const void* src, size_t bytes) override {
    if (bytes > kMaxQueuedReadBytes) return Backend::queue_read(src, bytes);  // its error
    if (src == nullptr && bytes > 0) return absl::InvalidArgumentError("queue_read: src is null");
    DeviceGuard guard(device_);
    if (!guard.status().ok()) return guard.status();
    return reads_.read(src, bytes);
  }

  absl::Status amax(const MatrixRef& x, Granularity g, float* out) override {
    if (auto s = detail::check_amax(x, g, out, kRequirements); !s.ok()) return s;
    DeviceGuard guard(device_);
    if (!guard.status().ok()) return guard.status();
    if (is_block_granularity(g)) {
      cuda::BlockCastLaunch b = block_launch_of(x, Format::kE4M3, g);  // the format is not read
      b.amax = out;
      return cuda_status(cuda::launch_block_cast(b, stream_));
    }
    return cuda_status(cuda::launch_amax(x.data, hp_of(x.dtype), x.rows, x.cols, axis_of(g), out, stream_));
  }

  absl::Status compute_scales(const float* amax, int64_t n, Format f, bool pow2, float* scale,
                              float* inv_scale) override {
    if (auto s = detail::check_compute_scales(amax, n, scale); !s.ok()) return s;
    DeviceGuard guard(device_);
    if (!guard.status().ok()) return guard.status();
    return cuda_status(cuda::launch_compute_scales(amax, n, f, pow2, scale, inv_scale, stream_));
  }

  absl::Status record_delayed_amaxes(const DelayedRecordArgs& a) override {
    if (auto s = detail::check_record_delayed(a); !s.ok()) return s;
    DeviceGuard guard(device_);
    if (!guard.status().ok()) return guard.status();
    return cuda_status(cuda::launch_record_delayed(a.states, a.count, a.history_len, a.amaxes, a.scales,
                                                   a.scale_stride, a.inverse_offset, stream_));
  }

  absl::Status cast(const CastArgs& a) override {
    if (auto s = detail::check_cast(a, kRequirements); !s.ok()) return s;
    DeviceGuard guard(device_);
    if (!guard.status().ok()) return guard.status();
    if (is_block_granularity(a.granularity)) {
      // Validation refused out_t: the codes, amaxes and counts in one pass.
      cuda::BlockCastLaunch b = block_launch_of(a.input, a.format, a.granularity);
      b.scale = a.scale;
      b.saturate = a.saturate;
      b.out = a.out;
      b.amax = a.amax_out;
      b.range_counts = reinterpret_cast<uint64_t*>(a.range_counts);
      return cuda_status(cuda::launch_block_cast(b, stream_));
    }
    cuda::CastLaunch c;
    c.input = a.input.data;
    c.type = hp_of(a.input.dtype);
    c.rows = a.input.rows;
    c.cols = a.input.cols;
    c.format = a.format;
    c.axis = axis_of(a.granularity);
    c.scale = a.scale;
    c.saturate = a.saturate;
    c.out = a.out;
    c.out_t = a.out_t;
    c.amax = a.amax_out;
    c.range_counts = reinterpret_cast<uint64_t*>(a.range_counts);
    return cuda_status(cuda::launch_cast(c, stream_));
  }

  absl::Status count_cast_range(const CastRangeArgs& a) override {
    if (auto s = detail::check_cast_range(a, kRequirements); !s.ok()) return s;
    DeviceGuard guard(device_);
    if (!guard.status().ok()) return guard.status();
    static_assert(sizeof(CastRangeCounts) == 2 * sizeof(uint64_t), "two packed counters");
    if (is_block_granularity(a.granularity)) {
      cuda::BlockCastLaunch b = block_launch_of(a.input, a.format, a.granularity);
      b.scale = a.scale;
      b.range_counts = reinterpret_cast<uint64_t*>(a.counts);
      return cuda_status(cuda::launch_block_cast(b, stream_));
    }
    return cuda_status(cuda::launch_range_count(a.input.data, hp_of(a.input.dtype), a.input.rows, a.input.cols,
                                                a.format, axis_of(a.granularity), a.scale,
                                                reinterpret_cast<uint64_t*>(a.counts), stream_));
  }

  // amax -> scales -> cast, all queued on the stream: dynamic scaling needs no host sync.
  // The amax pass and the cast pass each read the input once; tensorwise and rowwise casts
  // compute their scales themselves (CastLaunch::scale_amax), columnwise ones in a kernel
  // between the two. At a block granularity each tile's or block's amax is local to one
  // block of threads, so the whole quantize is one pass (launch_block_cast).
  absl::Status quantize(const QuantizeArgs& q) override {
    if (auto s = detail::check_quantize(q, kRequirements); !s.ok()) return s;
    if (is_block_granularity(q.granularity)) {
      // Validation refused out_t, row_amax and the columnwise half at these granularities.
      DeviceGuard guard(device_);
      if (!guard.status().ok()) return guard.status();
      cuda::BlockCastLaunch b = block_launch_of(q.input, q.format, q.granularity);
      b.pow2_scale = q.pow2_scale;
      b.saturate = q.saturate;
      b.out = q.out;
      b.amax = q.amax_out;
      b.scale_out = q.scale_out;
      b.inv_scale_out = q.inv_scale_out;
      b.range_counts = reinterpret_cast<uint64_t*>(q.range_counts);
      return cuda_status(cuda::launch_block_cast(b, stream_));
    }
    std::lock_guard<std::mutex> lock(mu_);
    DeviceGuard guard(device_);
    if (!guard.status().ok()) return guard.status();
    if (q.has_columnwise()) return quantize_both_ways(q);
    const MatrixRef& x = q.input;
    const cuda::Axis axis = axis_of(q.granularity);
    const int64_t n = scale_count(q.granularity, x.rows, x.cols);
    float* amax = q.amax_out;
    if (amax == nullptr && n > 0) {
      auto got = scratch_.get(static_cast<size_t>(n) * sizeof(float), stream_);
      if (!got.ok()) return got.status();
      amax = static_cast<float*>(*got);
    }
    const MatrixRef source = amax_source_of(q);
    if (auto s = cuda_status(
            cuda::launch_amax(source.data, hp_of(source.dtype), source.rows, source.cols, axis, amax, stream_));
        !s.ok()) {
      return s;
    }
    if (x.size() == 0 && axis != cuda::Axis::kColumn) {
      // Nothing to cast, and so no cast to derive the scales: those of the zero amaxes are
      // still the quantize's results.
      return cuda_status(
          cuda::launch_compute_scales(amax, n, q.format, q.pow2_scale, q.scale_out, q.inv_scale_out, stream_));
    }
    cuda::CastLaunch c;
    c.input = x.data;
    c.type = hp_of(x.dtype);
    c.rows = x.rows;
    c.cols = x.cols;
    c.format = q.format;
    c.axis = axis;
    if (axis == cuda::Axis::kColumn) {
      if (auto s = cuda_status(
              cuda::launch_compute_scales(amax, n, q.format, q.pow2_scale, q.scale_out, q.inv_scale_out, stream_));
          !s.ok()) {
        return s;
      }
      c.scale = q.scale_out;
    } else {
      // The cast derives the scales from the amaxes itself and writes them out: one
      // launch fewer per cast.
      c.scale_amax = amax;
      c.pow2_scale = q.pow2_scale;
      c.scale_out = q.scale_out;
      c.inv_scale_out = q.inv_scale_out;
    }
    c.saturate = q.saturate;
    c.out = q.out;
    c.out_t = q.out_t;
    c.range_counts = reinterpret_cast<uint64_t*>(q.range_counts);
    return cuda_status(cuda::launch_cast(c, stream_));
  }

  // A rowwise quantize with its columnwise twin (QuantizeArgs::columnwise): the row and
  // column amaxes in one read (or the column amaxes alone, given the rows'), the column
  // scales, then both casts in one read; apart, the two would read the input four times.
  // Called with mu_ held and the device set.
  absl::Status quantize_both_ways(const QuantizeArgs& q) {
    const MatrixRef& x = q.input;
    // Amaxes the caller did not ask for go to scratch: rows first, then columns.
    const int64_t scratch_floats =
        (q.amax_out == nullptr ? x.rows : 0) + (q.columnwise.amax_out == nullptr ? x.cols : 0);
    float* scratch = nullptr;
    if (scratch_floats > 0) {
      auto got = scratch_.get(static_cast<size_t>(scratch_floats) * sizeof(float), stream_);
      if (!got.ok()) return got.status();
      scratch = static_cast<float*>(*got);
    }
    float* row_amax = q.amax_out != nullptr ? q.amax_out : scratch;
    float* col_amax = q.columnwise.amax_out;
    if (col_amax == nullptr) col_amax = q.amax_out == nullptr ? scratch + x.rows : scratch;
    const cuda::HpType type = hp_of(x.dtype);
    if (q.row_amax != nullptr) {
      // The rows' amaxes are known: the rows' pass reads those alone, the columns' the input.
      if (auto s = cuda_status(
              cuda::launch_amax(q.row_amax, cuda::HpType::kFloat32, x.rows, 1, cuda::Axis::kRow, row_amax, stream_));
          !s.ok()) {
        return s;
      }
      if (auto s = cuda_status(
              cuda::launch_amax(x.data, type, x.rows, x.cols, cuda::Axis::kColumn, col_amax, stream_));
          !s.ok()) {
        return s;
      }
    } else if (auto s = cuda_status(
                   cuda::launch_row_and_column_amax(x.data, type, x.rows, x.cols, row_amax, col_amax, stream_));
               !s.ok()) {
      return s;
    }
    if (auto s = cuda_status(cuda::launch_compute_scales(col_amax, x.cols, q.format, q.pow2_scale,
                                                         q.columnwise.scale_out, q.columnwise.inv_scale_out, stream_));
        !s.ok()) {
      return s;
    }
    if (x.size() == 0) {  // as in quantize(): the rows' scales without a cast to derive them
      return cuda_status(cuda::launch_compute_scales(row_amax, x.rows, q.format, q.pow2_scale, q.scale_out,
                                                     q.inv_scale_out, stream_));
    }
    cuda::CastLaunch c;
    c.input = x.data;
    c.type = type;
    c.rows = x.rows;
    c.cols = x.cols;
    c.format = q.format;
    c.axis = cuda::Axis::kRow;
    c.scale_amax = row_amax;  // the rows' scales derived in the cast, as a rowwise quantize's
    c.pow2_scale = q.pow2_scale;
    c.scale_out = q.scale_out;
    c.inv_scale_out = q.inv_scale_out;
    c.saturate = q.saturate;
    c.out = q.out;
    c.range_counts = reinterpret_cast<uint64_t*>(q.range_counts);
    c.columnwise.out_t = q.columnwise.out_t;
    c.columnwise.scale = q.columnwise.scale_out;
    c.columnwise.range_counts = reinterpret_cast<uint64_t*>(q.columnwise.range_counts);
    return cuda_status(cuda::launch_cast(c, stream_));
  }

  absl::Status dequantize(const DequantizeArgs& a) override {
    if (auto s = detail::check_dequantize(a, kRequirements); !s.ok()) return s;
    DeviceGuard guard(device_);
    if (!guard.status().ok()) return guard.status();
    if (is_block_granularity(a.granularity)) {
      return cuda_status(cuda::launch_block_dequantize(a.input, a.format, a.rows, a.cols,
                                                       a.granularity == Granularity::kBlock128x128, a.scale,
                                                       hp_of(a.out_dtype), a.out, stream_));
    }
    return cuda_status(cuda::launch_dequantize(a.input, a.format, a.rows, a.cols, axis_of(a.granularity), a.scale,
                                               hp_of(a.out_dtype), a.out, stream_));
  }

  absl::Status convert(const void* in, DType in_dtype, void* out, DType out_dtype, int64_t n) override {
    if (auto s = detail::check_convert(in, in_dtype, out, out_dtype, n, kRequirements); !s.ok()) return s;
    if (n == 0) return absl::OkStatus();
    DeviceGuard guard(device_);
    if (!guard.status().ok()) return guard.status();
    if (in_dtype == out_dtype) {
      const size_t bytes = static_cast<size_t>(n) * dtype_size(in_dtype);
      return cuda_status(cudaMemcpyAsync(out, in, bytes, cudaMemcpyDeviceToDevice, stream_), "cudaMemcpyAsync");
    }
    return cuda_status(cuda::launch_convert(in, hp_of(in_dtype), out, hp_of(out_dtype), n, stream_));
  }

  absl::Status scaled_gemm(const ScaledGemmArgs& a) override {
    if (auto s = detail::check_scaled_gemm(a, kRequirements); !s.ok()) return s;
    if (is_block_granularity(a.a.granularity) && a.m % 4 != 0) {
      // cuBLASLt's block scale modes take both output dimensions in multiples of 4, so that
      // each scale vector's rows (a 1x128 vector's 128-wide K stripes, `rows` entries apart,
      // unpadded in fp8.h's layout) stay 16-byte aligned. B's n, a multiple of 16 here,
      // always is; m is refused here rather than left to a misread vector.
      return absl::InvalidArgumentError(absl::StrCat("scaled_gemm: block-scaled operands with m=", a.m,
                                                     ": m must be a multiple of 4 on ", name_,
                                                     " (cuBLASLt's block scale modes take dimensions in "
                                                     "multiples of 4)"));
    }
    std::lock_guard<std::mutex> lock(mu_);
    DeviceGuard guard(device_);
    if (!guard.status().ok()) return guard.status();
    return gemm_->scaled_gemm(a, stream_);
  }

  absl::Status gemm(const GemmArgs& a) override {
    if (auto s = detail::check_gemm(a, kGemmRequirements); !s.ok()) return s;
    std::lock_guard<std::mutex> lock(mu_);
    DeviceGuard guard(device_);
    if (!guard.status().ok()) return guard.status();
    return gemm_->gemm(a, stream_);
  }

 private:
  CudaBackend(int device, cudaStream_t stream, std::string name, std::unique_ptr<cuda::CublasLtGemm> gemm,
              std::unique_ptr<cuda::CachingAllocator> allocator)
      : device_(device),
        stream_(stream),
        name_(std::move(name)),
        gemm_(std::move(gemm)),
        allocator_(std::move(allocator)) {}

  const int device_;
  const cudaStream_t stream_;  // the caller's stream (or the default stream); not owned
  const std::string name_;
  std::mutex mu_;  // guards scratch_ and gemm_
  cuda::DeviceBuffer scratch_;
  std::unique_ptr<cuda::CublasLtGemm> gemm_;
  std::unique_ptr<cuda::CachingAllocator> allocator_;
  std::mutex uploads_mu_;  // guards uploads_
  cuda::PinnedUploads uploads_{device_, stream_};
  cuda::PinnedReads reads_{device_, stream_};  // guards itself
};

absl::StatusOr<std::unique_ptr<Backend>> CudaBackend::create(int device, cudaStream_t stream,
                                                             const CudaBackendOptions& options) {
  absl::StatusOr<cudaDeviceProp> prop = cuda::check_cuda_device(device, &cuda::probe_kernel_image, "kernels");
  if (!prop.ok()) return prop.status();
  DeviceGuard guard(device);
  if (!guard.status().ok()) return guard.status();
  auto gemm = cuda::CublasLtGemm::create(stream, options.refuse_gemm_c);
  if (!gemm.ok()) return gemm.status();
  auto allocator = cuda::CachingAllocator::create(device, stream);
  if (!allocator.ok()) return allocator.status();
  std::unique_ptr<CudaBackend> backend(new CudaBackend(device, stream, absl::StrCat("cuda:", device, " (", prop->name, ")"),
                                                       std::move(*gemm), std::move(*allocator)));
  // Allocate the scratch now, so that the first quantize does not call cudaMalloc.
  if (auto s = backend->scratch_.get(1, stream); !s.ok()) return s.status();
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace

bool cuda_compiled() { return true; }

absl::StatusOr<std::unique_ptr<Backend>> make_cuda_backend(int device, void* stream,
                                                           const CudaBackendOptions& options) {
  return CudaBackend::create(device, static_cast<cudaStream_t>(stream), options);
}

absl::StatusOr<std::shared_ptr<void>> make_cuda_stream(int device) {
  if (absl::StatusOr<cudaDeviceProp> prop = cuda::check_cuda_device(device, &cuda::probe_kernel_image, "kernels");
      !prop.ok()) {
    return prop.status();
  }
  DeviceGuard guard(device);
  if (!guard.status().ok()) return guard.status();
  cudaStream_t stream = nullptr;
  if (auto s = cuda_status(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
      !s.ok()) {
    return s;
  }
  return std::shared_ptr<void>(stream, [device](void* p) {
    DeviceGuard destroy_on(device);
    // cudaStreamDestroy returns at once; the stream's queued work still completes.
    cudaStreamSynchronize(static_cast<cudaStream_t>(p));
    cudaStreamDestroy(static_cast<cudaStream_t>(p));
  });
}

}  // namespace fp8
