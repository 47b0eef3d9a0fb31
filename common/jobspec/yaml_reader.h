// Fills a protobuf message from a YAML tree by walking the message's descriptor, so the
// schema in proto/ is the only list of what job.yaml may contain: a key that names no
// field is reported (with the closest field name), and every scalar is checked against
// its field's type. Problems become Issues; nothing throws.
#pragma once

#include <optional>
#include <string>

#include "common/jobspec/issues.h"
#include "common/jobspec/source_map.h"
#include "common/jobspec/yaml_cpp.h"
#include "google/protobuf/message.h"

namespace fp8::jobspec {

class YamlReader {
 public:
  // `source` names the text being read in locations. `has_lines`: whether YAML marks are
  // positions in that source (false for an override's value, whose marks would be
  // positions in a fragment the user never saw).
  YamlReader(std::string source, int source_index, bool has_lines, SourceMap& where, Issues& issues);

  // Reads a mapping (or nothing: an empty section) into `message`. `path` is the dotted
  // path of `message` in the spec ("" for the spec itself).
  void read_message(const YAML::Node& node, google::protobuf::Message& message, const std::string& path);

  // Reads `value` into `field` of `parent`, replacing what the field held (a list or map
  // is replaced whole). `path` is the field's dotted path; `key_mark` is where the field
  // was named, used for values that carry no position of their own (an empty value).
  void read_field(const YAML::Node& value, const YAML::Mark& key_mark, google::protobuf::Message& parent,
                 const google::protobuf::FieldDescriptor& field, const std::string& path);

  // Sets one entry of a map field (`labels.team=ml`), keeping the others.
  void read_map_entry(const std::string& key, const YAML::Node& value, google::protobuf::Message& parent,
                    const google::protobuf::FieldDescriptor& map_field, const std::string& path);

  // Where `mark` is, as a location in this reader's source.
  std::optional<Location> location_of(const YAML::Mark& mark) const;

 private:
  void read_list(const YAML::Node& value, const YAML::Mark& key_mark, google::protobuf::Message& parent,
                const google::protobuf::FieldDescriptor& field, const std::string& path);
  void read_map(const YAML::Node& value, const YAML::Mark& key_mark, google::protobuf::Message& parent,
               const google::protobuf::FieldDescriptor& field, const std::string& path);
  // Sets a singular scalar field, or appends to a repeated one.
  void read_scalar(const YAML::Node& value, const YAML::Mark& key_mark, google::protobuf::Message& parent,
                  const google::protobuf::FieldDescriptor& field, const std::string& path);

  void report(const YAML::Mark& mark, const std::string& path, std::string message);

  std::string source_;
  int source_index_;
  bool has_lines_;
  SourceMap& where_;
  Issues& issues_;
};

// How a YAML node reads in a message: "a mapping", "a list", "nothing", "'abc'".
std::string describe_node(const YAML::Node& node);

}  // namespace fp8::jobspec
