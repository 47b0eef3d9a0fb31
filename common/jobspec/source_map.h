// Where each field of a job spec was written. Errors found after parsing (defaults,
// cross-field checks) name a field; this map turns the field back into file:line:col.
#pragma once

#include <map>
#include <string>
#include <string_view>

namespace fp8::jobspec {

struct Location {
  std::string source;  // the file name as given, or "override 'train.steps=5'"
  int line = 0;        // 1-based; 0 where the source has no lines (an override)
  int column = 0;      // 1-based
  // Which source, for ordering errors: 0 is the job file, i + 1 the i-th override (they
  // are applied after the file, so their errors come after the file's).
  int source_index = 0;
};

class SourceMap {
 public:
  // Remembers where `field_path` ("model.n_heads", "fp8.exclude[0]") was written; a later
  // record of the same field (an override) replaces an earlier one.
  void record(const std::string& field_path, Location where);

  const Location* find(std::string_view field_path) const;
  // The location of `field_path`, or else of the nearest enclosing field that was written
  // ("model.ffn_dim" left to its default points at "model").
  const Location* find_nearest(std::string_view field_path) const;

 private:
  std::map<std::string, Location, std::less<>> locations_;
};

// "a.b[2]" -> "a.b", "a.b" -> "a", "a" -> "".
std::string_view parent_path(std::string_view field_path);

// "model" + "dim" -> "model.dim"; "" + "model" -> "model".
std::string join_path(std::string_view parent, std::string_view child);

}  // namespace fp8::jobspec
