#include "server/coordinator/spec_admission.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/jobspec/loader.h"

namespace fp8::server {
namespace {

bool IsUnder(const std::filesystem::path& path, const std::filesystem::path& root) {
  auto r = root.begin(), p = path.begin();
  for (; r != root.end(); ++r, ++p) {
    if (r->empty()) continue;  // a trailing '/' on the root
    if (p == path.end() || *p != *r) return false;
  }
  return true;
}

}  // namespace

absl::Status CheckConfinedPath(const std::string& path, const std::vector<std::filesystem::path>& roots,
                               const std::string& field) {
  const std::filesystem::path p(path);
  if (path.empty() || !p.is_absolute()) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": '", path, "' is not an absolute path"));
  }
  for (const auto& part : p) {
    if (part == ".." || part == ".") {
      return absl::InvalidArgumentError(absl::StrCat(field, ": '", path, "' contains '", part.string(), "'"));
    }
  }
  if (std::any_of(roots.begin(), roots.end(), [&](const std::filesystem::path& root) { return IsUnder(p, root); })) {
    return absl::OkStatus();
  }
  std::vector<std::string> names;
  for (const auto& root : roots) names.push_back(root.string());
  return absl::InvalidArgumentError(absl::StrCat(field, ": '", path, "' is outside the allowed roots (",
                                                 names.empty() ? "none configured" : absl::StrJoin(names, ", "), ")"));
}

absl::StatusOr<v1::JobSpec> AdmitJobSpec(const v1::JobSpec& spec, const PathRoots& roots) {
  absl::StatusOr<v1::JobSpec> resolved = jobspec::ResolveJobSpec(spec);
  if (!resolved.ok()) {
    // The loader's lines name fields from the spec's root; the request holds it as "spec".
    std::vector<std::string> lines = absl::StrSplit(resolved.status().message(), '\n', absl::SkipEmpty());
    for (std::string& line : lines) line = absl::StrCat("spec.", line);
    return absl::InvalidArgumentError(absl::StrJoin(lines, "\n"));
  }
  std::vector<std::string> problems;
  if (absl::Status s = CheckConfinedPath(resolved->data().path(), roots.data, "spec.data.path"); !s.ok()) {
    problems.emplace_back(s.message());
  }
  if (absl::Status s = CheckConfinedPath(resolved->checkpoint().dir(), roots.checkpoint, "spec.checkpoint.dir");
      !s.ok()) {
    problems.emplace_back(s.message());
  }
  if (!problems.empty()) return absl::InvalidArgumentError(absl::StrJoin(problems, "\n"));
  return resolved;
}

}  // namespace fp8::server
