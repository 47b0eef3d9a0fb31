#include "worker/engine/float8/transpose_elements.h"

namespace fp8::engine {

absl::Status transpose_elements(Backend& backend, const void* src, int64_t rows, int64_t cols, size_t element_bytes,
                                uint8_t* planes, uint8_t* planes_t, void* dst) {
  const int64_t n = rows * cols;
  const auto es = static_cast<int64_t>(element_bytes);
  if (auto s = backend.transpose_bytes(static_cast<const uint8_t*>(src), n, es, planes); !s.ok()) return s;
  for (int64_t b = 0; b < es; ++b) {
    if (auto s = backend.transpose_bytes(planes + b * n, rows, cols, planes_t + b * n); !s.ok()) return s;
  }
  return backend.transpose_bytes(planes_t, es, n, static_cast<uint8_t*>(dst));
}

}  // namespace fp8::engine
