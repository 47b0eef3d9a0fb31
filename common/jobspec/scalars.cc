#include "common/jobspec/scalars.h"

#include <charconv>
#include <cmath>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/jobspec/issues.h"
#include "common/jobspec/suggest.h"

namespace fp8::jobspec {
namespace {

bool equals_ignoring_case(std::string_view a, std::string_view b) {
  return absl::EqualsIgnoreCase(absl::string_view(a.data(), a.size()), absl::string_view(b.data(), b.size()));
}

absl::Status expected(const std::string& what, std::string_view text) {
  return absl::InvalidArgumentError(absl::StrCat("expected ", what, ", got ", quote(text)));
}

}  // namespace

absl::StatusOr<int64_t> parse_integer(std::string_view text, int64_t min, int64_t max) {
  int64_t value = 0;
  const char* end = text.data() + text.size();
  auto [stop, error] = std::from_chars(text.data(), end, value);
  if (error == std::errc::result_out_of_range) {
    return absl::InvalidArgumentError(absl::StrCat(quote(text), " is out of range [", min, ", ", max, "]"));
  }
  if (error != std::errc() || stop != end) return expected("an integer", text);
  if (value < min || value > max) {
    return absl::InvalidArgumentError(absl::StrCat(value, " is out of range [", min, ", ", max, "]"));
  }
  return value;
}

absl::StatusOr<uint64_t> parse_unsigned(std::string_view text) {
  uint64_t value = 0;
  const char* end = text.data() + text.size();
  auto [stop, error] = std::from_chars(text.data(), end, value);
  if (error == std::errc::result_out_of_range) {
    return absl::InvalidArgumentError(absl::StrCat(quote(text), " is too large for a 64-bit integer"));
  }
  if (error != std::errc() || stop != end) return expected("a non-negative integer", text);
  return value;
}

absl::StatusOr<double> parse_number(std::string_view text) {
  double value = 0;
  const char* end = text.data() + text.size();
  // from_chars takes neither a leading '+' nor spaces, and no hex without being asked:
  // exactly the plain decimal spellings.
  auto [stop, error] = std::from_chars(text.data(), end, value);
  if (error != std::errc() || stop != end) return expected("a number", text);
  if (!std::isfinite(value)) return expected("a finite number", text);
  return value;
}

absl::StatusOr<bool> parse_bool(std::string_view text) {
  if (equals_ignoring_case(text, "true")) return true;
  if (equals_ignoring_case(text, "false")) return false;
  return expected("true or false", text);
}

absl::StatusOr<const google::protobuf::EnumValueDescriptor*> parse_enum_name(
    std::string_view text, const google::protobuf::EnumDescriptor& type) {
  std::vector<std::string> names;
  for (int i = 0; i < type.value_count(); ++i) {
    const google::protobuf::EnumValueDescriptor& value = *type.value(i);
    if (value.number() == 0) continue;
    if (equals_ignoring_case(text, value.name())) return &value;
    names.push_back(enum_value_name(value));
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown value ", quote(text), "; expected one of ",
                                                 enum_choices(type), did_you_mean(text, names)));
}

std::string enum_value_name(const google::protobuf::EnumValueDescriptor& value) {
  return absl::AsciiStrToLower(value.name());
}

std::string enum_choices(const google::protobuf::EnumDescriptor& type) {
  std::vector<std::string> names;
  for (int i = 0; i < type.value_count(); ++i) {
    if (type.value(i)->number() != 0) names.push_back(enum_value_name(*type.value(i)));
  }
  return absl::StrJoin(names, ", ");
}

namespace {

// The shortest text of `value` in one notation; scientific exponents without padding
// ("3e-4", not to_chars' "3e-04").
std::string shortest_in(double value, std::chars_format format) {
  char buffer[400];  // fixed notation of 1e308 needs 309 digits
  auto [end, error] = std::to_chars(buffer, buffer + sizeof(buffer), value, format);
  if (error != std::errc()) return absl::StrCat(value);  // cannot happen with this buffer
  std::string text(buffer, end);
  size_t e = text.find('e');
  if (e == std::string::npos) return text;
  std::string mantissa = text.substr(0, e);
  std::string exponent = text.substr(e + 1);
  bool negative = !exponent.empty() && exponent[0] == '-';
  size_t digits = exponent.find_first_not_of("+-0");
  return absl::StrCat(mantissa, "e", negative ? "-" : "",
                      digits == std::string::npos ? "0" : exponent.substr(digits));
}

}  // namespace

std::string format_number(double value) {
  // Whole numbers read best in full (rope_theta: 500000); otherwise the plain decimal
  // unless scientific is clearly shorter (0.0003 but 1e-8). Either parses back exactly.
  if (std::isfinite(value) && value == std::trunc(value) && std::fabs(value) < 1e15) {
    return shortest_in(value, std::chars_format::fixed);
  }
  std::string fixed = shortest_in(value, std::chars_format::fixed);
  std::string scientific = shortest_in(value, std::chars_format::scientific);
  return fixed.size() <= scientific.size() + 2 ? fixed : scientific;
}

}  // namespace fp8::jobspec
