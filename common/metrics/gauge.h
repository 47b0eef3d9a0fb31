// A value that goes up and down (queue depth, loss, memory): prometheus-cpp's Gauge
// (lock-free, like Counter).
#pragma once

#include "prometheus/client_metric.h"
#include "prometheus/gauge.h"

namespace fp8::metrics {

class Gauge {
 public:
  Gauge() = default;
  Gauge(const Gauge&) = delete;
  Gauge& operator=(const Gauge&) = delete;

  void set(double value) { gauge_.Set(value); }
  void inc(double amount = 1) { gauge_.Increment(amount); }
  void dec(double amount = 1) { gauge_.Decrement(amount); }
  double value() const { return gauge_.Value(); }

  prometheus::ClientMetric collect() const { return gauge_.Collect(); }

 private:
  prometheus::Gauge gauge_;
};

}  // namespace fp8::metrics
