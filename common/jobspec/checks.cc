#include "common/jobspec/checks.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/jobspec/scalars.h"

namespace fp8::jobspec {

void Checks::add(std::string field, std::string message, std::vector<std::string> anchors) {
  issues_.push_back({std::move(field), std::move(message), std::nullopt, std::move(anchors)});
}

bool Checks::required(bool present, const std::string& field) {
  if (!present) add(field, "is required");
  return present;
}

bool Checks::int_in_range(const std::string& field, int64_t value, int64_t min, int64_t max) {
  if (value >= min && value <= max) return true;
  if (value < min && min == 1) {
    add(field, absl::StrCat("must be > 0, got ", value));
  } else if (value < min) {
    add(field, absl::StrCat("must be at least ", min, ", got ", value));
  } else {
    add(field, absl::StrCat("must be at most ", max, ", got ", value));
  }
  return false;
}

bool Checks::positive(const std::string& field, double value) {
  // Written so that NaN (possible in a spec built in code) fails too.
  if (value > 0 && std::isfinite(value)) return true;
  add(field, absl::StrCat("must be > 0, got ", format_number(value)));
  return false;
}

bool Checks::non_negative(const std::string& field, double value) {
  if (value >= 0 && std::isfinite(value)) return true;
  add(field, absl::StrCat("must be >= 0, got ", format_number(value)));
  return false;
}

bool Checks::real_in_range(const std::string& field, double value, double min, double max, bool max_open) {
  bool below_max = max_open ? value < max : value <= max;
  if (value >= min && below_max) return true;
  add(field, absl::StrCat("must be in [", format_number(min), ", ", format_number(max), max_open ? ")" : "]",
                          ", got ", format_number(value)));
  return false;
}

}  // namespace fp8::jobspec
