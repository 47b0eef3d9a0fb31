// Validation of metric and label names, per the Prometheus data model.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace fp8::metrics {

// [a-zA-Z_:][a-zA-Z0-9_:]*
bool is_valid_metric_name(std::string_view name);
// [a-zA-Z_][a-zA-Z0-9_]* and not starting with "__" (reserved for Prometheus itself).
// Colons are allowed in metric names only (they mark recording rules).
bool is_valid_label_name(std::string_view name);

namespace internal {

// Abort (Fatal) unless the metric name and every label name are valid and the label
// names are distinct. `le` is the bucket label of histograms, so no family may declare
// it (for a histogram it would collide with the buckets; for others it would confuse
// histogram_quantile()).
void check_names(const std::string& metric, const std::vector<std::string>& label_names);

}  // namespace internal
}  // namespace fp8::metrics
