// The reference backend: each formula written once, as plainly as possible, one element
// at a time. The fast CPU path and the CUDA path are tested against it; it is never on a
// hot path. Its GEMMs accumulate in fp64.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/validate.h"
#include "cpu/host_memory.h"

namespace fp8 {
namespace {

float load(const MatrixRef& x, int64_t i) {
  return x.dtype == DType::kFloat32 ? static_cast<const float*>(x.data)[i]
                                    : bf16_to_float(static_cast<const uint16_t*>(x.data)[i]);
}

void store(void* out, DType t, int64_t i, float v) {
  if (t == DType::kFloat32) {
    static_cast<float*>(out)[i] = v;
  } else {
    static_cast<uint16_t*>(out)[i] = float_to_bf16(v);
  }
}

float load_out(const void* out, DType t, int64_t i) {
  return t == DType::kFloat32 ? static_cast<const float*>(out)[i] : bf16_to_float(static_cast<const uint16_t*>(out)[i]);
}


class ReferenceBackend final : public cpu::HostMemoryBackend {
 public:
  std::string name() const override { return "reference"; }

  absl::Status amax(const MatrixRef& x, Granularity g, float* out) override {
    if (auto s = detail::check_amax(x, g, out, {}); !s.ok()) return s;
    std::vector<uint32_t> acc(static_cast<size_t>(scale_count(g, x.rows, x.cols)), 0u);
    for (int64_t r = 0; r < x.rows; ++r) {
      for (int64_t c = 0; c < x.cols; ++c) {
        uint32_t& a = acc[static_cast<size_t>(scale_index(g, x.rows, x.cols, r, c))];
        a = amax_bits_update(a, load(x, r * x.cols + c));
      }
    }
    for (size_t i = 0; i < acc.size(); ++i) out[i] = bits_float(acc[i]);
    return absl::OkStatus();
  }

  absl::Status compute_scales(const float* amax, int64_t n, Format f, bool pow2, float* scale,
                              float* inv_scale) override {
    if (auto s = detail::check_compute_scales(amax, n, scale); !s.ok()) return s;
    for (int64_t i = 0; i < n; ++i) {
      scale[i] = scale_from_amax(amax[i], f, pow2);
      if (inv_scale != nullptr) inv_scale[i] = inverse_scale(scale[i]);
    }
    return absl::OkStatus();
  }

  absl::Status cast(const CastArgs& a) override {
    if (auto s = detail::check_cast(a, {}); !s.ok()) return s;
    const MatrixRef& x = a.input;
    for (int64_t r = 0; r < x.rows; ++r) {
      for (int64_t c = 0; c < x.cols; ++c) {
        const float scale = a.scale[scale_index(a.granularity, x.rows, x.cols, r, c)];
        const uint8_t q = quantize_value(load(x, r * x.cols + c), scale, a.format, a.saturate);
        if (a.out != nullptr) a.out[r * x.cols + c] = q;
        if (a.out_t != nullptr) a.out_t[c * x.rows + r] = q;
      }
    }
    if (a.amax_out != nullptr) {
      if (auto s = amax(x, a.granularity, a.amax_out); !s.ok()) return s;
    }
    if (a.range_counts != nullptr) return count_cast_range(range_args_of(a, a.range_counts));
    return absl::OkStatus();
  }

  // Written from float_to_fp8 itself rather than arith.h's thresholds (which the fast
  // backends use), so that the contract tests compare the two.
  absl::Status count_cast_range(const CastRangeArgs& a) override {
    if (auto s = detail::check_cast_range(a, {}); !s.ok()) return s;
    const MatrixRef& x = a.input;
    CastRangeCounts counts;
    for (int64_t r = 0; r < x.rows; ++r) {
      for (int64_t c = 0; c < x.cols; ++c) {
        const float v = load(x, r * x.cols + c);
        const float y = v * a.scale[scale_index(a.granularity, x.rows, x.cols, r, c)];
        if (std::isnan(y)) continue;  // NaN is neither (fp8.h)
        // A number the non-saturating cast cannot represent (NaN / Inf code): clipped.
        if (!std::isfinite(fp8_to_float(float_to_fp8(y, a.format, /*saturate=*/false), a.format))) {
          ++counts.saturated;
        } else if (v != 0.0f && fp8_to_float(float_to_fp8(y, a.format, /*saturate=*/true), a.format) == 0.0f) {
          ++counts.underflow;
        }
      }
    }
    *a.counts = counts;
    return absl::OkStatus();
  }

