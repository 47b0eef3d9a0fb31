// Memory operations shared by the two host backends (fast CPU and reference): plain
// aligned host allocations, counted, and memcpy.
#pragma once

#include "common/memory_counter.h"
#include "fp8/fp8.h"

namespace fp8::cpu {

class HostMemoryBackend : public Backend {
 public:
  absl::StatusOr<void*> allocate(size_t bytes) override;
  void deallocate(void* p) override;
  MemoryStats memory_stats() const override;
  void reset_peak_memory() override { counter_.reset_peak(); }
  absl::Status copy_from_host(void* dst, const void* src, size_t bytes) override;
  absl::Status copy_to_host(void* dst, const void* src, size_t bytes) override;
  absl::Status copy(void* dst, const void* src, size_t bytes) override;
  absl::Status fill_zero(void* dst, size_t bytes) override;
  absl::Status transpose_bytes(const uint8_t* src, int64_t rows, int64_t cols, uint8_t* dst) override;
  absl::Status synchronize() override { return absl::OkStatus(); }

 private:
  detail::MemoryCounter counter_;
};

}  // namespace fp8::cpu
