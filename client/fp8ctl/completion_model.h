// fp8ctl's verbs and flags as the completion scripts need them, read from the CLI11 app
// itself (so that no script can fall behind a verb or flag): which flags take a value, a
// file, or one of a few words (an option's type name "a|b|c", as -o has it), and which
// verbs take a job id or a job.yaml.
#pragma once

#include <string>
#include <vector>

namespace CLI {
class App;
}  // namespace CLI

namespace fp8::ctl {

struct CompletionFlag {
  std::vector<std::string> spellings;  // "--output", "-o"
  std::string help;
  bool takes_value = false;
  bool file = false;                 // type name FILE
  std::vector<std::string> choices;  // from a type name "a|b|c"
};

struct CompletionVerb {
  std::string name, help;
  std::vector<CompletionFlag> flags;
  bool takes_job_id = false;         // a positional "ID"
  bool many_job_ids = false;         // ... that takes several (plot)
  bool takes_file = false;           // a positional "job.yaml"
  std::vector<std::string> choices;  // a positional with a type name "a|b|c" (completion's shell)
};

struct CompletionModel {
  std::vector<CompletionFlag> global_flags;
  std::vector<CompletionVerb> verbs;
};

CompletionModel read_completion_model(const CLI::App& app);

// The first clause of a help text (up to "; " or " ("), to describe a verb or flag.
std::string short_help(const std::string& help);

// Text safe inside a single-quoted shell word: ' becomes '\''.
std::string single_quoted(const std::string& text);

}  // namespace fp8::ctl
