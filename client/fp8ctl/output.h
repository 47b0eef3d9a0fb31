// --output for the verbs that print a response: table (the default), wide (the table with
// more columns), name (one `kind/ID` line per object, kubectl style, for scripts), and
// json or yaml: the response as a Document (message_document.h: the .proto field names,
// int64s as numbers, times as RFC 3339), JSON or block YAML of the same content.
#pragma once

#include <vector>

#include "client/fp8ctl/document.h"
#include "google/protobuf/message.h"

namespace CLI {
class App;
}  // namespace CLI

namespace fp8::ctl {

enum class OutputFormat { kTable, kWide, kName, kJson, kYaml };

// Adds --output/-o to a verb, accepting the formats in `offered` (the default: table);
// another is a usage error listing them.
void add_output_flag(CLI::App* verb, OutputFormat* format,
                   std::vector<OutputFormat> offered = {OutputFormat::kTable, OutputFormat::kJson,
                                                        OutputFormat::kYaml});

// json or yaml: the formats that print a Document.
bool is_document(OutputFormat format);

// `doc` as JSON or YAML (`format` must be one of them).
std::string render_document(const Document& doc, OutputFormat format);

// A verb's -o json|yaml output on stdout; returns the verb's exit code.
int print_document(const Document& doc, OutputFormat format);
int print_message(const google::protobuf::Message& message, OutputFormat format);

}  // namespace fp8::ctl
