#include "common/jobspec/checks.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/jobspec/scalars.h"

namespace fp8::jobspec {

void Checks::Add(std::string field, std::string message, std::vector<std::string> anchors) {
  issues_.push_back({std::move(field), std::move(message), std::nullopt, std::move(anchors)});
}

bool Checks::Required(bool present, const std::string& field) {
  if (!present) Add(field, "is required");
  return present;
}

bool Checks::IntInRange(const std::string& field, int64_t value, int64_t min, int64_t max) {
  if (value >= min && value <= max) return true;
  if (value < min && min == 1) {
    Add(field, absl::StrCat("must be > 0, got ", value));
  } else if (value < min) {
    Add(field, absl::StrCat("must be at least ", min, ", got ", value));
  } else {
    Add(field, absl::StrCat("must be at most ", max, ", got ", value));
  }
  return false;
}

bool Checks::Positive(const std::string& field, double value) {
  // Written so that NaN (possible in a spec built in code) fails too.
  if (value > 0 && std::isfinite(value)) return true;
  Add(field, absl::StrCat("must be > 0, got ", FormatNumber(value)));
  return false;
}

bool Checks::NonNegative(const std::string& field, double value) {
  if (value >= 0 && std::isfinite(value)) return true;
  Add(field, absl::StrCat("must be >= 0, got ", FormatNumber(value)));
  return false;
}

bool Checks::RealInRange(const std::string& field, double value, double min, double max, bool max_open) {
  bool below_max = max_open ? value < max : value <= max;
  if (value >= min && below_max) return true;
  Add(field, absl::StrCat("must be in [", FormatNumber(min), ", ", FormatNumber(max), max_open ? ")" : "]",
                          ", got ", FormatNumber(value)));
  return false;
}

}  // namespace fp8::jobspec
