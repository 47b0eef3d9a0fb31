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

const char* format_name(OutputFormat f) {
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
std::string choice_list(const std::vector<OutputFormat>& offered) {
  std::vector<std::string> names;
  for (OutputFormat f : offered) names.push_back(format_name(f));
  if (names.size() < 2) return names.empty() ? std::string() : names[0];
  const std::string last = names.back();
  names.pop_back();
  return absl::StrCat(absl::StrJoin(names, ", "), " or ", last);
}

// "table|json|yaml"
std::string type_name(const std::vector<OutputFormat>& offered) {
  std::vector<std::string> names;
  for (OutputFormat f : offered) names.push_back(format_name(f));
  return absl::StrJoin(names, "|");
}

}  // namespace

void add_output_flag(CLI::App* verb, OutputFormat* format, std::vector<OutputFormat> offered) {
  const std::string choices = choice_list(offered);
  verb->add_option_function<std::string>(
      "-o,--output",
      [format, offered, choices](const std::string& value) {
        const std::string v = absl::AsciiStrToLower(value);
        for (OutputFormat f : offered) {
          if (v == format_name(f)) {
            *format = f;
            return;
          }
        }
        throw CLI::ValidationError("--output", absl::StrCat("expected ", choices, ", not '", value, "'"));
      },
      absl::StrCat(choices, " (default: table)"))
      ->type_name(type_name(offered));  // the help's "-o table|json|yaml"; completion reads it
}

bool is_document(OutputFormat format) { return format == OutputFormat::kJson || format == OutputFormat::kYaml; }

std::string render_document(const Document& doc, OutputFormat format) {
  return format == OutputFormat::kYaml ? doc.yaml() : doc.json();
}

int print_document(const Document& doc, OutputFormat format) {
  std::cout << render_document(doc, format);
  std::cout.flush();
  return static_cast<int>(kExitOk);
}

int print_message(const google::protobuf::Message& message, OutputFormat format) {
  return print_document(message_document(message), format);
}

}  // namespace fp8::ctl
