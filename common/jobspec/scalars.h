// The spelling of scalar values in job.yaml, both ways: strict parsing of integers,
// numbers, booleans and enum names (so that `steps: 1e3` or `tie_embeddings: yes` is an
// error, not a guess), and the shortest exact text of a number for writing one back.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "google/protobuf/descriptor.h"

namespace fp8::jobspec {

// Decimal integer in [min, max]: an optional '-', then digits.
absl::StatusOr<int64_t> parse_integer(std::string_view text, int64_t min, int64_t max);
// Decimal integer in [0, UINT64_MAX].
absl::StatusOr<uint64_t> parse_unsigned(std::string_view text);
// A finite decimal number ("3e-4", "0.5", "10").
absl::StatusOr<double> parse_number(std::string_view text);
// true or false, in any case.
absl::StatusOr<bool> parse_bool(std::string_view text);
// An enum value by its lower-case name ("rowwise"), in any case. The zero value
// (*_UNSPECIFIED) means "not written" and is never accepted.
absl::StatusOr<const google::protobuf::EnumValueDescriptor*> parse_enum_name(
    std::string_view text, const google::protobuf::EnumDescriptor& type);

// How job.yaml spells an enum value: its name in lower case.
std::string enum_value_name(const google::protobuf::EnumValueDescriptor& value);
// "tensorwise, rowwise, ..." : every value ParseEnumName accepts.
std::string enum_choices(const google::protobuf::EnumDescriptor& type);

// The shortest text that parses back to exactly `value` ("0.0003", "1e-08", "10000").
std::string format_number(double value);

}  // namespace fp8::jobspec