  absl::Status quantize(const QuantizeArgs& q) override {
    if (auto s = detail::check_quantize(q, {}); !s.ok()) return s;
    if (q.has_columnwise()) {
      // One half after the other; passes that serve both at once are the CUDA backend's.
      if (auto s = quantize(rowwise_half_of(q)); !s.ok()) return s;
      return quantize(columnwise_half_of(q));
    }
    const auto count = static_cast<size_t>(scale_count(q.granularity, q.input.rows, q.input.cols));
    // At least one entry: amax() refuses a null output, which an empty vector's data() may be.
    std::vector<float> amaxes(std::max<size_t>(count, 1));
    if (auto s = amax(amax_source_of(q), q.granularity, amaxes.data()); !s.ok()) return s;
    for (size_t i = 0; i < count; ++i) {
      q.scale_out[i] = scale_from_amax(amaxes[i], q.format, q.pow2_scale);
      if (q.amax_out != nullptr) q.amax_out[i] = amaxes[i];
      if (q.inv_scale_out != nullptr) q.inv_scale_out[i] = inverse_scale(q.scale_out[i]);
    }
    return cast(cast_step_of(q));
  }

  absl::Status dequantize(const DequantizeArgs& a) override {
    if (auto s = detail::check_dequantize(a, {}); !s.ok()) return s;
    for (int64_t r = 0; r < a.rows; ++r) {
      for (int64_t c = 0; c < a.cols; ++c) {
        const int64_t i = r * a.cols + c;
        const float scale = a.scale[scale_index(a.granularity, a.rows, a.cols, r, c)];
        store(a.out, a.out_dtype, i, dequantize_value(a.input[i], a.format, scale));
      }
    }
    return absl::OkStatus();
  }

  absl::Status convert(const void* in, DType in_dtype, void* out, DType out_dtype, int64_t n) override {
    if (auto s = detail::check_convert(in, in_dtype, out, out_dtype, n, {}); !s.ok()) return s;
    const MatrixRef x{in, in_dtype, 1, n};
    for (int64_t i = 0; i < n; ++i) store(out, out_dtype, i, load(x, i));
    return absl::OkStatus();
  }

  absl::Status scaled_gemm(const ScaledGemmArgs& a) override {
    if (auto s = detail::check_scaled_gemm(a, {}); !s.ok()) return s;
    // Block-scaled operands (validated: both, k a multiple of 128): each K block's sum
    // times its two factors. Otherwise one block spans all of K and the factors are the
    // operand's row (or tensor) factors.
    const bool blocks = is_block_granularity(a.a.granularity);
    // An empty K has no blocks (and block scale vectors no entries).
    const int64_t step = blocks ? kScaleBlock : std::max<int64_t>(a.k, 1);
    const int64_t k_end = blocks ? a.k : std::max<int64_t>(a.k, 1);
    for (int64_t m = 0; m < a.m; ++m) {
      for (int64_t n = 0; n < a.n; ++n) {
        double acc = 0.0;
        for (int64_t k0 = 0; k0 < k_end; k0 += step) {
          double block = 0.0;
          for (int64_t k = k0; k < std::min(a.k, k0 + step); ++k) {
            block += static_cast<double>(fp8_to_float(a.a.data[m * a.k + k], a.a.format)) *
                     static_cast<double>(fp8_to_float(a.b.data[n * a.k + k], a.b.format));
          }
          block *= static_cast<double>(a.a.inv_scale[scale_index(a.a.granularity, a.m, a.k, m, k0)]);
          block *= static_cast<double>(a.b.inv_scale[scale_index(a.b.granularity, a.n, a.k, n, k0)]);
          acc += block;
        }
        if (a.bias != nullptr) acc += a.bias[n];
        const int64_t i = m * a.n + n;
        if (a.accumulate) acc += load_out(a.out, a.out_dtype, i);
        if (a.addend != nullptr) acc += load_out(a.addend, a.out_dtype, i);
        store(a.out, a.out_dtype, i, static_cast<float>(acc));
      }
    }
    return absl::OkStatus();
  }

  absl::Status gemm(const GemmArgs& a) override {
    if (auto s = detail::check_gemm(a, {}); !s.ok()) return s;
    const MatrixRef A{a.a, a.in_dtype, 1, a.m * a.k};
    const MatrixRef B{a.b, a.in_dtype, 1, a.k * a.n};
    for (int64_t m = 0; m < a.m; ++m) {
      for (int64_t n = 0; n < a.n; ++n) {
        double acc = 0.0;
        for (int64_t k = 0; k < a.k; ++k) {
          const float x = load(A, a.trans_a ? k * a.m + m : m * a.k + k);
          const float y = load(B, a.trans_b ? n * a.k + k : k * a.n + n);
          acc += static_cast<double>(x) * static_cast<double>(y);
        }
        const int64_t i = m * a.n + n;
        double v = static_cast<double>(a.alpha) * acc;
        const void* c = a.addend != nullptr ? a.addend : a.out;
        if (a.beta != 0.0f) v += static_cast<double>(a.beta) * load_out(c, a.out_dtype, i);
        if (a.bias != nullptr) v += a.bias[n];
        store(a.out, a.out_dtype, i, static_cast<float>(v));
      }
    }
    return absl::OkStatus();
  }
};

}  // namespace

Backend& reference_backend() {
  static ReferenceBackend backend;
  return backend;
}

}  // namespace fp8
