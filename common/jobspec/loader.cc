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
bool IsInside(std::string_view field, std::string_view parent) {
  if (!field.starts_with(parent)) return false;
  return field.size() == parent.size() || field[parent.size()] == '.' || field[parent.size()] == '[';
}

// Validation issues about a field that failed to parse would only repeat the parse error
// in other words ("model.dim: is required" after "model.dim: expected an integer").
void DropEchoesOfParseErrors(const Issues& parse_issues, Issues& validation_issues) {
  auto explained = [&](const Issue& v) {
    for (const Issue& p : parse_issues) {
      if (!p.field.empty() && IsInside(v.field, p.field)) return true;
      for (const std::string& e : p.explains) {
        if (IsInside(v.field, e)) return true;
      }
    }
    return false;
  };
  std::erase_if(validation_issues, explained);
}

absl::StatusOr<v1::JobSpec> Load(std::string_view text, const std::string& source,
                                 const std::optional<std::filesystem::path>& base_dir,
                                 const std::vector<std::string>& overrides) {
  Issues issues;
  SourceMap where;
  std::optional<YAML::Node> root = ParseJobDocument(text, source, issues);
  if (!root) return IssuesToStatus(issues, where, source);

  v1::JobSpec spec;
  YamlReader(source, /*source_index=*/0, /*has_lines=*/true, where, issues).ReadMessage(*root, spec, "");
  for (size_t i = 0; i < overrides.size(); ++i) {
    const int source_index = static_cast<int>(i) + 1;
    if (auto a = ParseAssignment(overrides[i], source_index, issues)) {
      ApplyAssignment(*a, source_index, spec, where, issues);
    }
  }

  if (where.Find("fp8.exclude") == nullptr) ApplyDefaultExclude(spec);
  ApplyDefaults(spec);
  if (base_dir) MakePathsAbsolute(spec, *base_dir);
  FillVocabFromTokenizer(spec);  // what it could not read shows as model.vocab_size required

  Issues semantic = FindSpecIssues(spec);
  DropEchoesOfParseErrors(issues, semantic);
  issues.insert(issues.end(), semantic.begin(), semantic.end());
  if (!issues.empty()) return IssuesToStatus(issues, where, source);
  return spec;
}

}  // namespace

absl::StatusOr<v1::JobSpec> LoadJobSpecFile(const std::string& path,
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
  return Load(text.str(), path, base_dir, overrides);
}

absl::StatusOr<v1::JobSpec> LoadJobSpecString(std::string_view yaml_text, std::string_view source_name,
                                              const std::vector<std::string>& overrides) {
  return Load(yaml_text, std::string(source_name), std::nullopt, overrides);
}

absl::Status ApplyOverride(v1::JobSpec& spec, std::string_view assignment) {
  Issues issues;
  SourceMap where;
  std::optional<Assignment> a = ParseAssignment(assignment, /*source_index=*/1, issues);
  if (!a) return IssuesToStatus(issues, where, "");

  v1::JobSpec changed = spec;
  ForgetDerivedDefaults(changed, a->path);
  ApplyAssignment(*a, /*source_index=*/1, changed, where, issues);
  ApplyDefaults(changed);
  if (issues.empty()) issues = FindSpecIssues(changed);
  if (!issues.empty()) return IssuesToStatus(issues, where, "");
  spec = std::move(changed);
  return absl::OkStatus();
}

absl::StatusOr<v1::JobSpec> ResolveJobSpec(v1::JobSpec spec) {
  // No fp8 section at all said nothing about its lists either: all its defaults apply.
  if (!spec.has_fp8()) ApplyDefaultExclude(spec);
  ApplyDefaults(spec);
  if (absl::Status s = ValidateJobSpec(spec); !s.ok()) return s;
  return spec;
}

absl::Status ValidateJobSpec(const v1::JobSpec& spec) {
  return IssuesToStatus(FindSpecIssues(spec), SourceMap(), "");
}

}  // namespace fp8::jobspec
