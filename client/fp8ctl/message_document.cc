#include "client/fp8ctl/message_document.h"

#include <map>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "google/protobuf/descriptor.h"

namespace fp8::ctl {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

constexpr char kTimeSuffix[] = "_unix_ms";

bool is_time(const FieldDescriptor& f) {
  return f.cpp_type() == FieldDescriptor::CPPTYPE_INT64 && !f.is_repeated() && absl::EndsWith(f.name(), kTimeSuffix);
}

std::string time_key(const std::string& name) {
  const std::string stem = name.substr(0, name.size() - (sizeof kTimeSuffix - 1));
  return stem == "time" ? stem : absl::StrCat(stem, "_time");
}

Document enum_document(const google::protobuf::EnumDescriptor& type, int number) {
  const google::protobuf::EnumValueDescriptor* v = type.FindValueByNumber(number);
  return v != nullptr ? Document::of_string(v->name()) : Document::of_int(number);
}

// One value of `f` in `m`: element `index` of a repeated field, or the field (-1).
Document value(const Message& m, const FieldDescriptor& f, int index) {
  const Reflection& r = *m.GetReflection();
  const bool rep = index >= 0;
  switch (f.cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32: return Document::of_int(rep ? r.GetRepeatedInt32(m, &f, index) : r.GetInt32(m, &f));
    case FieldDescriptor::CPPTYPE_INT64: return Document::of_int(rep ? r.GetRepeatedInt64(m, &f, index) : r.GetInt64(m, &f));
    case FieldDescriptor::CPPTYPE_UINT32:
      return Document::of_uint(rep ? r.GetRepeatedUInt32(m, &f, index) : r.GetUInt32(m, &f));
    case FieldDescriptor::CPPTYPE_UINT64:
      return Document::of_uint(rep ? r.GetRepeatedUInt64(m, &f, index) : r.GetUInt64(m, &f));
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return Document::of_double(rep ? r.GetRepeatedDouble(m, &f, index) : r.GetDouble(m, &f));
    case FieldDescriptor::CPPTYPE_FLOAT:
      return Document::of_double(rep ? r.GetRepeatedFloat(m, &f, index) : r.GetFloat(m, &f), /*float_precision=*/true);
    case FieldDescriptor::CPPTYPE_BOOL: return Document::of_bool(rep ? r.GetRepeatedBool(m, &f, index) : r.GetBool(m, &f));
    case FieldDescriptor::CPPTYPE_ENUM:
      return enum_document(*f.enum_type(), rep ? r.GetRepeatedEnumValue(m, &f, index) : r.GetEnumValue(m, &f));
    case FieldDescriptor::CPPTYPE_STRING: {
      std::string s = rep ? r.GetRepeatedString(m, &f, index) : r.GetString(m, &f);
      // bytes as protobuf's JSON mapping has them; they may not be text.
      if (f.type() == FieldDescriptor::TYPE_BYTES) s = absl::Base64Escape(s);
      return Document::of_string(std::move(s));
    }
    case FieldDescriptor::CPPTYPE_MESSAGE:
      return message_document(rep ? r.GetRepeatedMessage(m, &f, index) : r.GetMessage(m, &f));
  }
  return Document();
}

// A map entry's key as text (JSON object keys are strings).
std::string map_key(const Message& entry) {
  const FieldDescriptor& key = *entry.GetDescriptor()->map_key();
  const Document d = value(entry, key, -1);
  return d.text();
}

}  // namespace

Document time_document(int64_t unix_ms) {
  if (unix_ms <= 0) return Document();
  return Document::of_string(
      absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::FromUnixMillis(unix_ms), absl::UTCTimeZone()));
}

Document message_document(const Message& m) {
  const google::protobuf::Descriptor& type = *m.GetDescriptor();
  const Reflection& r = *m.GetReflection();
  Document doc = Document::object();
  for (int i = 0; i < type.field_count(); ++i) {
    const FieldDescriptor& f = *type.field(i);
    if (f.is_map()) {
      // Sorted by key: a map's order on the wire is no order.
      std::map<std::string, Document> sorted;
      for (int e = 0; e < r.FieldSize(m, &f); ++e) {
        const Message& entry = r.GetRepeatedMessage(m, &f, e);
        sorted[map_key(entry)] = value(entry, *entry.GetDescriptor()->map_value(), -1);
      }
      Document map = Document::object();
      for (auto& [key, value] : sorted) map.set(key, std::move(value));
      doc.set(f.name(), std::move(map));
    } else if (f.is_repeated()) {
      Document list = Document::array();
      for (int e = 0; e < r.FieldSize(m, &f); ++e) list.add(value(m, f, e));
      doc.set(f.name(), std::move(list));
    } else if (f.has_presence() && !r.HasField(m, &f)) {
      continue;  // an unset message, optional or oneof member
    } else if (is_time(f)) {
      doc.set(time_key(f.name()), time_document(r.GetInt64(m, &f)));
    } else {
      doc.set(f.name(), value(m, f, -1));
    }
  }
  return doc;
}

}  // namespace fp8::ctl
