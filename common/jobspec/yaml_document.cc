#include "common/jobspec/yaml_document.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "common/jobspec/yaml_reader.h"

namespace fp8::jobspec {
namespace {

Location at(const std::string& source, const YAML::Mark& mark) {
  if (mark.is_null() || mark.line < 0) return Location{source, 1, 1, 0};
  return Location{source, mark.line + 1, mark.column + 1, 0};
}

}  // namespace

std::optional<YAML::Node> parse_job_document(std::string_view text, const std::string& source, Issues& issues) {
  if (text.size() > kMaxJobFileBytes) {
    issues.push_back({"",
                      absl::StrCat("is ", text.size(), " bytes; a job spec is at most ", kMaxJobFileBytes),
                      Location{source, 0, 0, 0}});
    return std::nullopt;
  }
  std::vector<YAML::Node> documents;
  try {
    documents = YAML::LoadAll(std::string(text));
  } catch (const YAML::Exception& e) {
    // e.msg, not e.what(): what() repeats the position we already print.
    issues.push_back({"", absl::StrCat("YAML syntax error: ", e.msg), at(source, e.mark)});
    return std::nullopt;
  }
  const char* kNeeds = "a job spec needs at least name, model, data and train";
  if (documents.empty() || (documents.size() == 1 && documents[0].IsNull())) {
    issues.push_back({"", absl::StrCat("empty job spec; ", kNeeds), Location{source, 1, 1, 0}});
    return std::nullopt;
  }
  if (documents.size() > 1) {
    issues.push_back({"",
                      absl::StrCat("holds ", documents.size(),
                                   " YAML documents; a job spec is one (remove the '---' separators)"),
                      at(source, documents[1].Mark())});
    return std::nullopt;
  }
  const YAML::Node& root = documents[0];
  if (!root.IsMap()) {
    issues.push_back({"",
                      absl::StrCat("expected a mapping of sections at the top (name:, model:, ...), got ",
                                   describe_node(root), "; ", kNeeds),
                      at(source, root.Mark())});
    return std::nullopt;
  }
  return root;
}

}  // namespace fp8::jobspec
