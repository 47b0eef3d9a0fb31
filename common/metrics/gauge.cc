#include "common/metrics/gauge.h"

#include "common/metrics/text_format.h"

namespace fp8::metrics {

void Gauge::append_samples(std::string_view name, std::string_view labels,
                          std::string& out) const {
  append_sample(out, name, "", labels, "", value());
}

}  // namespace fp8::metrics
