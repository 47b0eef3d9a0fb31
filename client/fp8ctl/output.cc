#include "client/fp8ctl/output.h"

#include <iostream>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/fp8ctl/exit_codes.h"
#include "client/fp8ctl/message_document.h"

namespace fp8::ctl {
namespace {

const char* FormatName(OutputFormat f) {
  switch (f) {
    case OutputFormat::kTable: return "table";
    case OutputFormat::kWide: return "wide";
    case OutputFormat::kName: return "name";
    case OutputFormat::kJson: return "json";
    case OutputFormat::kYaml: return "yaml";
  }
  return "table";
}

// "table, json or yaml"
std::string Choices(const std::vector<OutputFormat>& offered) {
  std::vector<std::string> names;
  for (OutputFormat f : offered) names.push_back(FormatName(f));
  if (names.size() < 2) return names.empty() ? std::string() : names[0];
  const std::string last = names.back();
  names.pop_back();
  return absl::StrCat(absl::StrJoin(names, ", "), " or ", last);
}

// "table|json|yaml"
std::string TypeName(const std::vector<OutputFormat>& offered) {
  std::vector<std::string> names;
  for (OutputFormat f : offered) names.push_back(FormatName(f));
  return absl::StrJoin(names, "|");
}

}  // namespace

void AddOutputFlag(CLI::App* verb, OutputFormat* format, std::vector<OutputFormat> offered) {
  const std::string choices = Choices(offered);
  verb->add_option_function<std::string>(
      "-o,--output",
      [format, offered, choices](const std::string& value) {
        const std::string v = absl::AsciiStrToLower(value);
        for (OutputFormat f : offered) {
          if (v == FormatName(f)) {
            *format = f;
            return;
          }
        }
        throw CLI::ValidationError("--output", absl::StrCat("expected ", choices, ", not '", value, "'"));
      },
      absl::StrCat(choices, " (default: table)"))
      ->type_name(TypeName(offered));  // the help's "-o table|json|yaml"; completion reads it
}

bool IsDocument(OutputFormat format) { return format == OutputFormat::kJson || format == OutputFormat::kYaml; }

std::string RenderDocument(const Document& doc, OutputFormat format) {
  return format == OutputFormat::kYaml ? doc.Yaml() : doc.Json();
}

int PrintDocument(const Document& doc, OutputFormat format) {
  std::cout << RenderDocument(doc, format);
  std::cout.flush();
  return static_cast<int>(kExitOk);
}

int PrintMessage(const google::protobuf::Message& message, OutputFormat format) {
  return PrintDocument(MessageDocument(message), format);
}

}  // namespace fp8::ctl
