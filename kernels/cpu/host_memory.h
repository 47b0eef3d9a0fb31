// What the two host backends (fast CPU and reference) share: plain aligned host
// allocations, counted, memcpy, and the per-cast bookkeeping of delayed scaling.
#pragma once

#include "backend/memory_counter.h"
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
  absl::Status record_delayed_amaxes(const DelayedRecordArgs& args) override;

 private:
  detail::MemoryCounter counter_;
};

}  // namespace fp8::cpu
