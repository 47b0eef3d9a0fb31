// --output table|json|yaml for the verbs that print a response. json is the response
// message as protobuf's JSON mapping (field names as in the .proto, so they match
// job.yaml); yaml is the same document rendered as block YAML.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "google/protobuf/message.h"

namespace CLI {
class App;
}  // namespace CLI

namespace fp8::ctl {

enum class OutputFormat { kTable, kJson, kYaml };

// Adds --output/-o (default table) to a verb.
void AddOutputFlag(CLI::App* verb, OutputFormat* format);

// Pretty-printed JSON of a message, ending with a newline.
absl::StatusOr<std::string> MessageJson(const google::protobuf::Message& message);

// Block YAML of a JSON document (any JSON, not only messages).
absl::StatusOr<std::string> JsonToYaml(const std::string& json);

// `json` in the chosen format (json or yaml).
absl::StatusOr<std::string> RenderJson(const std::string& json, OutputFormat format);

// A verb's -o json|yaml output: `message` on stdout in `format`. Returns the verb's exit
// code (an error, reported, when it cannot be rendered).
int PrintMessage(const google::protobuf::Message& message, OutputFormat format);

}  // namespace fp8::ctl
