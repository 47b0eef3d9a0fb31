// A distribution of observed values (latencies) in cumulative buckets, with their sum and
// count. A mutex per child keeps buckets, sum and count consistent with each other in
// every scrape (separate atomics could expose a count that disagrees with +Inf).
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace fp8::metrics {

class Histogram {
 public:
  // `bounds`: finite, strictly increasing upper bounds (see buckets.h); +Inf is implied.
  explicit Histogram(std::vector<double> bounds);
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
  const std::vector<double>& bounds() const { return bounds_; }

  // Exposition: `<name>_bucket{<labels>,le="..."}` per bound and +Inf, `_sum`, `_count`.
  void append_samples(std::string_view name, std::string_view labels, std::string& out) const;

 private:
  const std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; bounds_.size() + 1 (+Inf)
  double sum_ = 0;
  uint64_t count_ = 0;
};

}  // namespace fp8::metrics
