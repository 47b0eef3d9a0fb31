#include "common/metrics/histogram.h"

#include <cmath>

namespace fp8::metrics {

void Histogram::observe(double value) {
  if (std::isnan(value)) return;
  histogram_.Observe(value);
}

Histogram::Snapshot Histogram::snapshot() const {
  const prometheus::ClientMetric m = histogram_.Collect();
  Snapshot s;
  for (const prometheus::ClientMetric::Bucket& b : m.histogram.bucket) s.cumulative.push_back(b.cumulative_count);
  s.sum = m.histogram.sample_sum;
  s.count = m.histogram.sample_count;
  return s;
}

}  // namespace fp8::metrics
