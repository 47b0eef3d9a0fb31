#include "client/fp8ctl/output.h"

#include <iostream>
#include <map>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/struct.pb.h"
#include "client/fp8ctl/exit_codes.h"
#include "client/fp8ctl/rpc_errors.h"
#include "google/protobuf/util/json_util.h"

namespace fp8::ctl {
namespace {

using google::protobuf::Value;

// Plain scalars that YAML would read as something other than the same string.
bool NeedsQuotes(const std::string& s) {
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
std::string Quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += absl::StrCat("\\x", absl::Hex(static_cast<unsigned char>(c), absl::kZeroPad2));
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string Scalar(const Value& v) {
  switch (v.kind_case()) {
    case Value::kNullValue: return "null";
    case Value::kBoolValue: return v.bool_value() ? "true" : "false";
    case Value::kNumberValue: return absl::StrFormat("%.10g", v.number_value());
    case Value::kStringValue: return NeedsQuotes(v.string_value()) ? Quoted(v.string_value()) : v.string_value();
    default: return "";
  }
}

bool IsEmptyContainer(const Value& v) {
  return (v.has_struct_value() && v.struct_value().fields().empty()) ||
         (v.has_list_value() && v.list_value().values().empty());
}

void Emit(const Value& v, int indent, std::string* out);

// The text after "key:" or "-": a scalar on the same line, a container on the next ones.
void EmitAfter(const Value& v, int indent, bool in_list, std::string* out) {
  if (IsEmptyContainer(v)) {
    *out += v.has_struct_value() ? " {}\n" : " []\n";
  } else if (v.has_struct_value()) {
    *out += "\n";
    Emit(v, indent + 2, out);
  } else if (v.has_list_value()) {
    *out += "\n";
    // A list under a key stays at the key's indent (common YAML style); nested lists indent.
    Emit(v, in_list ? indent + 2 : indent, out);
  } else {
    *out += " " + Scalar(v) + "\n";
  }
}

void Emit(const Value& v, int indent, std::string* out) {
  const std::string pad(static_cast<size_t>(indent), ' ');
  if (v.has_struct_value()) {
    // JSON object order is lost in Struct's map; sort for stable output.
    std::map<std::string, const Value*> fields;
    for (const auto& [k, fv] : v.struct_value().fields()) fields[k] = &fv;
    for (const auto& [k, fv] : fields) {
      *out += pad + (NeedsQuotes(k) ? Quoted(k) : k) + ":";
      EmitAfter(*fv, indent, false, out);
    }
  } else if (v.has_list_value()) {
    for (const Value& item : v.list_value().values()) {
      if (item.has_struct_value() && !IsEmptyContainer(item)) {
        // Compact form: the map's first key on the dash's line ("- id: job-1").
        std::string block;
        Emit(item, indent + 2, &block);
        *out += pad + "- " + block.substr(static_cast<size_t>(indent) + 2);
        continue;
      }
      *out += pad + "-";
      EmitAfter(item, indent, true, out);
    }
  } else {
    *out += pad + Scalar(v) + "\n";
  }
}

}  // namespace

void AddOutputFlag(CLI::App* verb, OutputFormat* format) {
  verb->add_option_function<std::string>(
      "-o,--output",
      [format](const std::string& value) {
        const std::string v = absl::AsciiStrToLower(value);
        if (v == "table") {
          *format = OutputFormat::kTable;
        } else if (v == "json") {
          *format = OutputFormat::kJson;
        } else if (v == "yaml") {
          *format = OutputFormat::kYaml;
        } else {
          throw CLI::ValidationError("--output", absl::StrCat("expected table, json or yaml, not '", value, "'"));
        }
      },
      "table (default), json or yaml");
}

absl::StatusOr<std::string> MessageJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  // Zeros too ("rank": 0), so that scripts need not know proto3 drops defaults.
  options.always_print_primitive_fields = true;
  std::string json;
  if (auto s = google::protobuf::util::MessageToJsonString(message, &json, options); !s.ok()) {
    return absl::InternalError(absl::StrCat("cannot render ", message.GetTypeName(), " as JSON: ", s.ToString()));
  }
  if (json.empty() || json.back() != '\n') json += "\n";
  return json;
}

absl::StatusOr<std::string> JsonToYaml(const std::string& json) {
  Value value;
  if (auto s = google::protobuf::util::JsonStringToMessage(json, &value); !s.ok()) {
    return absl::InternalError(absl::StrCat("cannot convert JSON to YAML: ", s.ToString()));
  }
  if (IsEmptyContainer(value)) return value.has_struct_value() ? std::string("{}\n") : std::string("[]\n");
  std::string out;
  Emit(value, 0, &out);
  return out;
}

absl::StatusOr<std::string> RenderJson(const std::string& json, OutputFormat format) {
  if (format == OutputFormat::kYaml) return JsonToYaml(json);
  return json.empty() || json.back() != '\n' ? json + "\n" : json;
}

int PrintMessage(const google::protobuf::Message& message, OutputFormat format) {
  absl::StatusOr<std::string> out = MessageJson(message);
  if (out.ok()) out = RenderJson(*out, format);
  if (!out.ok()) return Report({kExitError, std::string(out.status().message())});
  std::cout << *out;
  return static_cast<int>(kExitOk);
}

}  // namespace fp8::ctl
