#include "server/coordinator/spec_admission.h"

#include <algorithm>
#include <optional>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/jobspec/loader.h"
#include "common/rpc/request_limits.h"

namespace fp8::server {
namespace {

namespace fs = std::filesystem;

bool is_under(const fs::path& path, const fs::path& root) {
  auto r = root.begin(), p = path.begin();
  for (; r != root.end(); ++r, ++p) {
    if (r->empty()) continue;  // a trailing '/' on the root
    if (p == path.end() || *p != *r) return false;
  }
  return true;
}

std::string quote(const std::string& path) { return rpc::quote_for_error(path, 256); }

std::string root_list(const std::vector<fs::path>& roots) {
  std::vector<std::string> names;
  for (const auto& root : roots) names.push_back(root.string());
  return names.empty() ? "none configured" : absl::StrJoin(names, ", ");
}

// Absolute, and free of "." and ".." components.
absl::Status check_path_syntax(const std::string& path, const std::string& field) {
  const fs::path p(path);
  if (path.empty() || !p.is_absolute()) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": '", quote(path), "' is not an absolute path"));
  }
  for (const auto& part : p) {
    if (part == ".." || part == ".") {
      return absl::InvalidArgumentError(absl::StrCat(field, ": '", quote(path), "' contains '", part.string(), "'"));
    }
  }
  return absl::OkStatus();
}

// `path` with every symbolic link of the part that exists resolved (the rest as written).
absl::StatusOr<fs::path> resolve(const std::string& path, const std::string& field) {
  std::error_code ec;
  fs::path resolved = fs::weakly_canonical(fs::path(path), ec);
  if (ec) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": '", quote(path), "' cannot be resolved: ", ec.message()));
  }
  return resolved;
}

// The path with its links resolved must lie under a root (the roots are resolved too,
// ResolveRoots): a link inside a root that leads out of every root is refused, naming
// where it leads.
absl::StatusOr<fs::path> confine_resolved(const std::string& path, const std::vector<fs::path>& roots,
                                         const std::string& field) {
  if (absl::Status s = check_path_syntax(path, field); !s.ok()) return s;
  absl::StatusOr<fs::path> resolved = resolve(path, field);
  if (!resolved.ok()) return resolved.status();
  if (std::any_of(roots.begin(), roots.end(), [&](const fs::path& root) { return is_under(*resolved, root); })) {
    return resolved;
  }
  if (*resolved != fs::path(path).lexically_normal()) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": '", quote(path), "' leads to '",
                                                   quote(resolved->string()),
                                                   "' through a symbolic link, outside the allowed roots (",
                                                   root_list(roots), ")"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat(field, ": '", quote(path), "' is outside the allowed roots (", root_list(roots), ")"));
}

// A user's checkpoint folders are `<root>/<owner>/...`.
absl::Status check_in_owners_subtree(const fs::path& dir, const std::vector<fs::path>& roots, const std::string& owner,
                                  const std::string& field) {
  std::vector<std::string> subtrees;
  for (const fs::path& root : roots) {
    const fs::path mine = root / owner;
    if (is_under(dir, mine) && dir != mine) return absl::OkStatus();
    subtrees.push_back((mine / "").string());
  }
  return absl::InvalidArgumentError(absl::StrCat(
      field, ": '", quote(dir.string()), "' is outside the folders of owner '", owner, "' (",
      absl::StrJoin(subtrees, ", "), "): name a folder there; each job gets a folder of its own inside it"));
}

}  // namespace

absl::Status check_confined_path(const std::string& path, const std::vector<fs::path>& roots, const std::string& field) {
  if (absl::Status s = check_path_syntax(path, field); !s.ok()) return s;
  if (std::any_of(roots.begin(), roots.end(), [&](const fs::path& root) { return is_under(fs::path(path), root); })) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat(field, ": '", quote(path), "' is outside the allowed roots (", root_list(roots), ")"));
}

std::string root_of(const std::string& path, const std::vector<fs::path>& roots) {
  for (const fs::path& root : roots) {
    if (is_under(fs::path(path), root)) return root.string();
  }
  return "";
}

