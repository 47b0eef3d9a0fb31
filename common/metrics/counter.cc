#include "common/metrics/counter.h"

#include "common/metrics/text_format.h"

namespace fp8::metrics {

void Counter::inc(double amount) {
  if (!(amount >= 0)) return;  // also false for NaN
  value_.fetch_add(amount, std::memory_order_relaxed);
}

void Counter::append_samples(std::string_view name, std::string_view labels,
                            std::string& out) const {
  append_sample(out, name, "", labels, "", value());
}

}  // namespace fp8::metrics
