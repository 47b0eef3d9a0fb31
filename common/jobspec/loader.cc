#include "common/jobspec/loader.h"

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "common/jobspec/defaults.h"
#include "common/jobspec/issues.h"
#include "common/jobspec/overrides.h"
#include "common/jobspec/paths.h"
#include "common/jobspec/tokenizer_vocab.h"
#include "common/jobspec/source_map.h"
#include "common/jobspec/validate.h"
#include "common/jobspec/yaml_document.h"
#include "common/jobspec/yaml_reader.h"

namespace fp8::jobspec {
namespace {

// Whether `field` is `parent` or inside it ("model.dim" is inside "model").
bool is_inside(std::string_view field, std::string_view parent) {
  if (!field.starts_with(parent)) return false;
  return field.size() == parent.size() || field[parent.size()] == '.' || field[parent.size()] == '[';
}

// Validation issues about a field that failed to parse would only repeat the parse error
// in other words ("model.dim: is required" after "model.dim: expected an integer").
void drop_echoes_of_parse_errors(const Issues& parse_issues, Issues& validation_issues) {
  auto explained = [&](const Issue& v) {
    for (const Issue& p : parse_issues) {
      if (!p.field.empty() && is_inside(v.field, p.field)) return true;
      for (const std::string& e : p.explains) {
        if (is_inside(v.field, e)) return true;
      }
    }
    return false;
  };
  std::erase_if(validation_issues, explained);
}

absl::StatusOr<v1::JobSpec> load(std::string_view text, const std::string& source,
                                 const std::optional<std::filesystem::path>& base_dir,
                                 const std::vector<std::string>& overrides) {
  Issues issues;
  SourceMap where;
  std::optional<YAML::Node> root = parse_job_document(text, source, issues);
  if (!root) return issues_to_status(issues, where, source);

  v1::JobSpec spec;
  YamlReader(source, /*source_index=*/0, /*has_lines=*/true, where, issues).read_message(*root, spec, "");
  for (size_t i = 0; i < overrides.size(); ++i) {
    const int source_index = static_cast<int>(i) + 1;
    if (auto a = parse_assignment(overrides[i], source_index, issues)) {
      apply_assignment(*a, source_index, spec, where, issues);
    }
  }

  if (where.find("fp8.exclude") == nullptr) apply_default_exclude(spec);
  apply_defaults(spec);
  if (base_dir) make_paths_absolute(spec, *base_dir);
  fill_vocab_from_tokenizer(spec);  // what it could not read shows as model.vocab_size required

  Issues semantic = find_spec_issues(spec);
  drop_echoes_of_parse_errors(issues, semantic);
  issues.insert(issues.end(), semantic.begin(), semantic.end());
  if (!issues.empty()) return issues_to_status(issues, where, source);
  return spec;
}

}  // namespace

absl::StatusOr<v1::JobSpec> load_job_spec_file(const std::string& path,
                                            const std::vector<std::string>& overrides) {
  std::error_code error;
  std::filesystem::path file(path);
  if (!std::filesystem::is_regular_file(file, error)) {
    if (std::filesystem::exists(file, error))
      return absl::InvalidArgumentError(absl::StrCat(path, ": not a file"));
    return absl::NotFoundError(absl::StrCat(path, ": no such file"));
  }
  auto size = std::filesystem::file_size(file, error);
  if (error) return absl::InvalidArgumentError(absl::StrCat(path, ": cannot read: ", error.message()));
  if (size > kMaxJobFileBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": is ", size, " bytes; a job spec is at most ", kMaxJobFileBytes));
  }
  std::ifstream in(file, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in && !in.eof()) return absl::InvalidArgumentError(absl::StrCat(path, ": cannot read"));

  std::filesystem::path base_dir = std::filesystem::absolute(file, error).parent_path();
  if (error) return absl::InvalidArgumentError(absl::StrCat(path, ": cannot resolve: ", error.message()));
  return load(text.str(), path, base_dir, overrides);
}

absl::StatusOr<v1::JobSpec> load_job_spec_string(std::string_view yaml_text, std::string_view source_name,
                                              const std::vector<std::string>& overrides) {
  return load(yaml_text, std::string(source_name), std::nullopt, overrides);
}

absl::Status apply_override(v1::JobSpec& spec, std::string_view assignment) {
  Issues issues;
  SourceMap where;
  std::optional<Assignment> a = parse_assignment(assignment, /*source_index=*/1, issues);
  if (!a) return issues_to_status(issues, where, "");

  v1::JobSpec changed = spec;
  forget_derived_defaults(changed, a->path);
  apply_assignment(*a, /*source_index=*/1, changed, where, issues);
  apply_defaults(changed);
  if (issues.empty()) issues = find_spec_issues(changed);
  if (!issues.empty()) return issues_to_status(issues, where, "");
  spec = std::move(changed);
  return absl::OkStatus();
}

absl::StatusOr<v1::JobSpec> resolve_job_spec(v1::JobSpec spec) {
  // No fp8 section at all said nothing about its lists either: all its defaults apply.
  if (!spec.has_fp8()) apply_default_exclude(spec);
  apply_defaults(spec);
  if (absl::Status s = validate_job_spec(spec); !s.ok()) return s;
  return spec;
}

absl::Status validate_job_spec(const v1::JobSpec& spec) {
  return issues_to_status(find_spec_issues(spec), SourceMap(), "");
}

}  // namespace fp8::jobspec
