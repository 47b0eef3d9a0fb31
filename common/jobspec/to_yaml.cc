#include "common/jobspec/to_yaml.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "common/jobspec/scalars.h"
#include "common/jobspec/yaml_cpp.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"

namespace fp8::jobspec {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

void emit_message(YAML::Emitter& out, const Message& message);

// One value of a scalar field; `index` < 0 for a singular field.
void emit_scalar(YAML::Emitter& out, const Message& m, const FieldDescriptor& f, int index) {
  const Reflection& r = *m.GetReflection();
  const bool rep = index >= 0;
  switch (f.cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      out << (rep ? r.GetRepeatedInt32(m, &f, index) : r.GetInt32(m, &f));
      return;
    case FieldDescriptor::CPPTYPE_INT64:
      out << (rep ? r.GetRepeatedInt64(m, &f, index) : r.GetInt64(m, &f));
      return;
    case FieldDescriptor::CPPTYPE_UINT32:
      out << (rep ? r.GetRepeatedUInt32(m, &f, index) : r.GetUInt32(m, &f));
      return;
    case FieldDescriptor::CPPTYPE_UINT64:
      out << (rep ? r.GetRepeatedUInt64(m, &f, index) : r.GetUInt64(m, &f));
      return;
    case FieldDescriptor::CPPTYPE_DOUBLE:
      out << format_number(rep ? r.GetRepeatedDouble(m, &f, index) : r.GetDouble(m, &f));
      return;
    case FieldDescriptor::CPPTYPE_FLOAT:
      out << format_number(rep ? r.GetRepeatedFloat(m, &f, index) : r.GetFloat(m, &f));
      return;
    case FieldDescriptor::CPPTYPE_BOOL:
      out << YAML::TrueFalseBool << (rep ? r.GetRepeatedBool(m, &f, index) : r.GetBool(m, &f));
      return;
    case FieldDescriptor::CPPTYPE_ENUM: {
      const auto* value = rep ? r.GetRepeatedEnum(m, &f, index) : r.GetEnum(m, &f);
      out << enum_value_name(*value);
      return;
    }
    case FieldDescriptor::CPPTYPE_STRING:
      // Always as a string; the emitter quotes it where YAML would misread it.
      out << (rep ? r.GetRepeatedString(m, &f, index) : r.GetString(m, &f));
      return;
    case FieldDescriptor::CPPTYPE_MESSAGE:
      emit_message(out, rep ? r.GetRepeatedMessage(m, &f, index) : r.GetMessage(m, &f));
      return;
  }
}

void emit_map(YAML::Emitter& out, const Message& m, const FieldDescriptor& f) {
  const Reflection& r = *m.GetReflection();
  const FieldDescriptor& key = *f.message_type()->map_key();
  const FieldDescriptor& value = *f.message_type()->map_value();
  // Map order is unspecified; sorted keys give the same text for the same spec.
  std::vector<std::pair<std::string, const Message*>> entries;
  for (int i = 0; i < r.FieldSize(m, &f); ++i) {
    const Message& entry = r.GetRepeatedMessage(m, &f, i);
    entries.emplace_back(entry.GetReflection()->GetString(entry, &key), &entry);
  }
  std::sort(entries.begin(), entries.end());
  out << YAML::BeginMap;
  for (const auto& [name, entry] : entries) {
    out << YAML::Key << name << YAML::Value;
    emit_scalar(out, *entry, value, -1);
  }
  out << YAML::EndMap;
}

bool should_emit(const Message& m, const FieldDescriptor& f) {
  const Reflection& r = *m.GetReflection();
  if (f.is_map()) return r.FieldSize(m, &f) > 0;
  // Lists are written even when empty: a list left out takes its default (fp8.exclude's
  // is ["output"]), so an empty one must say so.
  if (f.is_repeated()) return true;
  if (f.has_presence()) return r.HasField(m, &f);
  return f.cpp_type() != FieldDescriptor::CPPTYPE_ENUM || r.GetEnumValue(m, &f) != 0;
}

void emit_message(YAML::Emitter& out, const Message& message) {
  const google::protobuf::Descriptor& type = *message.GetDescriptor();
  out << YAML::BeginMap;
  for (int i = 0; i < type.field_count(); ++i) {
    const FieldDescriptor& f = *type.field(i);
    if (!should_emit(message, f)) continue;
    out << YAML::Key << f.name() << YAML::Value;
    if (f.is_map()) {
      emit_map(out, message, f);
    } else if (f.is_repeated()) {
      const bool scalars = f.cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE;
      if (scalars) out << YAML::Flow;
      out << YAML::BeginSeq;
      for (int j = 0; j < message.GetReflection()->FieldSize(message, &f); ++j)
        emit_scalar(out, message, f, j);
      out << YAML::EndSeq;
    } else {
      emit_scalar(out, message, f, -1);
    }
  }
  out << YAML::EndMap;
}

}  // namespace

std::string to_yaml(const v1::JobSpec& spec) {
  YAML::Emitter out;
  emit_message(out, spec);
  return std::string(out.c_str()) + "\n";
}

}  // namespace fp8::jobspec
