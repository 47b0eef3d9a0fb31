// A backend that hands every call to another one: tests derive from it to change one or two
// behaviours of a real backend (say it is a GPU, count host waits, hold a fence) and keep
// the rest as they are.
#pragma once

#include <memory>
#include <string>

#include "fp8/fp8.h"

namespace fp8::testing {

class ForwardingBackend : public Backend {
 public:
  explicit ForwardingBackend(Backend& inner) : inner_(inner) {}

  std::string name() const override { return inner_.name(); }
  bool is_cuda() const override { return inner_.is_cuda(); }
  absl::StatusOr<void*> allocate(size_t bytes) override { return inner_.allocate(bytes); }
  void deallocate(void* p) override { inner_.deallocate(p); }
  MemoryStats memory_stats() const override { return inner_.memory_stats(); }
  void reset_peak_memory() override { inner_.reset_peak_memory(); }
  absl::Status copy_from_host(void* d, const void* s, size_t n) override { return inner_.copy_from_host(d, s, n); }
  absl::Status copy_to_host(void* d, const void* s, size_t n) override { return inner_.copy_to_host(d, s, n); }
  absl::Status queue_copy_from_host(void* d, const void* s, size_t n) override {
    return inner_.queue_copy_from_host(d, s, n);
  }
  absl::Status copy(void* d, const void* s, size_t n) override { return inner_.copy(d, s, n); }
  absl::Status copy_rows(void* d, size_t dp, const void* s, size_t sp, size_t w, size_t rows) override {
    return inner_.copy_rows(d, dp, s, sp, w, rows);
  }
  absl::Status fill_zero(void* d, size_t n) override { return inner_.fill_zero(d, n); }
  absl::Status transpose_bytes(const uint8_t* s, int64_t r, int64_t c, uint8_t* d) override {
    return inner_.transpose_bytes(s, r, c, d);
  }
  absl::Status synchronize() override { return inner_.synchronize(); }
  absl::StatusOr<std::unique_ptr<Fence>> fence() override { return inner_.fence(); }
  absl::StatusOr<std::unique_ptr<QueuedRead>> queue_read(const void* src, size_t bytes) override {
    return inner_.queue_read(src, bytes);
  }
  absl::Status amax(const MatrixRef& x, Granularity g, float* out) override { return inner_.amax(x, g, out); }
  absl::Status compute_scales(const float* a, int64_t n, Format f, bool pow2, float* s, float* inv) override {
    return inner_.compute_scales(a, n, f, pow2, s, inv);
  }
  absl::Status cast(const CastArgs& a) override { return inner_.cast(a); }
  absl::Status record_delayed_amaxes(const DelayedRecordArgs& a) override { return inner_.record_delayed_amaxes(a); }
  absl::Status count_cast_range(const CastRangeArgs& a) override { return inner_.count_cast_range(a); }
  absl::Status quantize(const QuantizeArgs& a) override { return inner_.quantize(a); }
  absl::Status dequantize(const DequantizeArgs& a) override { return inner_.dequantize(a); }
  absl::Status convert(const void* in, DType it, void* out, DType ot, int64_t n) override {
    return inner_.convert(in, it, out, ot, n);
  }
  absl::Status scaled_gemm(const ScaledGemmArgs& a) override { return inner_.scaled_gemm(a); }
  absl::Status gemm(const GemmArgs& a) override { return inner_.gemm(a); }

 protected:
  Backend& inner() { return inner_; }

 private:
  Backend& inner_;
};

}  // namespace fp8::testing
