#include "common/metrics/names.h"

#include <set>

#include "common/metrics/check.h"

namespace fp8::metrics {
namespace {

bool IsAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

}  // namespace

bool IsValidMetricName(std::string_view name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    if (!(IsAlpha(c) || c == ':' || (i > 0 && IsDigit(c)))) return false;
  }
  return true;
}

bool IsValidLabelName(std::string_view name) {
  if (name.empty() || name.substr(0, 2) == "__") return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    if (!(IsAlpha(c) || (i > 0 && IsDigit(c)))) return false;
  }
  return true;
}

namespace internal {

void CheckNames(const std::string& metric, const std::vector<std::string>& label_names) {
  if (!IsValidMetricName(metric)) {
    Fatal("invalid metric name '" + metric + "' (want [a-zA-Z_:][a-zA-Z0-9_:]*)");
  }
  std::set<std::string> seen;
  for (const std::string& label : label_names) {
    if (!IsValidLabelName(label)) {
      Fatal("metric " + metric + ": invalid label name '" + label +
            "' (want [a-zA-Z_][a-zA-Z0-9_]*, not starting with __)");
    }
    if (label == "le") {
      Fatal("metric " + metric + ": label name 'le' is reserved for histogram buckets");
    }
    if (!seen.insert(label).second) {
      Fatal("metric " + metric + ": label '" + label + "' declared twice");
    }
  }
}

}  // namespace internal
}  // namespace fp8::metrics
