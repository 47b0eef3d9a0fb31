// The default Backend::copy_rows(): one copy() a row, for backends that have nothing
// better (the host ones, whose copy() is a memcpy).
#include <cstdint>

#include "backend/validate.h"
#include "fp8/fp8.h"

namespace fp8 {

absl::Status Backend::copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
                                size_t rows) {
  if (absl::Status s = detail::check_copy_rows(dst, dst_pitch, src, src_pitch, row_bytes, rows); !s.ok()) return s;
  for (size_t i = 0; i < rows && row_bytes > 0; ++i) {
    if (absl::Status s = copy(static_cast<uint8_t*>(dst) + i * dst_pitch,
                              static_cast<const uint8_t*>(src) + i * src_pitch, row_bytes);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace fp8
