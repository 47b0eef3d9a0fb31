// What the coordinator accepts as a job: the spec resolved and validated again (a client
// may send anything), and every path it will hand to workers confined to the configured
// roots, so that a job cannot read or overwrite files elsewhere on the workers' hosts.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "fp8/v1/job.pb.h"

namespace fp8::server {

struct PathRoots {
  std::vector<std::filesystem::path> data;        // data.path must lie under one of these
  std::vector<std::filesystem::path> checkpoint;  // checkpoint.dir must lie under one of these
};

// The resolved spec, or INVALID_ARGUMENT with one line per problem, each naming the field
// path from the request ("spec.model.n_heads: ...", "spec.data.path: ...").
absl::StatusOr<v1::JobSpec> AdmitJobSpec(const v1::JobSpec& spec, const PathRoots& roots);

// INVALID_ARGUMENT naming `field` unless `path` is absolute, free of "." and ".."
// components, and under one of `roots`.
absl::Status CheckConfinedPath(const std::string& path, const std::vector<std::filesystem::path>& roots,
                               const std::string& field);

}  // namespace fp8::server
