// The one way into a job spec, for fp8-train --config, fp8ctl and the coordinator:
// job.yaml text in, a resolved and validated fp8::v1::JobSpec out.
//
// Loading = parse (YAML tree walked against the JobSpec descriptor: unknown keys and
// mistyped values are errors) -> overrides -> defaults -> semantic validation. Errors are
// InvalidArgument with one line per problem, in file order:
//   job.yaml:12:5: model.n_heads: 6 does not divide model.dim (64)
// Problems with a default or derived value point at the nearest field the user wrote
// (usually its section). Nothing here throws or aborts, whatever the input.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fp8/v1/job.pb.h"

namespace fp8::jobspec {

// Reads the file at `path` (named so in messages). Relative paths inside the spec
// (data.path, checkpoint.dir) are resolved against the file's folder and returned
// absolute. `overrides` ("train.steps=200", see overrides.h) apply after the file and
// before defaults, so a derived default follows an overridden input.
absl::StatusOr<v1::JobSpec> load_job_spec_file(const std::string& path,
                                            const std::vector<std::string>& overrides = {});

// The same for text in hand; `source_name` names it in messages ("job.yaml", "<stdin>").
// Paths inside the spec stay as written: there is no folder to resolve them against.
absl::StatusOr<v1::JobSpec> load_job_spec_string(std::string_view yaml_text, std::string_view source_name,
                                              const std::vector<std::string>& overrides = {});

// Sets one field of a resolved spec ("train.steps=200") and re-validates it all. Derived
// defaults still holding their derived value follow the change (model.dim=128 also moves
// a defaulted ffn_dim). On error `spec` is unchanged.
absl::Status apply_override(v1::JobSpec& spec, std::string_view assignment);

// For a spec that arrives as a message (gRPC) rather than text: fills the defaults of
// unset scalars and validates. A list arriving empty stays empty (fp8.exclude: [] means
// "no exclusions") unless its whole section is absent (no fp8 section: exclude output).
absl::StatusOr<v1::JobSpec> resolve_job_spec(v1::JobSpec spec);

// Validation only, of a resolved spec; messages carry field paths, not lines.
absl::Status validate_job_spec(const v1::JobSpec& spec);

}  // namespace fp8::jobspec
