// The fast CPU backend: validation, then the vectorised / multithreaded kernels.
#include <climits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backend/validate.h"
#include "cpu/cast_cpu.h"
#include "cpu/gemm_cpu.h"
#include "cpu/host_memory.h"
#include "cpu/parallel.h"

namespace fp8 {
namespace {

using detail::Requirements;

// BLAS takes int dimensions.
absl::Status check_blas_dims(int64_t m, int64_t n, int64_t k, const char* what) {
  if (m > INT_MAX || n > INT_MAX || k > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": dimension above ", INT_MAX, " (m=", m, " n=", n, " k=", k, ")"));
  }
  return absl::OkStatus();
}

class CpuBackend final : public cpu::HostMemoryBackend {
 public:
  std::string name() const override { return absl::StrCat("cpu (", cpu::num_threads(), " threads, OpenBLAS)"); }

  absl::Status amax(const MatrixRef& x, Granularity g, float* out) override {
    if (auto s = detail::check_amax(x, g, out, req_); !s.ok()) return s;
    cpu::amax(x, g, out);
    return absl::OkStatus();
  }

  absl::Status compute_scales(const float* amax, int64_t n, Format f, bool pow2, float* scale,
                              float* inv_scale) override {
    if (auto s = detail::check_compute_scales(amax, n, scale); !s.ok()) return s;
    cpu::compute_scales(amax, n, f, pow2, scale, inv_scale);
    return absl::OkStatus();
  }

  absl::Status cast(const CastArgs& a) override {
    if (auto s = detail::check_cast(a, req_); !s.ok()) return s;
    cpu::cast(a);
    // A pass of its own here: measuring runs on logged steps only, and a CPU pass over
    // values just cast is cheap beside the cast's own conversions.
    if (a.range_counts != nullptr) cpu::count_cast_range(range_args_of(a, a.range_counts));
    return absl::OkStatus();
  }

  absl::Status count_cast_range(const CastRangeArgs& a) override {
    if (auto s = detail::check_cast_range(a, req_); !s.ok()) return s;
    cpu::count_cast_range(a);
    return absl::OkStatus();
  }

  absl::Status quantize(const QuantizeArgs& q) override {
    if (auto s = detail::check_quantize(q, req_); !s.ok()) return s;
    if (q.has_columnwise()) {
      // One half after the other; passes that serve both at once are the CUDA backend's.
      if (auto s = quantize(rowwise_half_of(q)); !s.ok()) return s;
      return quantize(columnwise_half_of(q));
    }
    const int64_t n = scale_count(q.granularity, q.input.rows, q.input.cols);
    std::vector<float> local;
    float* amax = q.amax_out;
    if (amax == nullptr) {
      local.resize(static_cast<size_t>(n));
      amax = local.data();
    }
    cpu::amax(amax_source_of(q), q.granularity, amax);
    cpu::compute_scales(amax, n, q.format, q.pow2_scale, q.scale_out, q.inv_scale_out);
    const CastArgs c = cast_step_of(q);
    cpu::cast(c);
    if (c.range_counts != nullptr) cpu::count_cast_range(range_args_of(c, c.range_counts));
    return absl::OkStatus();
  }

  absl::Status dequantize(const DequantizeArgs& a) override {
    if (auto s = detail::check_dequantize(a, req_); !s.ok()) return s;
    cpu::dequantize(a);
    return absl::OkStatus();
  }

  absl::Status convert(const void* in, DType in_dtype, void* out, DType out_dtype, int64_t n) override {
    if (auto s = detail::check_convert(in, in_dtype, out, out_dtype, n, req_); !s.ok()) return s;
    cpu::convert(in, in_dtype, out, out_dtype, n);
    return absl::OkStatus();
  }

  absl::Status scaled_gemm(const ScaledGemmArgs& a) override {
    if (auto s = detail::check_scaled_gemm(a, req_); !s.ok()) return s;
    if (auto s = check_blas_dims(a.m, a.n, a.k, "scaled_gemm"); !s.ok()) return s;
    cpu::scaled_gemm(a);
    return absl::OkStatus();
  }

  absl::Status gemm(const GemmArgs& a) override {
    if (auto s = detail::check_gemm(a, req_); !s.ok()) return s;
    if (auto s = check_blas_dims(a.m, a.n, a.k, "gemm"); !s.ok()) return s;
    cpu::gemm(a);
    return absl::OkStatus();
  }

 private:
  // Host memory has no alignment or shape constraints beyond the element size.
  Requirements req_{};
};

}  // namespace

Backend& cpu_backend() {
  static CpuBackend backend;
  return backend;
}

}  // namespace fp8
