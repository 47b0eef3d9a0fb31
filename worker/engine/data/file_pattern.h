// Data named by a glob pattern ("shards/train-*.tokens"): which files it means.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace fp8::engine::data {

// Whether `path` holds a glob(3) metacharacter: '*', '?' or '['.
bool is_file_pattern(std::string_view path);

// The regular files matching `pattern`, in glob(3)'s sorted order. NotFound naming the
// pattern (after `field`, e.g. "data.path") when none does.
absl::StatusOr<std::vector<std::string>> expand_file_pattern(const std::string& pattern, const std::string& field);

}  // namespace fp8::engine::data
