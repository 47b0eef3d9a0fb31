#include "common/rpc/request_limits.h"

#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fp8/v1/limits.pb.h"

namespace fp8::rpc {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

int64_t max_bytes(const FieldDescriptor& f) { return f.options().GetExtension(v1::max_bytes); }
int64_t max_items(const FieldDescriptor& f) { return f.options().GetExtension(v1::max_items); }

bool is_text(const FieldDescriptor& f) {
  return f.cpp_type() == FieldDescriptor::CPPTYPE_STRING;
}

absl::Status over(const std::string& path, size_t size, const char* unit, int64_t limit) {
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": ", size, " ", unit, ", more than the limit of ", limit));
}

absl::Status check_message(const Message& m, const std::string& prefix);

// One value of a singular or repeated field (index -1: singular).
absl::Status check_value(const Message& m, const FieldDescriptor& f, int index, const std::string& path) {
  const Reflection& r = *m.GetReflection();
  if (is_text(f)) {
    std::string scratch;
    const std::string& s = index < 0 ? r.GetStringReference(m, &f, &scratch)
                                     : r.GetRepeatedStringReference(m, &f, index, &scratch);
    const int64_t limit = max_bytes(f);
    if (limit > 0 && static_cast<int64_t>(s.size()) > limit) return over(path, s.size(), "bytes", limit);
    return absl::OkStatus();
  }
  if (f.cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) return absl::OkStatus();
  const Message& sub = index < 0 ? r.GetMessage(m, &f) : r.GetRepeatedMessage(m, &f, index);
  if (f.is_map()) {
    // A map entry: its key and value are bounded by the map field's max_bytes.
    const Descriptor& entry = *f.message_type();
    const int64_t limit = max_bytes(f);
    for (const FieldDescriptor* kv : {entry.map_key(), entry.map_value()}) {
      if (!is_text(*kv)) continue;
      std::string scratch;
      const std::string& s = sub.GetReflection()->GetStringReference(sub, kv, &scratch);
      if (limit > 0 && static_cast<int64_t>(s.size()) > limit) {
        return over(absl::StrCat(path, kv == entry.map_key() ? " (a key)" : " (a value)"), s.size(), "bytes", limit);
      }
    }
    return absl::OkStatus();
  }
  const int64_t limit = max_bytes(f);
  if (limit > 0) {
    const size_t size = sub.ByteSizeLong();
    if (static_cast<int64_t>(size) > limit) return over(path, size, "bytes", limit);
  }
  return check_message(sub, path + ".");
}

absl::Status check_message(const Message& m, const std::string& prefix) {
  const Reflection& r = *m.GetReflection();
  std::vector<const FieldDescriptor*> set;
  r.ListFields(m, &set);
  for (const FieldDescriptor* f : set) {
    const std::string path = prefix + f->name();
    if (!f->is_repeated()) {
      if (absl::Status s = check_value(m, *f, -1, path); !s.ok()) return s;
      continue;
    }
    const int size = r.FieldSize(m, f);
    const int64_t items = max_items(*f);
    if (items > 0 && size > items) return over(path, static_cast<size_t>(size), "entries", items);
    for (int i = 0; i < size; ++i) {
      const std::string item = f->is_map() ? path : absl::StrCat(path, "[", i, "]");
      if (absl::Status s = check_value(m, *f, i, item); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

void collect_unbounded(const Descriptor& type, const std::string& prefix, std::set<const Descriptor*>& on_path,
                      std::vector<std::string>& out) {
  if (!on_path.insert(&type).second) return;  // a recursive type: checked where it began
  for (int i = 0; i < type.field_count(); ++i) {
    const FieldDescriptor& f = *type.field(i);
    const std::string path = prefix + f.name();
    if (f.is_map()) {
      if (max_items(f) <= 0 || max_bytes(f) <= 0) out.push_back(path);
      continue;
    }
    if (f.is_repeated() && max_items(f) <= 0) out.push_back(path);
    if (is_text(f) && max_bytes(f) <= 0) out.push_back(path);
    if (f.cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) collect_unbounded(*f.message_type(), path + ".", on_path, out);
  }
  on_path.erase(&type);
}

}  // namespace

absl::Status check_request_limits(const Message& message, std::string_view prefix) {
  return check_message(message, std::string(prefix));
}

std::vector<std::string> unbounded_fields(const Descriptor& type) {
  std::vector<std::string> out;
  std::set<const Descriptor*> on_path;
  collect_unbounded(type, "", on_path, out);
  return out;
}

std::string quote_for_error(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return std::string(text);
  size_t cut = max_bytes;
  // Back off to the start of a UTF-8 character (continuation bytes are 10xxxxxx).
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return absl::StrCat(absl::string_view(text.data(), cut), "... (", text.size(), " bytes)");
}

}  // namespace fp8::rpc
