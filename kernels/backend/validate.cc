#include "backend/validate.h"

#include <algorithm>
#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"

namespace fp8::detail {
namespace {

absl::Status invalid(const char* what, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(what, ": ", why));
}

bool aligned(const void* p, int alignment) {
  return reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(alignment) == 0;
}

absl::Status check_pointer(const void* p, const char* what, const Requirements& req) {
  if (p == nullptr) return invalid(what, "is null");
  if (!aligned(p, req.pointer_alignment)) {
    return invalid(what, absl::StrCat("is not ", req.pointer_alignment, "-byte aligned"));
  }
  return absl::OkStatus();
}

absl::Status check_dims(int64_t rows, int64_t cols, const char* what) {
  if (rows < 0 || cols < 0) {
    return invalid(what, absl::StrCat("negative shape [", rows, ", ", cols, "]"));
  }
  if (cols != 0 && rows > std::numeric_limits<int64_t>::max() / 4 / cols) {
    return invalid(what, absl::StrCat("shape [", rows, ", ", cols, "] overflows"));
  }
  return absl::OkStatus();
}

bool is_high_precision(DType t) { return t == DType::kFloat32 || t == DType::kBFloat16; }

absl::Status check_granularity(Granularity g, const char* what) {
  if (g != Granularity::kTensorwise && g != Granularity::kRowwise && g != Granularity::kColumnwise &&
      !is_block_granularity(g)) {
    return invalid(what, "unknown granularity");
  }
  return absl::OkStatus();
}

// The fused transposed copy is scaled along the rows of the original; at a block
// granularity the transpose needs tiles of its own (fp8.h), so it is not made here.
absl::Status check_block_out_t(Granularity g, const uint8_t* out_t, const char* what) {
  if (is_block_granularity(g) && out_t != nullptr) {
    return invalid(what, absl::StrCat("is not made at ", granularity_name(g),
                                      " granularity: a transposed copy is scaled with 1x128 tiles of its own "
                                      "rows; quantize the transposed input instead"));
  }
  return absl::OkStatus();
}

absl::Status check_format(Format f, const char* what) {
  if (f != Format::kE4M3 && f != Format::kE5M2) return invalid(what, "unknown fp8 format");
  return absl::OkStatus();
}

absl::Status check_hp_dtype(DType t, const char* what) {
  if (!is_high_precision(t)) {
    return invalid(what, absl::StrCat("dtype ", dtype_name(t), " is not float32 or bfloat16"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status check_matrix(const MatrixRef& x, const char* what, const Requirements& req) {
  if (auto s = check_dims(x.rows, x.cols, what); !s.ok()) return s;
  if (x.size() == 0) return absl::OkStatus();
  return check_pointer(x.data, what, req);
}

absl::Status check_amax(const MatrixRef& x, Granularity g, const float* out, const Requirements& req) {
  if (auto s = check_matrix(x, "amax input", req); !s.ok()) return s;
  if (auto s = check_hp_dtype(x.dtype, "amax input"); !s.ok()) return s;
  if (auto s = check_granularity(g, "amax"); !s.ok()) return s;
  if (out == nullptr) return invalid("amax output", "is null");
  return absl::OkStatus();
}

absl::Status check_compute_scales(const float* amax, int64_t n, const float* scale) {
  if (n < 0) return invalid("compute_scales", absl::StrCat("negative count ", n));
  if (n > 0 && amax == nullptr) return invalid("compute_scales amax", "is null");
  if (n > 0 && scale == nullptr) return invalid("compute_scales scale", "is null");
  return absl::OkStatus();
}

absl::Status check_record_delayed(const DelayedRecordArgs& a) {
  const char* op = "record_delayed_amaxes";
  if (a.count < 0) return invalid(op, absl::StrCat("negative count ", a.count));
  if (a.history_len < 1) return invalid(op, absl::StrCat("history_len ", a.history_len, " (must be >= 1)"));
  if (a.inverse_offset < 1 || a.inverse_offset >= a.scale_stride) {
    return invalid(op, absl::StrCat("scale_stride ", a.scale_stride, " and inverse_offset ", a.inverse_offset,
                                    " (need 0 < inverse_offset < scale_stride)"));
  }
  if (a.count > 0 && (a.states == nullptr || a.amaxes == nullptr || a.scales == nullptr)) {
    return invalid(op, "states, amaxes and scales must all be given");
  }
  return absl::OkStatus();
}

absl::Status check_cast(const CastArgs& a, const Requirements& req) {
  if (auto s = check_matrix(a.input, "cast input", req); !s.ok()) return s;
  if (auto s = check_hp_dtype(a.input.dtype, "cast input"); !s.ok()) return s;
  if (auto s = check_format(a.format, "cast"); !s.ok()) return s;
  if (auto s = check_granularity(a.granularity, "cast"); !s.ok()) return s;
  if (auto s = check_block_out_t(a.granularity, a.out_t, "cast out_t"); !s.ok()) return s;
  if (a.out == nullptr && a.out_t == nullptr) return invalid("cast", "neither out nor out_t given");
  if (a.range_counts != nullptr) {
    // Written even for an empty input (zeros).
    if (auto s = check_pointer(a.range_counts, "cast range_counts", req); !s.ok()) return s;
  }
  if (a.input.size() == 0) return absl::OkStatus();
  if (a.scale == nullptr) return invalid("cast scale", "is null");
  if (a.out != nullptr) {
    if (auto s = check_pointer(a.out, "cast out", req); !s.ok()) return s;
  }
  if (a.out_t != nullptr) {
    if (auto s = check_pointer(a.out_t, "cast out_t", req); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status check_cast_range(const CastRangeArgs& a, const Requirements& req) {
  if (auto s = check_matrix(a.input, "count_cast_range input", req); !s.ok()) return s;
  if (auto s = check_hp_dtype(a.input.dtype, "count_cast_range input"); !s.ok()) return s;
  if (auto s = check_format(a.format, "count_cast_range"); !s.ok()) return s;
  if (auto s = check_granularity(a.granularity, "count_cast_range"); !s.ok()) return s;
  // The counts are written even for an empty input (zeros).
  if (auto s = check_pointer(a.counts, "count_cast_range counts", req); !s.ok()) return s;
  if (a.input.size() == 0) return absl::OkStatus();
  if (a.scale == nullptr) return invalid("count_cast_range scale", "is null");
  return absl::OkStatus();
}

absl::Status check_quantize(const QuantizeArgs& a, const Requirements& req) {
  if (auto s = check_matrix(a.input, "quantize input", req); !s.ok()) return s;
  if (auto s = check_hp_dtype(a.input.dtype, "quantize input"); !s.ok()) return s;
  if (auto s = check_format(a.format, "quantize"); !s.ok()) return s;
  if (auto s = check_granularity(a.granularity, "quantize"); !s.ok()) return s;
  if (auto s = check_block_out_t(a.granularity, a.out_t, "quantize out_t"); !s.ok()) return s;
  if (a.out == nullptr && a.out_t == nullptr) return invalid("quantize", "neither out nor out_t given");
  if (a.scale_out == nullptr) return invalid("quantize scale_out", "is null");
  if (a.range_counts != nullptr) {
    if (auto s = check_pointer(a.range_counts, "quantize range_counts", req); !s.ok()) return s;
  }
  if (a.row_amax != nullptr && a.granularity != Granularity::kTensorwise && a.granularity != Granularity::kRowwise) {
    return invalid("quantize row_amax", absl::StrCat("serves tensorwise and rowwise scaling only, not ",
                                                     granularity_name(a.granularity)));
  }
  if (a.has_columnwise()) {
    if (a.granularity != Granularity::kRowwise) {
      return invalid("quantize columnwise", "rides on a rowwise quantize only");
    }
    if (a.out_t != nullptr) {
      return invalid("quantize out_t", "must be null with columnwise outputs (columnwise.out_t is the transposed copy)");
    }
    if (a.columnwise.out_t == nullptr) return invalid("quantize columnwise.out_t", "is null");
    if (a.columnwise.scale_out == nullptr) return invalid("quantize columnwise.scale_out", "is null");
    if (a.columnwise.range_counts != nullptr) {
      if (auto s = check_pointer(a.columnwise.range_counts, "quantize columnwise.range_counts", req); !s.ok()) {
        return s;
      }
    }
  }
  if (a.input.size() == 0) return absl::OkStatus();
  if (a.row_amax != nullptr) {
    if (auto s = check_pointer(a.row_amax, "quantize row_amax", req); !s.ok()) return s;
  }
  if (a.out != nullptr) {
    if (auto s = check_pointer(a.out, "quantize out", req); !s.ok()) return s;
  }
  if (a.out_t != nullptr) {
    if (auto s = check_pointer(a.out_t, "quantize out_t", req); !s.ok()) return s;
  }
  if (a.columnwise.out_t != nullptr) {
    if (auto s = check_pointer(a.columnwise.out_t, "quantize columnwise.out_t", req); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status check_dequantize(const DequantizeArgs& a, const Requirements& req) {
  if (auto s = check_dims(a.rows, a.cols, "dequantize"); !s.ok()) return s;
  if (auto s = check_format(a.format, "dequantize"); !s.ok()) return s;
  if (auto s = check_granularity(a.granularity, "dequantize"); !s.ok()) return s;
  if (auto s = check_hp_dtype(a.out_dtype, "dequantize output"); !s.ok()) return s;
  if (a.rows * a.cols == 0) return absl::OkStatus();
  if (auto s = check_pointer(a.input, "dequantize input", req); !s.ok()) return s;
  if (a.scale == nullptr) return invalid("dequantize scale", "is null");
  return check_pointer(a.out, "dequantize out", req);
}

absl::Status check_convert(const void* in, DType in_dtype, const void* out, DType out_dtype,
                           int64_t n, const Requirements& req) {
  if (n < 0) return invalid("convert", absl::StrCat("negative count ", n));
  if (auto s = check_hp_dtype(in_dtype, "convert input"); !s.ok()) return s;
  if (auto s = check_hp_dtype(out_dtype, "convert output"); !s.ok()) return s;
  if (n == 0) return absl::OkStatus();
  if (auto s = check_pointer(in, "convert input", req); !s.ok()) return s;
  return check_pointer(out, "convert output", req);
}

absl::Status check_scaled_gemm(const ScaledGemmArgs& a, const Requirements& req) {
  if (a.m < 0 || a.n < 0 || a.k < 0) {
    return invalid("scaled_gemm", absl::StrCat("negative shape m=", a.m, " n=", a.n, " k=", a.k));
  }
  if (auto s = check_dims(a.m, a.k, "scaled_gemm A"); !s.ok()) return s;
  if (auto s = check_dims(a.n, a.k, "scaled_gemm B"); !s.ok()) return s;
  if (auto s = check_dims(a.m, a.n, "scaled_gemm out"); !s.ok()) return s;
  if (auto s = check_hp_dtype(a.out_dtype, "scaled_gemm output"); !s.ok()) return s;
  if (auto s = check_format(a.a.format, "scaled_gemm A"); !s.ok()) return s;
  if (auto s = check_format(a.b.format, "scaled_gemm B"); !s.ok()) return s;
  if (a.a.format == Format::kE5M2 && a.b.format == Format::kE5M2) {
    return invalid("scaled_gemm", "e5m2 x e5m2 is not supported; one operand must be e4m3");
  }
  for (const auto* op : {&a.a, &a.b}) {
    const char* name = op == &a.a ? "scaled_gemm A" : "scaled_gemm B";
    if (op->granularity == Granularity::kColumnwise) {
      return invalid(name, "granularity must be tensorwise, rowwise or a block granularity (scales along the rows "
                           "of the K-contiguous operand)");
    }
    if (auto s = check_granularity(op->granularity, name); !s.ok()) return s;
  }
  // Block scaling as cuBLASLt takes it on Hopper (fp8.h): both operands, not both 128x128,
  // and whole 128-wide K blocks.
  const bool a_block = is_block_granularity(a.a.granularity), b_block = is_block_granularity(a.b.granularity);
  if (a_block || b_block) {
    if (!a_block || !b_block) {
      return invalid("scaled_gemm", absl::StrCat("A is ", granularity_name(a.a.granularity), " and B is ",
                                                 granularity_name(a.b.granularity),
                                                 "; a block-scaled operand needs a block-scaled partner"));
    }
    if (a.a.granularity == Granularity::kBlock128x128 && a.b.granularity == Granularity::kBlock128x128) {
      return invalid("scaled_gemm", "block128x128 x block128x128 is not supported; one operand must be block1x128");
    }
    if (a.k % kScaleBlock != 0) {
      return invalid("scaled_gemm", absl::StrCat("block-scaled operands with m=", a.m, " n=", a.n, " k=", a.k,
                                                 ": k must be a multiple of ", kScaleBlock,
                                                 " (both operands' scales step along K by 128)"));
    }
  }
  if (req.fp8_gemm_multiple > 1) {
    if (a.k % req.fp8_gemm_multiple != 0) {
      return invalid("scaled_gemm", absl::StrCat("k=", a.k, " is not a multiple of ", req.fp8_gemm_multiple,
                                                 " (cuBLASLt fp8 needs K-contiguous operands with 16-byte rows)"));
    }
    if (a.n % req.fp8_gemm_multiple != 0) {
      return invalid("scaled_gemm", absl::StrCat("n=", a.n, " is not a multiple of ", req.fp8_gemm_multiple,
                                                 " (cuBLASLt fp8 needs 16-aligned leading dimensions)"));
    }
  }
  if (a.accumulate && a.addend != nullptr) {
    return invalid("scaled_gemm",
                   "accumulate and addend are both set; an addend equal to out is what accumulate means");
  }
  if (a.m == 0 || a.n == 0) return absl::OkStatus();
  if (a.addend != nullptr) {
    if (auto s = check_pointer(a.addend, "scaled_gemm addend", req); !s.ok()) return s;
  }
  if (a.k > 0) {
    if (auto s = check_pointer(a.a.data, "scaled_gemm A", req); !s.ok()) return s;
    if (auto s = check_pointer(a.b.data, "scaled_gemm B", req); !s.ok()) return s;
  }
  // cuBLASLt also wants its scale pointers aligned (it answers NOT_SUPPORTED otherwise).
  if (auto s = check_pointer(a.a.inv_scale, "scaled_gemm A inv_scale", req); !s.ok()) return s;
  if (auto s = check_pointer(a.b.inv_scale, "scaled_gemm B inv_scale", req); !s.ok()) return s;
  if (auto s = check_pointer(a.out, "scaled_gemm out", req); !s.ok()) return s;
  return absl::OkStatus();
}

absl::Status check_gemm(const GemmArgs& a, const Requirements& req) {
  if (a.m < 0 || a.n < 0 || a.k < 0) {
    return invalid("gemm", absl::StrCat("negative shape m=", a.m, " n=", a.n, " k=", a.k));
  }
  if (auto s = check_dims(a.m, a.k, "gemm A"); !s.ok()) return s;
  if (auto s = check_dims(a.k, a.n, "gemm B"); !s.ok()) return s;
  if (auto s = check_dims(a.m, a.n, "gemm out"); !s.ok()) return s;
  if (auto s = check_hp_dtype(a.in_dtype, "gemm input"); !s.ok()) return s;
  if (auto s = check_hp_dtype(a.out_dtype, "gemm output"); !s.ok()) return s;
  if (a.m == 0 || a.n == 0) return absl::OkStatus();
  if (a.k > 0) {
    if (auto s = check_pointer(a.a, "gemm A", req); !s.ok()) return s;
    if (auto s = check_pointer(a.b, "gemm B", req); !s.ok()) return s;
  }
  if (a.addend != nullptr) {
    if (auto s = check_pointer(a.addend, "gemm addend", req); !s.ok()) return s;
  }
  return check_pointer(a.out, "gemm out", req);
}

absl::Status check_copy_rows(const void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
                             size_t rows) {
  if (dst_pitch < row_bytes || src_pitch < row_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("copy_rows: rows of ", row_bytes, " bytes at pitches of ",
                                                   dst_pitch, " (dst) and ", src_pitch,
                                                   " (src) bytes; a pitch must be at least the row"));
  }
  if (rows == 0 || row_bytes == 0) return absl::OkStatus();
  if (dst == nullptr || src == nullptr) return absl::InvalidArgumentError("copy_rows: null pointer");
  size_t span = 0;
  if (__builtin_mul_overflow(rows - 1, std::max(dst_pitch, src_pitch), &span) ||
      __builtin_add_overflow(span, row_bytes, &span)) {
    return absl::InvalidArgumentError(absl::StrCat("copy_rows: ", rows, " rows at a pitch of ",
                                                   std::max(dst_pitch, src_pitch), " bytes overflow"));
  }
  return absl::OkStatus();
}

}  // namespace fp8::detail
