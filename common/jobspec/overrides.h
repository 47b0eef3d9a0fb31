// Dotted overrides, `train.steps=200`, as a future `--set` flag will pass them. The path
// is checked against the schema like a YAML key; the value is YAML read as the field's
// type, exactly as in job.yaml:
//   train.lr=3e-4                  a scalar
//   fp8.exclude=[output, layers.0.*]   a list, replaced whole
//   fp8.gemms={output: {fast_accum: false}}   a section, merged into what is there
//   labels.team=ml                 one entry of a map
#pragma once

#include <string>
#include <string_view>

#include "common/jobspec/issues.h"
#include "common/jobspec/source_map.h"
#include "fp8/v1/job.pb.h"

namespace fp8::jobspec {

struct Assignment {
  std::string text;   // as given, for messages
  std::string path;   // "train.steps"
  std::string value;  // "200"
};

// Splits "path=value" at the first '='; an issue (and nullopt) when there is none or the
// path is empty.
std::optional<Assignment> parse_assignment(std::string_view text, int source_index, Issues& issues);

// Sets the field. Problems become issues located at the override itself; `where` learns
// that the field now comes from this override.
void apply_assignment(const Assignment& assignment, int source_index, v1::JobSpec& spec, SourceMap& where,
                     Issues& issues);

// How an override is named in messages: "override 'train.steps=abc'".
std::string override_source(std::string_view text);

}  // namespace fp8::jobspec
