// A distribution of observed values (latencies) in cumulative buckets, with their sum and
// count: prometheus-cpp's Histogram, whose buckets, sum and count agree in every scrape.
#pragma once

#include <cstdint>
#include <vector>

#include "prometheus/client_metric.h"
#include "prometheus/histogram.h"

namespace fp8::metrics {

class Histogram {
 public:
  // `bounds`: finite, strictly increasing upper bounds (see buckets.h); +Inf is implied.
  explicit Histogram(const std::vector<double>& bounds) : histogram_(bounds) {}
  Histogram(const Histogram&) = delete;
  Histogram& operator=(const Histogram&) = delete;

  // Counts `value` in the first bucket whose bound is >= value (le means "less or equal").
  // NaN is ignored: it has no bucket and would turn the sum into NaN for good.
  void observe(double value);

  struct Snapshot {
    std::vector<uint64_t> cumulative;  // one per bound, then the +Inf bucket (== count)
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot snapshot() const;

  prometheus::ClientMetric collect() const { return histogram_.Collect(); }

 private:
  prometheus::Histogram histogram_;
};

}  // namespace fp8::metrics
