#include "common/metrics/buckets.h"

#include <cmath>

#include "common/metrics/check.h"

namespace fp8::metrics {

std::vector<double> exponential_buckets(double start, double factor, int count) {
  if (!(start > 0) || !(factor > 1) || count < 1) {
    internal::fatal("exponential_buckets(" + internal::number_text(start) + ", " + internal::number_text(factor) +
                    ", " + std::to_string(count) +
                    "): want start > 0, factor > 1, count >= 1");
  }
  std::vector<double> bounds;
  bounds.reserve(static_cast<size_t>(count));
  double bound = start;
  for (int i = 0; i < count; ++i) {
    bounds.push_back(bound);
    bound *= factor;
  }
  return bounds;
}

std::vector<double> default_latency_buckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
}

namespace internal {

std::vector<double> checked_buckets(const std::string& metric, std::vector<double> bounds) {
  if (!bounds.empty() && bounds.back() == INFINITY) bounds.pop_back();
  for (size_t i = 0; i < bounds.size(); ++i) {
    if (!std::isfinite(bounds[i])) {
      fatal("histogram " + metric + ": bucket bound " + internal::number_text(bounds[i]) +
            " is not finite (+Inf is implied and may only come last)");
    }
    if (i > 0 && !(bounds[i] > bounds[i - 1])) {
      fatal("histogram " + metric + ": bucket bounds must increase strictly, but " +
            internal::number_text(bounds[i]) + " follows " + internal::number_text(bounds[i - 1]));
    }
  }
  return bounds;
}

}  // namespace internal
}  // namespace fp8::metrics
