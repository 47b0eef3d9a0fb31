// A monotonically increasing value (requests served, bytes moved). Lock-free: inc() is an
// atomic add, so many threads may count into the same child.
#pragma once

#include <atomic>
#include <string>
#include <string_view>

namespace fp8::metrics {

class Counter {
 public:
  Counter() = default;
  Counter(const Counter&) = delete;
  Counter& operator=(const Counter&) = delete;

  // Adds `amount`. A counter never goes down: negative and NaN amounts are ignored
  // (rate() would read a decrease as a restart of the process).
  void inc(double amount = 1);
  double value() const { return value_.load(std::memory_order_relaxed); }

  // Sets the total from an absolute reading (CPU seconds from /proc). Only for collectors
  // that mirror a counter kept elsewhere; code that counts events uses inc().
  void set_total(double total) { value_.store(total, std::memory_order_relaxed); }

  // Exposition: `<name>{<labels>} <value>`.
  void append_samples(std::string_view name, std::string_view labels, std::string& out) const;

 private:
  std::atomic<double> value_{0};
};

}  // namespace fp8::metrics
