// What fp8-data reads: input files named directly or by glob patterns, read whole.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace fp8::data_cli {

// Every input file, patterns expanded (sorted, as glob(3) returns them). NotFound names a
// missing file or a pattern that matches nothing.
absl::StatusOr<std::vector<std::string>> expand_inputs(const std::vector<std::string>& inputs);

absl::StatusOr<std::string> read_file(const std::string& path);

}  // namespace fp8::data_cli
