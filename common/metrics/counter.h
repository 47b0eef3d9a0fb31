// A monotonically increasing value (requests served, bytes moved): prometheus-cpp's
// Counter (lock-free), so many threads may count into the same child.
#pragma once

#include "prometheus/client_metric.h"
#include "prometheus/counter.h"

namespace fp8::metrics {

class Counter {
 public:
  Counter() = default;
  Counter(const Counter&) = delete;
  Counter& operator=(const Counter&) = delete;

  // Adds `amount`. A counter never goes down: negative and NaN amounts are ignored
  // (rate() would read a decrease as a restart of the process).
  void inc(double amount = 1);
  double value() const { return counter_.Value(); }

  // Raises the total to an absolute reading (CPU seconds from /proc, attempts so far).
  // Only for collectors that mirror a counter kept elsewhere; code that counts events
  // uses inc(). A reading below the total is ignored, as a decrease would be.
  void set_total(double total);

  prometheus::ClientMetric collect() const { return counter_.Collect(); }

 private:
  prometheus::Counter counter_;
};

}  // namespace fp8::metrics
