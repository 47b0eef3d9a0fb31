// A value that goes up and down (queue depth, loss, memory). Lock-free, like Counter.
#pragma once

#include <atomic>
#include <string>
#include <string_view>

namespace fp8::metrics {

class Gauge {
 public:
  Gauge() = default;
  Gauge(const Gauge&) = delete;
  Gauge& operator=(const Gauge&) = delete;

  void set(double value) { value_.store(value, std::memory_order_relaxed); }
  void inc(double amount = 1) { value_.fetch_add(amount, std::memory_order_relaxed); }
  void dec(double amount = 1) { value_.fetch_sub(amount, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

  // Exposition: `<name>{<labels>} <value>`.
  void append_samples(std::string_view name, std::string_view labels, std::string& out) const;

 private:
  std::atomic<double> value_{0};
};

}  // namespace fp8::metrics
