// Argument checks shared by every backend, so that each rejects the same bad input with
// the same message before touching memory. A backend with stricter needs (cuBLASLt's
// alignment and K % 16) passes its `Requirements`.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "fp8/fp8.h"

namespace fp8::detail {

struct Requirements {
  // Byte alignment every matrix pointer must have (1 = any).
  int pointer_alignment = 1;
  // fp8 GEMMs: k and n must be multiples of this (cuBLASLt fp8 needs 16).
  int64_t fp8_gemm_multiple = 1;
};

absl::Status check_matrix(const MatrixRef& x, const char* what, const Requirements& req);
absl::Status check_amax(const MatrixRef& x, Granularity g, const float* out, const Requirements& req);
absl::Status check_compute_scales(const float* amax, int64_t n, const float* scale);
absl::Status check_cast(const CastArgs& a, const Requirements& req);
absl::Status check_record_delayed(const DelayedRecordArgs& a);
absl::Status check_cast_range(const CastRangeArgs& a, const Requirements& req);
absl::Status check_quantize(const QuantizeArgs& a, const Requirements& req);
absl::Status check_dequantize(const DequantizeArgs& a, const Requirements& req);
absl::Status check_convert(const void* in, DType in_dtype, const void* out, DType out_dtype,
                           int64_t n, const Requirements& req);
absl::Status check_scaled_gemm(const ScaledGemmArgs& a, const Requirements& req);
// Backend::copy_rows: pitches at least the row, no null pointer where bytes move.
absl::Status check_copy_rows(const void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
                             size_t rows);
absl::Status check_gemm(const GemmArgs& a, const Requirements& req);

}  // namespace fp8::detail
