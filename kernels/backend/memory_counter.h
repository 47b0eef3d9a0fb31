// Live and peak bytes of one backend's allocations, updated lock-free from any thread
// (tensors are freed on communication threads too).
#pragma once

#include <atomic>
#include <cstdint>

namespace fp8::detail {

class MemoryCounter {
 public:
  void on_allocate(int64_t bytes) {
    const int64_t now = allocated_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    int64_t peak = peak_.load(std::memory_order_relaxed);
    while (now > peak && !peak_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
    }
  }
  void on_deallocate(int64_t bytes) { allocated_.fetch_sub(bytes, std::memory_order_relaxed); }
  void reset_peak() { peak_.store(allocated_.load(std::memory_order_relaxed), std::memory_order_relaxed); }

  int64_t allocated() const { return allocated_.load(std::memory_order_relaxed); }
  int64_t peak() const { return peak_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> allocated_{0};
  std::atomic<int64_t> peak_{0};
};

}  // namespace fp8::detail
