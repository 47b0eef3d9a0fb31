#include "common/metrics/names.h"

#include <set>

#include "common/metrics/check.h"

namespace fp8::metrics {
namespace {

bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

}  // namespace

bool is_valid_metric_name(std::string_view name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    if (!(is_alpha(c) || c == ':' || (i > 0 && is_digit(c)))) return false;
  }
  return true;
}

bool is_valid_label_name(std::string_view name) {
  if (name.empty() || name.substr(0, 2) == "__") return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    if (!(is_alpha(c) || (i > 0 && is_digit(c)))) return false;
  }
  return true;
}

namespace internal {

void check_names(const std::string& metric, const std::vector<std::string>& label_names) {
  if (!is_valid_metric_name(metric)) {
    fatal("invalid metric name '" + metric + "' (want [a-zA-Z_:][a-zA-Z0-9_:]*)");
  }
  std::set<std::string> seen;
  for (const std::string& label : label_names) {
    if (!is_valid_label_name(label)) {
      fatal("metric " + metric + ": invalid label name '" + label +
            "' (want [a-zA-Z_][a-zA-Z0-9_]*, not starting with __)");
    }
    if (label == "le") {
      fatal("metric " + metric + ": label name 'le' is reserved for histogram buckets");
    }
    if (!seen.insert(label).second) {
      fatal("metric " + metric + ": label '" + label + "' declared twice");
    }
  }
}

}  // namespace internal
}  // namespace fp8::metrics
