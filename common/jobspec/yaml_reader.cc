#include "common/jobspec/yaml_reader.h"

#include <cfloat>
#include <cstdint>
#include <limits>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/jobspec/scalars.h"
#include "common/jobspec/suggest.h"

namespace fp8::jobspec {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// No list or map in a job spec is long; a bound keeps hostile input from making later
// checks (every glob against every layer) expensive.
constexpr size_t kMaxEntries = 1000;

// What a value of `field` looks like, for "expected ..., got ..." messages.
std::string expected_kind(const FieldDescriptor& field) {
  switch (field.cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
    case FieldDescriptor::CPPTYPE_INT64:
      return "an integer";
    case FieldDescriptor::CPPTYPE_UINT32:
    case FieldDescriptor::CPPTYPE_UINT64:
      return "a non-negative integer";
    case FieldDescriptor::CPPTYPE_DOUBLE:
    case FieldDescriptor::CPPTYPE_FLOAT:
      return "a number";
    case FieldDescriptor::CPPTYPE_BOOL:
      return "true or false";
    case FieldDescriptor::CPPTYPE_ENUM:
      return absl::StrCat("one of ", enum_choices(*field.enum_type()));
    case FieldDescriptor::CPPTYPE_STRING:
      return "a string";
    case FieldDescriptor::CPPTYPE_MESSAGE:
      return "a mapping";
  }
  return "a value";
}

std::vector<std::string> field_names(const Descriptor& type) {
  std::vector<std::string> names;
  for (int i = 0; i < type.field_count(); ++i) names.push_back(type.field(i)->name());
  return names;
}

// Null values carry the mark of whatever follows them, often the next line; the key that
// introduced the value is where the user looks.
YAML::Mark mark_of(const YAML::Node& value, const YAML::Mark& key_mark) {
  return value.IsNull() ? key_mark : value.Mark();
}

}  // namespace

std::string describe_node(const YAML::Node& node) {
  if (node.IsScalar()) return quote(node.Scalar());
  if (node.IsSequence()) return "a list";
  if (node.IsMap()) return "a mapping";
  return "nothing";
}

YamlReader::YamlReader(std::string source, int source_index, bool has_lines, SourceMap& where, Issues& issues)
    : source_(std::move(source)),
      source_index_(source_index),
      has_lines_(has_lines),
      where_(where),
      issues_(issues) {}

std::optional<Location> YamlReader::location_of(const YAML::Mark& mark) const {
  if (!has_lines_) return Location{source_, 0, 0, source_index_};
  if (mark.is_null() || mark.line < 0) return std::nullopt;
  return Location{source_, mark.line + 1, mark.column + 1, source_index_};
}

void YamlReader::report(const YAML::Mark& mark, const std::string& path, std::string message) {
  issues_.push_back({path, std::move(message), location_of(mark)});
}

void YamlReader::read_message(const YAML::Node& node, Message& message, const std::string& path) {
  if (node.IsNull()) return;  // `fp8:` with nothing under it: the section with its defaults
  if (!node.IsMap()) {
    report(node.Mark(), path, absl::StrCat("expected a mapping of fields, got ", describe_node(node)));
    return;
  }
  const Descriptor& type = *message.GetDescriptor();
  std::map<std::string, int> first_line_of_key;
  for (auto it = node.begin(); it != node.end(); ++it) {
    // Copies, not references: yaml-cpp's iterator hands out a temporary pair. (Nodes are
    // handles, so copying is cheap.)
    const YAML::Node key = it->first;
    const YAML::Node value = it->second;
    if (!key.IsScalar()) {
      report(key.Mark(), path, absl::StrCat("keys must be plain field names, got ", describe_node(key)));
      continue;
    }
    const std::string& name = key.Scalar();
    std::string child_path = join_path(path, path_part(name));
    auto [seen, first_time] = first_line_of_key.emplace(name, key.Mark().line + 1);
    if (!first_time) {
      report(key.Mark(), child_path, absl::StrCat("written twice (first on line ", seen->second, ")"));
      continue;
    }
    const FieldDescriptor* field = type.FindFieldByName(name);
    if (field == nullptr) {
      std::vector<std::string> names = field_names(type);
      std::string meant = closest_name(name, names);
      std::string hint = meant.empty() ? absl::StrCat("; ", path.empty() ? "a job spec" : path, " has ",
                                                      absl::StrJoin(names, ", "))
                                       : absl::StrCat(" (did you mean '", meant, "'?)");
      report(key.Mark(), child_path, absl::StrCat("unknown field", hint));
      if (!meant.empty()) issues_.back().explains.push_back(join_path(path, meant));
      continue;
    }
    if (auto at = location_of(key.Mark())) where_.record(child_path, *at);
    read_field(value, key.Mark(), message, *field, child_path);
  }
}

