// Reading job.yaml text into a YAML tree: syntax errors, an empty file, several
// documents, or a top level that is not a mapping become issues with a position.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "common/jobspec/issues.h"
#include "common/jobspec/yaml_cpp.h"

namespace fp8::jobspec {

// A job file is small; anything bigger is not a job file (and would only make the
// parser and the checks work hard on hostile input).
inline constexpr size_t kMaxJobFileBytes = 1 << 20;

// The document's top-level mapping, or nullopt with the reason in `issues`.
std::optional<YAML::Node> parse_job_document(std::string_view text, const std::string& source, Issues& issues);

}  // namespace fp8::jobspec
