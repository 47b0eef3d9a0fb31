#include "common/jobspec/overrides.h"

#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/jobspec/suggest.h"
#include "common/jobspec/yaml_cpp.h"
#include "common/jobspec/yaml_reader.h"

namespace fp8::jobspec {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

Location override_location(std::string_view text, int source_index) {
  return Location{override_source(text), 0, 0, source_index};
}

std::string unknown_field_message(const Descriptor& type, std::string_view name, const std::string& parent) {
  std::vector<std::string> names;
  for (int i = 0; i < type.field_count(); ++i) names.push_back(type.field(i)->name());
  std::string hint = did_you_mean(name, names);
  if (hint.empty()) {
    hint = absl::StrCat("; ", parent.empty() ? "a job spec" : parent, " has ", absl::StrJoin(names, ", "));
  }
  return absl::StrCat("unknown field", hint);
}

}  // namespace

std::string override_source(std::string_view text) { return absl::StrCat("override ", quote(text)); }

std::optional<Assignment> parse_assignment(std::string_view text, int source_index, Issues& issues) {
  size_t equals = text.find('=');
  std::string_view path = equals == std::string_view::npos ? text : text.substr(0, equals);
  while (!path.empty() && absl::ascii_isspace(static_cast<unsigned char>(path.front())))
    path.remove_prefix(1);
  while (!path.empty() && absl::ascii_isspace(static_cast<unsigned char>(path.back()))) path.remove_suffix(1);
  if (equals == std::string_view::npos || path.empty()) {
    issues.push_back(
        {"", "expected field.path=value, e.g. train.steps=200", override_location(text, source_index)});
    return std::nullopt;
  }
  return Assignment{std::string(text), std::string(path), std::string(text.substr(equals + 1))};
}

void apply_assignment(const Assignment& a, int source_index, v1::JobSpec& spec, SourceMap& where,
                     Issues& issues) {
  const Location at = override_location(a.text, source_index);
  auto report = [&](std::string field, std::string message) {
    issues.push_back({std::move(field), std::move(message), at});
  };

  YAML::Node value;
  try {
    value = YAML::Load(a.value);
  } catch (const YAML::Exception& e) {
    report(a.path, absl::StrCat("the value is not valid YAML: ", e.msg));
    return;
  }

  // Walk the path down the schema, creating sections on the way.
  std::vector<std::string> parts = absl::StrSplit(a.path, '.');
  Message* message = &spec;
  std::string walked;
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string& name = parts[i];
    std::string here = join_path(walked, path_part(name));
    if (name.empty()) {
      report(a.path, "is not a field path (an empty name between dots)");
      return;
    }
    if (name.find('[') != std::string::npos) {
      report(here, "list entries cannot be set one by one; set the whole list, e.g. fp8.exclude=[output]");
      return;
    }
    const FieldDescriptor* field = message->GetDescriptor()->FindFieldByName(name);
    if (field == nullptr) {
      report(here, unknown_field_message(*message->GetDescriptor(), name, walked));
      return;
    }
    const bool last = i + 1 == parts.size();
    YamlReader reader(at.source, source_index, /*has_lines=*/false, where, issues);
    if (last) {
      where.record(here, at);
      reader.read_field(value, value.Mark(), *message, *field, here);
      return;
    }
    if (field->is_map()) {
      // The rest of the path is the key: label keys may contain dots.
      std::string key = absl::StrJoin(parts.begin() + static_cast<std::ptrdiff_t>(i) + 1, parts.end(), ".");
      std::string entry_path = join_path(here, path_part(key));
      where.record(entry_path, at);
      reader.read_map_entry(key, value, *message, *field, entry_path);
      return;
    }
    if (field->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE || field->is_repeated()) {
      report(here, absl::StrCat("is a value, not a section; ", a.path, " names nothing"));
      return;
    }
    message = message->GetReflection()->MutableMessage(message, field);
    walked = here;
  }
}

}  // namespace fp8::jobspec