void YamlReader::read_field(const YAML::Node& value, const YAML::Mark& key_mark, Message& parent,
                           const FieldDescriptor& field, const std::string& path) {
  if (field.is_map()) {
    read_map(value, key_mark, parent, field, path);
  } else if (field.is_repeated()) {
    read_list(value, key_mark, parent, field, path);
  } else if (field.cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
    if (!value.IsNull() && !value.IsMap()) {
      report(value.Mark(), path, absl::StrCat("expected a mapping of fields, got ", describe_node(value)));
      return;
    }
    read_message(value, *parent.GetReflection()->MutableMessage(&parent, &field), path);
  } else {
    read_scalar(value, key_mark, parent, field, path);
  }
}

void YamlReader::read_list(const YAML::Node& value, const YAML::Mark& key_mark, Message& parent,
                          const FieldDescriptor& field, const std::string& path) {
  if (!value.IsSequence()) {
    report(mark_of(value, key_mark), path,
           absl::StrCat("expected a list, got ", describe_node(value),
                        value.IsNull() ? " (write [] for an empty list)" : ""));
    return;
  }
  if (value.size() > kMaxEntries) {
    report(value.Mark(), path, absl::StrCat("has ", value.size(), " entries; at most ", kMaxEntries));
    return;
  }
  const Reflection& reflection = *parent.GetReflection();
  reflection.ClearField(&parent, &field);
  size_t index = 0;
  for (auto it = value.begin(); it != value.end(); ++it, ++index) {
    const YAML::Node element = *it;  // a copy: *it is a temporary
    std::string element_path = absl::StrCat(path, "[", index, "]");
    const YAML::Mark& element_mark = mark_of(element, key_mark);
    if (auto at = location_of(element_mark)) where_.record(element_path, *at);
    if (field.cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      if (!element.IsNull() && !element.IsMap()) {
        report(element.Mark(), element_path,
               absl::StrCat("expected a mapping of fields, got ", describe_node(element)));
        continue;
      }
      read_message(element, *reflection.AddMessage(&parent, &field), element_path);
    } else {
      read_scalar(element, element_mark, parent, field, element_path);
    }
  }
}

void YamlReader::read_map(const YAML::Node& value, const YAML::Mark& key_mark, Message& parent,
                         const FieldDescriptor& field, const std::string& path) {
  const Reflection& reflection = *parent.GetReflection();
  if (value.IsNull()) {  // `labels:` with nothing under it
    reflection.ClearField(&parent, &field);
    return;
  }
  if (!value.IsMap()) {
    report(mark_of(value, key_mark), path, absl::StrCat("expected a mapping, got ", describe_node(value)));
    return;
  }
  if (value.size() > kMaxEntries) {
    report(value.Mark(), path, absl::StrCat("has ", value.size(), " entries; at most ", kMaxEntries));
    return;
  }
  reflection.ClearField(&parent, &field);
  std::map<std::string, int> first_line_of_key;
  for (auto it = value.begin(); it != value.end(); ++it) {
    const YAML::Node key = it->first;  // a copy: the iterator hands out a temporary pair
    const YAML::Node value_of_key = it->second;
    if (!key.IsScalar()) {
      report(key.Mark(), path, absl::StrCat("keys must be plain text, got ", describe_node(key)));
      continue;
    }
    std::string entry_path = join_path(path, path_part(key.Scalar()));
    auto [seen, first_time] = first_line_of_key.emplace(key.Scalar(), key.Mark().line + 1);
    if (!first_time) {
      report(key.Mark(), entry_path, absl::StrCat("written twice (first on line ", seen->second, ")"));
      continue;
    }
    if (auto at = location_of(key.Mark())) where_.record(entry_path, *at);
    Message& entry = *reflection.AddMessage(&parent, &field);
    const Descriptor& entry_type = *entry.GetDescriptor();
    read_scalar(key, key.Mark(), entry, *entry_type.map_key(), entry_path);
    read_field(value_of_key, key.Mark(), entry, *entry_type.map_value(), entry_path);
  }
}

void YamlReader::read_map_entry(const std::string& key, const YAML::Node& value, Message& parent,
                              const FieldDescriptor& map_field, const std::string& path) {
  const Descriptor& entry_type = *map_field.message_type();
  const FieldDescriptor& key_field = *entry_type.map_key();
  if (key_field.cpp_type() != FieldDescriptor::CPPTYPE_STRING) {
    report(value.Mark(), path, "entries of this map cannot be set one by one; set the whole map");
    return;
  }
  const Reflection& reflection = *parent.GetReflection();
  Message* entry = nullptr;
  for (int i = 0; i < reflection.FieldSize(parent, &map_field); ++i) {
    Message* candidate = reflection.MutableRepeatedMessage(&parent, &map_field, i);
    if (candidate->GetReflection()->GetString(*candidate, &key_field) == key) entry = candidate;
  }
  if (entry == nullptr) {
    if (static_cast<size_t>(reflection.FieldSize(parent, &map_field)) >= kMaxEntries) {
      report(value.Mark(), path, absl::StrCat("would have more than ", kMaxEntries, " entries"));
      return;
    }
    entry = reflection.AddMessage(&parent, &map_field);
    entry->GetReflection()->SetString(entry, &key_field, key);
  }
  read_field(value, value.Mark(), *entry, *entry_type.map_value(), path);
}

