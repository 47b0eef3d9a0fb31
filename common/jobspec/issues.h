// One problem with a job spec, and how a list of them becomes the one Status a user sees:
// one line per problem, `job.yaml:12:5: model.n_heads: 6 does not divide model.dim (64)`,
// in file order.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "common/jobspec/source_map.h"

namespace fp8::jobspec {

struct Issue {
  // Dotted path of the field at fault ("model.n_heads"); empty for the document itself.
  std::string field;
  // What is wrong and, where it helps, how to fix it. One line.
  std::string message;
  // The exact spot, where the parser knows it (a bad value); otherwise the issue is
  // located through `field`, then `anchors`, then their enclosing sections.
  std::optional<Location> at;
  // Fields to point at when `field` itself was not written (a default or derived value):
  // e.g. an fp8 layer of a bad size points at fp8.recipe, else at model.dim.
  std::vector<std::string> anchors = {};
  // Other fields whose problems this issue already explains: a key misspelt as `n_head`
  // explains why `model.n_heads` is missing, so that second complaint is not shown.
  std::vector<std::string> explains = {};
};

using Issues = std::vector<Issue>;

// InvalidArgument listing every issue, one per line, ordered by source and position
// (issues with no location last). `source` prefixes issues with no location; it may be
// empty (a spec that never was a file). OK when `issues` is empty.
absl::Status issues_to_status(const Issues& issues, const SourceMap& where, std::string_view source);

// Text from the user, made safe to put into a one-line message: quoted, non-printable
// bytes escaped, cut to a readable length.
std::string quote(std::string_view user_text);

// A key from the user as it appears inside a field path ("labels.<key>"): the same
// escaping and bound, without the quotes.
std::string path_part(std::string_view user_key);

}  // namespace fp8::jobspec
