#include "common/metrics/counter.h"

namespace fp8::metrics {

void Counter::inc(double amount) {
  if (!(amount >= 0)) return;  // also false for NaN, which prometheus-cpp would add
  counter_.Increment(amount);
}

void Counter::set_total(double total) {
  const double delta = total - counter_.Value();
  if (delta > 0) counter_.Increment(delta);
}

}  // namespace fp8::metrics