std::vector<fs::path> resolve_roots(const std::vector<fs::path>& roots) {
  std::vector<fs::path> out;
  for (const fs::path& root : roots) {
    std::error_code ec;
    fs::path resolved = fs::weakly_canonical(fs::absolute(root), ec);
    out.push_back(ec ? fs::absolute(root).lexically_normal() : resolved);
  }
  return out;
}

absl::Status check_owner_name(const std::string& owner, const std::string& field) {
  const bool ok = !owner.empty() && owner.size() <= 63 && absl::ascii_isalnum(owner[0]) &&
                  std::all_of(owner.begin(), owner.end(),
                              [](char c) { return absl::ascii_isalnum(c) || c == '.' || c == '_' || c == '-'; });
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(field, ": '", rpc::quote_for_error(owner), "' cannot name a folder (1 to 63 letters, digits, '.', '_' "
                   "or '-', starting with a letter or digit)"));
}

std::string job_folder(const std::string& checkpoint_dir, const std::string& job_id) {
  return (fs::path(checkpoint_dir) / job_id).string();
}

absl::StatusOr<v1::JobSpec> admit_job_spec(const v1::JobSpec& spec, const PathRoots& roots, bool admin) {
  absl::StatusOr<v1::JobSpec> resolved = jobspec::resolve_job_spec(spec);
  if (!resolved.ok()) {
    // The loader's lines name fields from the spec's root; the request holds it as "spec".
    std::vector<std::string> lines = absl::StrSplit(resolved.status().message(), '\n', absl::SkipEmpty());
    for (std::string& line : lines) line = absl::StrCat("spec.", line);
    return absl::InvalidArgumentError(absl::StrJoin(lines, "\n"));
  }
  std::vector<std::string> problems;
  if (absl::Status s = check_owner_name(resolved->owner(), "spec.owner"); !s.ok()) problems.emplace_back(s.message());
  absl::StatusOr<fs::path> data = confine_resolved(resolved->data().path(), roots.data, "spec.data.path");
  if (data.ok()) {
    resolved->mutable_data()->set_path(data->string());
  } else {
    problems.emplace_back(data.status().message());
  }
  // data.val_path, data.tokenizer_model and model.init_from under data.path's own root:
  // the worker is handed that one root to open them all beneath.
  std::vector<fs::path> data_root;
  for (const fs::path& root : roots.data) {
    if (data.ok() && is_under(*data, root)) data_root = {root};
  }
  v1::DataSpec& d = *resolved->mutable_data();
  // (mutable_* would mark an absent field present: each is reached only when it is.)
  auto confine = [&](const std::string& path, const char* field) -> std::optional<std::string> {
    absl::StatusOr<fs::path> confined = confine_resolved(path, data_root, field);
    if (confined.ok()) return confined->string();
    problems.emplace_back(confined.status().message());
    return std::nullopt;
  };
  if (data.ok() && d.has_val_path()) {
    if (std::optional<std::string> p = confine(d.val_path(), "spec.data.val_path")) d.set_val_path(*p);
  }
  if (data.ok() && d.has_tokenizer_model()) {
    if (std::optional<std::string> p = confine(d.tokenizer_model(), "spec.data.tokenizer_model")) {
      d.set_tokenizer_model(*p);
    }
  }
  if (data.ok() && resolved->model().has_init_from()) {
    if (std::optional<std::string> p = confine(resolved->model().init_from(), "spec.model.init_from")) {
      resolved->mutable_model()->set_init_from(*p);
    }
  }
  absl::StatusOr<fs::path> dir = confine_resolved(resolved->checkpoint().dir(), roots.checkpoint, "spec.checkpoint.dir");
  if (dir.ok() && !admin && problems.empty()) {
    if (absl::Status s = check_in_owners_subtree(*dir, roots.checkpoint, resolved->owner(), "spec.checkpoint.dir");
        !s.ok()) {
      dir = s;
    }
  }
  if (dir.ok()) {
    resolved->mutable_checkpoint()->set_dir(dir->string());
  } else {
    problems.emplace_back(dir.status().message());
  }
  if (!problems.empty()) return absl::InvalidArgumentError(absl::StrJoin(problems, "\n"));
  return resolved;
}

}  // namespace fp8::server
