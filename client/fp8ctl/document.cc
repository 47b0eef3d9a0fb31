#include "client/fp8ctl/document.h"

#include <charconv>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace fp8::ctl {
namespace {

template <typename T>
std::string shortest(T v) {
  char buf[64];
  const std::to_chars_result r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

// JSON's escapes for what must be escaped, and nothing else: '>' and non-ASCII UTF-8 stay
// as they are, so that the output reads like the table does.
std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += absl::StrFormat("\\u%04x", static_cast<unsigned char>(c));
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

bool is_empty_container(const Document& d) {
  return (d.kind() == Document::Kind::kArray && d.items().empty()) ||
         (d.kind() == Document::Kind::kObject && d.fields().empty());
}

void emit_json(const Document& d, int indent, std::string* out) {
  const std::string pad(static_cast<size_t>(indent) + 2, ' ');
  switch (d.kind()) {
    case Document::Kind::kNull: *out += "null"; return;
    case Document::Kind::kBool:
    case Document::Kind::kInt:
    case Document::Kind::kUint:
    case Document::Kind::kDouble: *out += d.text(); return;
    case Document::Kind::kString: *out += json_string(d.text()); return;
    case Document::Kind::kArray:
      if (d.items().empty()) {
        *out += "[]";
        return;
      }
      *out += "[";
      for (size_t i = 0; i < d.items().size(); ++i) {
        *out += (i == 0 ? "\n" : ",\n") + pad;
        emit_json(d.items()[i], indent + 2, out);
      }
      *out += "\n" + std::string(static_cast<size_t>(indent), ' ') + "]";
      return;
    case Document::Kind::kObject:
      if (d.fields().empty()) {
        *out += "{}";
        return;
      }
      *out += "{";
      for (size_t i = 0; i < d.fields().size(); ++i) {
        *out += (i == 0 ? "\n" : ",\n") + pad + json_string(d.fields()[i].first) + ": ";
        emit_json(d.fields()[i].second, indent + 2, out);
      }
      *out += "\n" + std::string(static_cast<size_t>(indent), ' ') + "}";
      return;
  }
}

// Plain scalars that YAML would read as something other than the same string.
bool needs_quotes(const std::string& s) {
  if (s.empty()) return true;
  const std::string lower = absl::AsciiStrToLower(s);
  for (const char* word : {"true", "false", "yes", "no", "on", "off", "null", "~", "y", "n"}) {
    if (lower == word) return true;
  }
  double d = 0;
  if (absl::SimpleAtod(s, &d)) return true;
  if (absl::ascii_isspace(static_cast<unsigned char>(s.front())) ||
      absl::ascii_isspace(static_cast<unsigned char>(s.back()))) {
    return true;
  }
  if (std::string("-?:,[]{}#&*!|>'\"%@`").find(s.front()) != std::string::npos) return true;
  if (absl::StrContains(s, ": ") || absl::StrContains(s, " #")) return true;
  for (char c : s) {
    if (static_cast<unsigned char>(c) < 0x20) return true;
  }
  return false;
}

// YAML double-quoted scalars take JSON's escapes.
std::string yaml_string(const std::string& s) { return needs_quotes(s) ? json_string(s) : s; }

std::string yaml_scalar(const Document& d) {
  switch (d.kind()) {
    case Document::Kind::kNull: return "null";
    case Document::Kind::kString: return yaml_string(d.text());
    default: return d.text();
  }
}

bool is_container(const Document& d) {
  return d.kind() == Document::Kind::kArray || d.kind() == Document::Kind::kObject;
}

void emit_yaml(const Document& d, int indent, std::string* out);

// The text after "key:" or "-": a scalar on the same line, a container on the next ones.
void emit_yaml_after(const Document& d, int indent, bool in_list, std::string* out) {
  if (is_empty_container(d)) {
    *out += d.kind() == Document::Kind::kObject ? " {}\n" : " []\n";
  } else if (d.kind() == Document::Kind::kObject) {
    *out += "\n";
    emit_yaml(d, indent + 2, out);
  } else if (d.kind() == Document::Kind::kArray) {
    *out += "\n";
    // A list under a key stays at the key's indent (common YAML style); nested lists indent.
    emit_yaml(d, in_list ? indent + 2 : indent, out);
  } else {
    *out += " " + yaml_scalar(d) + "\n";
  }
}

void emit_yaml(const Document& d, int indent, std::string* out) {
  const std::string pad(static_cast<size_t>(indent), ' ');
  if (d.kind() == Document::Kind::kObject) {
    for (const auto& [key, value] : d.fields()) {
      *out += pad + yaml_string(key) + ":";
      emit_yaml_after(value, indent, false, out);
    }
  } else if (d.kind() == Document::Kind::kArray) {
    for (const Document& item : d.items()) {
      if (item.kind() == Document::Kind::kObject && !is_empty_container(item)) {
        // Compact form: the map's first key on the dash's line ("- id: job-1").
        std::string block;
        emit_yaml(item, indent + 2, &block);
        *out += pad + "- " + block.substr(static_cast<size_t>(indent) + 2);
        continue;
      }
      *out += pad + "-";
      emit_yaml_after(item, indent, true, out);
    }
  } else {
    *out += pad + yaml_scalar(d) + "\n";
  }
}

}  // namespace

Document Document::of_bool(bool v) {
  Document d;
  d.kind_ = Kind::kBool;
  d.text_ = v ? "true" : "false";
  return d;
}

Document Document::of_int(int64_t v) {
  Document d;
  d.kind_ = Kind::kInt;
  d.text_ = absl::StrCat(v);
  return d;
}

Document Document::of_uint(uint64_t v) {
  Document d;
  d.kind_ = Kind::kUint;
  d.text_ = absl::StrCat(v);
  return d;
}

Document Document::of_double(double v, bool float_precision) {
  if (std::isnan(v)) return of_string("NaN");
  if (std::isinf(v)) return of_string(v > 0 ? "Infinity" : "-Infinity");
  Document d;
  d.kind_ = Kind::kDouble;
  d.text_ = float_precision ? shortest(static_cast<float>(v)) : shortest(v);
  return d;
}

Document Document::of_string(std::string v) {
  Document d;
  d.kind_ = Kind::kString;
  d.text_ = std::move(v);
  return d;
}

Document Document::array() {
  Document d;
  d.kind_ = Kind::kArray;
  return d;
}

Document Document::object() {
  Document d;
  d.kind_ = Kind::kObject;
  return d;
}

Document& Document::add(Document v) {
  items_.push_back(std::move(v));
  return *this;
}

Document& Document::set(const std::string& key, Document v) {
  for (auto& [k, existing] : fields_) {
    if (k == key) {
      existing = std::move(v);
      return *this;
    }
  }
  fields_.emplace_back(key, std::move(v));
  return *this;
}

const Document* Document::find(const std::string& key) const {
  for (const auto& [k, v] : fields_) {
    if (k == key) return &v;
  }
  return nullptr;
}

std::string Document::json() const {
  std::string out;
  emit_json(*this, 0, &out);
  return out + "\n";
}

std::string Document::yaml() const {
  if (is_empty_container(*this)) return kind_ == Kind::kObject ? "{}\n" : "[]\n";
  std::string out;
  if (is_container(*this)) {
    emit_yaml(*this, 0, &out);
  } else {
    out = yaml_scalar(*this) + "\n";
  }
  return out;
}

}  // namespace fp8::ctl
