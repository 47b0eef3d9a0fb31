// What the coordinator accepts as a job: the spec resolved and validated again (a client
// may send anything), and every path it will hand to workers confined to the configured
// roots, so that a job cannot read or overwrite files elsewhere on the workers' hosts.
//
// Confinement, as a multi-tenant service needs it:
//   - Paths are resolved (symbolic links and "..") before they are checked: a link inside
//     a root that points elsewhere does not pass. What is stored is the resolved path.
//   - Checkpoint folders belong to a job. The coordinator gives each job a folder of its
//     own, `<checkpoint.dir>/<job id>`, so two jobs (a spec submitted twice, say) never
//     share one and a job's retention only ever deletes its own checkpoints.
//   - A user's checkpoint.dir must lie in that user's subtree of a root,
//     `<checkpoint root>/<owner>/...`, so no user can reach another's folders. An admin
//     may name any folder under a root.
// Workers and trainers check again before opening (StartRank.data_root/checkpoint_root).
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
// path from the request ("spec.model.n_heads: ...", "spec.data.path: ..."). The spec's
// paths come back with symbolic links resolved; checkpoint.dir is still the folder the
// user named (AssignJobFolder adds the job's own folder once the job has an id).
// `admin`: the caller is an admin, whose checkpoint.dir may be anywhere under a root
// rather than only in the owner's subtree.
absl::StatusOr<v1::JobSpec> admit_job_spec(const v1::JobSpec& spec, const PathRoots& roots, bool admin);

// `<checkpoint.dir>/<job_id>`: the folder the job's checkpoints go to.
std::string job_folder(const std::string& checkpoint_dir, const std::string& job_id);

// INVALID_ARGUMENT naming `field` unless `path` is absolute, free of "." and ".."
// components, and under one of `roots`.
absl::Status check_confined_path(const std::string& path, const std::vector<std::filesystem::path>& roots,
                               const std::string& field);

// The root among `roots` that `path` lies under (lexically), or "" when none.
std::string root_of(const std::string& path, const std::vector<std::filesystem::path>& roots);

// `roots` made absolute with symbolic links resolved (as far as they exist), so that
// resolved paths compare against them. For the coordinator's start.
std::vector<std::filesystem::path> resolve_roots(const std::vector<std::filesystem::path>& roots);

// OK when `owner` can name a folder: 1 to 63 letters, digits, '.', '_' or '-', starting
// with a letter or digit.
absl::Status check_owner_name(const std::string& owner, const std::string& field);

}  // namespace fp8::server