void YamlReader::read_scalar(const YAML::Node& value, const YAML::Mark& key_mark, Message& parent,
                            const FieldDescriptor& field, const std::string& path) {
  const YAML::Mark& mark = mark_of(value, key_mark);
  if (!value.IsScalar()) {
    report(mark, path, absl::StrCat("expected ", expected_kind(field), ", got ", describe_node(value)));
    return;
  }
  const std::string& text = value.Scalar();
  const bool is_string = field.cpp_type() == FieldDescriptor::CPPTYPE_STRING;
  // "?" is yaml-cpp's tag for a plain (unquoted, untagged) scalar. Anything else was
  // written as text on purpose: `steps: "200"` is refused rather than guessed at (below,
  // once the text is known to be otherwise valid, so the message can say just that).
  const bool quoted = !is_string && value.Tag() != "?";
  const Reflection& r = *parent.GetReflection();
  const bool add = field.is_repeated();
  auto fail = [&](const absl::Status& why) { report(mark, path, std::string(why.message())); };
  auto refuse_quoted = [&]() {
    report(mark, path,
           absl::StrCat("expected ", expected_kind(field), ", got the quoted text ", quote(text),
                        "; write it without quotes"));
  };
  switch (field.cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32: {
      auto v = parse_integer(text, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max());
      if (!v.ok()) return fail(v.status());
      if (quoted) return refuse_quoted();
      add ? r.AddInt32(&parent, &field, static_cast<int32_t>(*v))
          : r.SetInt32(&parent, &field, static_cast<int32_t>(*v));
      return;
    }
    case FieldDescriptor::CPPTYPE_INT64: {
      auto v = parse_integer(text, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
      if (!v.ok()) return fail(v.status());
      if (quoted) return refuse_quoted();
      add ? r.AddInt64(&parent, &field, *v) : r.SetInt64(&parent, &field, *v);
      return;
    }
    case FieldDescriptor::CPPTYPE_UINT32: {
      auto v = parse_integer(text, 0, std::numeric_limits<uint32_t>::max());
      if (!v.ok()) return fail(v.status());
      if (quoted) return refuse_quoted();
      add ? r.AddUInt32(&parent, &field, static_cast<uint32_t>(*v))
          : r.SetUInt32(&parent, &field, static_cast<uint32_t>(*v));
      return;
    }
    case FieldDescriptor::CPPTYPE_UINT64: {
      auto v = parse_unsigned(text);
      if (!v.ok()) return fail(v.status());
      if (quoted) return refuse_quoted();
      add ? r.AddUInt64(&parent, &field, *v) : r.SetUInt64(&parent, &field, *v);
      return;
    }
    case FieldDescriptor::CPPTYPE_DOUBLE: {
      auto v = parse_number(text);
      if (!v.ok()) return fail(v.status());
      if (quoted) return refuse_quoted();
      add ? r.AddDouble(&parent, &field, *v) : r.SetDouble(&parent, &field, *v);
      return;
    }
    case FieldDescriptor::CPPTYPE_FLOAT: {
      auto v = parse_number(text);
      if (!v.ok()) return fail(v.status());
      if (quoted) return refuse_quoted();
      if (*v > FLT_MAX || *v < -FLT_MAX) return fail(absl::InvalidArgumentError("is too large for a float"));
      add ? r.AddFloat(&parent, &field, static_cast<float>(*v))
          : r.SetFloat(&parent, &field, static_cast<float>(*v));
      return;
    }
    case FieldDescriptor::CPPTYPE_BOOL: {
      auto v = parse_bool(text);
      if (!v.ok()) return fail(v.status());
      if (quoted) return refuse_quoted();
      add ? r.AddBool(&parent, &field, *v) : r.SetBool(&parent, &field, *v);
      return;
    }
    case FieldDescriptor::CPPTYPE_ENUM: {
      auto v = parse_enum_name(text, *field.enum_type());
      if (!v.ok()) return fail(v.status());
      if (quoted) return refuse_quoted();
      add ? r.AddEnum(&parent, &field, *v) : r.SetEnum(&parent, &field, *v);
      return;
    }
    case FieldDescriptor::CPPTYPE_STRING:
      add ? r.AddString(&parent, &field, text) : r.SetString(&parent, &field, text);
      return;
    case FieldDescriptor::CPPTYPE_MESSAGE:
      break;  // handled by ReadField
  }
  report(mark, path, absl::StrCat("expected ", expected_kind(field), ", got ", describe_node(value)));
}

}  // namespace fp8::jobspec
