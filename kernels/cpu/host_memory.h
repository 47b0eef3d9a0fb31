// Memory operations shared by the two host backends (fast CPU and reference): plain
// aligned host allocations and memcpy.
#pragma once

#include "fp8/fp8.h"

namespace fp8::cpu {

class HostMemoryBackend : public Backend {
 public:
  absl::StatusOr<void*> allocate(size_t bytes) override;
  void deallocate(void* p) override;
  absl::Status copy_from_host(void* dst, const void* src, size_t bytes) override;
  absl::Status copy_to_host(void* dst, const void* src, size_t bytes) override;
  absl::Status copy(void* dst, const void* src, size_t bytes) override;
  absl::Status fill_zero(void* dst, size_t bytes) override;
  absl::Status transpose_bytes(const uint8_t* src, int64_t rows, int64_t cols, uint8_t* dst) override;
  absl::Status synchronize() override { return absl::OkStatus(); }
};

}  // namespace fp8::cpu
