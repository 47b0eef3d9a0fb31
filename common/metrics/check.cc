#include "common/metrics/check.h"

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <set>

#include "prometheus/check_names.h"

namespace fp8::metrics::internal {

void fatal(const std::string& message) {
  std::fprintf(stderr, "fp8 metrics: %s\n", message.c_str());
  std::fflush(stderr);
  std::abort();
}

void check_names(const std::string& metric, const std::vector<std::string>& label_names) {
  if (!prometheus::CheckMetricName(metric)) {
    fatal("invalid metric name '" + metric + "' (want [a-zA-Z_:][a-zA-Z0-9_:]*)");
  }
  std::set<std::string> seen;
  for (const std::string& label : label_names) {
    if (!prometheus::CheckLabelName(label)) {
      fatal("metric " + metric + ": invalid label name '" + label +
            "' (want [a-zA-Z_][a-zA-Z0-9_]*, not starting with __)");
    }
    if (label == "le") fatal("metric " + metric + ": label name 'le' is reserved for histogram buckets");
    if (!seen.insert(label).second) fatal("metric " + metric + ": label '" + label + "' declared twice");
  }
}

std::string number_text(double value) {
  char text[64];
  const std::to_chars_result r = std::to_chars(text, text + sizeof text, value);  // shortest round trip
  return std::string(text, r.ptr);
}

}  // namespace fp8::metrics::internal
