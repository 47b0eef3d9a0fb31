// Fatal errors for programming mistakes in how the metrics are declared or used (a bad
// name, a family registered twice with other labels, a wrong number of label values).
// These are bugs in the daemon, not conditions to handle at run time, so they abort at
// once with a message naming the metric, rather than silently exporting wrong series.
#pragma once

#include <string>
#include <vector>

namespace fp8::metrics::internal {

// Prints "fp8 metrics: <message>" to stderr and aborts.
[[noreturn]] void fatal(const std::string& message);

// Aborts unless the metric name and every label name are valid in the Prometheus data
// model (prometheus-cpp's checks) and the label names are distinct. `le` is the bucket
// label of histograms, so no family may declare it (for a histogram it would collide with
// the buckets; for others it would confuse histogram_quantile()).
void check_names(const std::string& metric, const std::vector<std::string>& label_names);

// A bound or an argument as messages quote it ("0.005", "1e-07").
std::string number_text(double value);

}  // namespace fp8::metrics::internal
