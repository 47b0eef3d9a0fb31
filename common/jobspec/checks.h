// Small helpers the validators share, so that every range error reads the same way:
// "must be > 0, got -5", "must be in [0, 0.5], got 0.7".
#pragma once

#include <cstdint>
#include <string>

#include "common/jobspec/issues.h"

namespace fp8::jobspec {

class Checks {
 public:
  explicit Checks(Issues& issues) : issues_(issues) {}

  void add(std::string field, std::string message, std::vector<std::string> anchors = {});

  // False (and an issue "is required") when a required field is missing.
  bool required(bool present, const std::string& field);

  // Each returns whether `value` passed, adding an issue when it did not.
  bool int_in_range(const std::string& field, int64_t value, int64_t min, int64_t max);
  bool positive(const std::string& field, double value);     // > 0 and finite
  bool non_negative(const std::string& field, double value);  // >= 0 and finite
  // min <= value <= max, or min <= value < max when `max_open`.
  bool real_in_range(const std::string& field, double value, double min, double max, bool max_open = false);

  Issues& issues() { return issues_; }

 private:
  Issues& issues_;
};

}  // namespace fp8::jobspec
