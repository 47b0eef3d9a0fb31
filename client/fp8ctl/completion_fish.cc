// `fp8ctl completion fish`: complete(1) lines generated from fp8ctl's verbs and flags.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/fp8ctl/completion.h"
#include "client/fp8ctl/completion_model.h"

namespace fp8::ctl {
namespace {

// The first clause of a help text, short enough for fish's pager.
std::string fish_description(const std::string& help) {
  std::string s = short_help(help);
  if (s.size() > 70) s = s.substr(0, 67) + "...";
  return single_quoted(s);
}

std::string flag_line(const std::string& condition, const CompletionFlag& f) {
  std::string line = "complete -c fp8ctl";
  if (!condition.empty()) absl::StrAppend(&line, " -n '", condition, "'");
  for (const std::string& s : f.spellings) {
    const bool long_flag = s.rfind("--", 0) == 0;
    absl::StrAppend(&line, long_flag ? " -l " : " -s ", s.substr(long_flag ? 2 : 1));
  }
  if (f.file) {
    absl::StrAppend(&line, " -r -F");
  } else if (!f.choices.empty()) {
    absl::StrAppend(&line, " -x -a '", absl::StrJoin(f.choices, " "), "'");
  } else if (f.takes_value) {
    absl::StrAppend(&line, " -x");
  }
  return absl::StrCat(line, " -d '", fish_description(f.help), "'\n");
}

}  // namespace

std::string fish_completion_script(const CLI::App& app) {
  const CompletionModel m = read_completion_model(app);
  std::string s =
      "# fish completion for fp8ctl. Load it with:\n"
      "#   fp8ctl completion fish | source\n"
      "# or save it as ~/.config/fish/completions/fp8ctl.fish\n"
      "function __fp8ctl_job_ids\n"
      "    set -l cmd (commandline -opc)[1]\n"
      "    $cmd list -o name 2>/dev/null | string replace -r '^job/' ''\n"
      "end\n"
      "complete -c fp8ctl -f\n";
  std::vector<std::string> verbs, id_verbs;
  for (const CompletionVerb& v : m.verbs) {
    verbs.push_back(v.name);
    absl::StrAppend(&s, "complete -c fp8ctl -n __fish_use_subcommand -a ", v.name, " -d '", fish_description(v.help), "'\n");
  }
  for (const CompletionFlag& f : m.global_flags) absl::StrAppend(&s, flag_line("", f));
  for (const CompletionVerb& v : m.verbs) {
    const std::string in_verb = absl::StrCat("__fish_seen_subcommand_from ", v.name);
    for (const CompletionFlag& f : v.flags) absl::StrAppend(&s, flag_line(in_verb, f));
    if (v.takes_job_id) id_verbs.push_back(v.name);
    if (v.takes_file) absl::StrAppend(&s, "complete -c fp8ctl -n '", in_verb, "' -F\n");
    if (!v.choices.empty()) {
      absl::StrAppend(&s, "complete -c fp8ctl -n '", in_verb, "' -a '", absl::StrJoin(v.choices, " "), "'\n");
    }
  }
  if (!id_verbs.empty()) {
    absl::StrAppend(&s, "complete -c fp8ctl -n '__fish_seen_subcommand_from ", absl::StrJoin(id_verbs, " "),
                    "' -a '(__fp8ctl_job_ids)' -d 'job'\n");
  }
  return s;
}

}  // namespace fp8::ctl
