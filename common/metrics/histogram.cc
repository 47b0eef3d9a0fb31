#include "common/metrics/histogram.h"

#include <algorithm>
#include <cmath>

#include "common/metrics/text_format.h"

namespace fp8::metrics {

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  if (std::isnan(value)) return;
  const size_t bucket = static_cast<size_t>(
      std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin());
  std::lock_guard<std::mutex> lock(mu_);
  ++counts_[bucket];
  sum_ += value;
  ++count_;
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot s;
  std::lock_guard<std::mutex> lock(mu_);
  s.cumulative.reserve(counts_.size());
  uint64_t running = 0;
  for (const uint64_t c : counts_) {
    running += c;
    s.cumulative.push_back(running);
  }
  s.sum = sum_;
  s.count = count_;
  return s;
}

void Histogram::append_samples(std::string_view name, std::string_view labels,
                              std::string& out) const {
  const Snapshot s = snapshot();
  for (size_t i = 0; i < s.cumulative.size(); ++i) {
    const std::string le = i < bounds_.size() ? format_value(bounds_[i]) : "+Inf";
    append_sample(out, name, "_bucket", labels, "le=\"" + le + "\"",
                 static_cast<double>(s.cumulative[i]));
  }
  append_sample(out, name, "_sum", labels, "", s.sum);
  append_sample(out, name, "_count", labels, "", static_cast<double>(s.count));
}

}  // namespace fp8::metrics
