// `fp8ctl completion zsh`: an _arguments-based completion function generated from
// fp8ctl's verbs and flags.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "client/fp8ctl/completion.h"
#include "client/fp8ctl/completion_model.h"

namespace fp8::ctl {
namespace {

// A help text inside an _arguments "[...]" description (brackets would end it) and a
// single-quoted word.
std::string description(const std::string& help) {
  return single_quoted(absl::StrReplaceAll(short_help(help), {{"[", "("}, {"]", ")"}, {"\\", "/"}}));
}

// One _arguments spec per spelling: '*--output[desc]:format:(table json yaml)'. '*' lets
// a flag repeat (--set, --state), and costs nothing for the others.
std::string flag_specs(const CompletionFlag& f, const std::string& pad) {
  std::string action;
  if (f.file) {
    action = ":file:_files";
  } else if (!f.choices.empty()) {
    action = absl::StrCat(":value:(", absl::StrJoin(f.choices, " "), ")");
  } else if (f.takes_value) {
    action = ":value: ";
  }
  std::string out;
  for (const std::string& s : f.spellings) {
    absl::StrAppend(&out, pad, "'*", s, "[", description(f.help), "]", action, "'\n");
  }
  return out;
}

}  // namespace

std::string zsh_completion_script(const CLI::App& app) {
  const CompletionModel m = read_completion_model(app);
  std::string s =
      "#compdef fp8ctl\n"
      "# zsh completion for fp8ctl. Load it with:\n"
      "#   source <(fp8ctl completion zsh)\n"
      "# (after compinit), or save it as _fp8ctl in a folder of $fpath.\n"
      "_fp8ctl_job_ids() {\n"
      "  local -a ids\n"
      "  ids=(${${(f)\"$(${_fp8ctl_cmd:-fp8ctl} list -o name 2>/dev/null)\"}#job/})\n"
      "  _describe -t job-ids 'job id' ids\n"
      "}\n"
      "_fp8ctl() {\n"
      "  local curcontext=\"$curcontext\" state line\n"
      "  local _fp8ctl_cmd=${words[1]}\n"
      "  local -a globals verbs\n"
      "  globals=(\n";
  for (const CompletionFlag& f : m.global_flags) absl::StrAppend(&s, flag_specs(f, "    "));
  absl::StrAppend(&s, "  )\n  verbs=(\n");
  for (const CompletionVerb& v : m.verbs) {
    absl::StrAppend(&s, "    '", v.name, ":", absl::StrReplaceAll(description(v.help), {{":", "\\:"}}), "'\n");
  }
  absl::StrAppend(&s,
                  "  )\n"
                  "  _arguments -C $globals '1: :->verb' '*:: :->args' && return 0\n"
                  "  case $state in\n"
                  "    verb) _describe -t verbs 'fp8ctl verb' verbs ;;\n"
                  "    args)\n"
                  "      case $line[1] in\n");
  for (const CompletionVerb& v : m.verbs) {
    absl::StrAppend(&s, "        ", v.name, ")\n          _arguments $globals \\\n");
    for (const CompletionFlag& f : v.flags) {
      std::string specs = flag_specs(f, "            ");
      absl::StrAppend(&s, absl::StrReplaceAll(specs, {{"'\n", "' \\\n"}}));
    }
    if (v.takes_job_id) {
      absl::StrAppend(&s, "            '", v.many_job_ids ? "*" : "1", ":job id:_fp8ctl_job_ids' \\\n");
    }
    if (v.takes_file) absl::StrAppend(&s, "            '1:job.yaml:_files -g \"*.(yaml|yml)\"' \\\n");
    if (!v.choices.empty()) absl::StrAppend(&s, "            '1:value:(", absl::StrJoin(v.choices, " "), ")' \\\n");
    absl::StrAppend(&s, "            && return 0 ;;\n");
  }
  absl::StrAppend(&s,
                  "      esac ;;\n"
                  "  esac\n"
                  "}\n"
                  "if [[ $funcstack[1] == _fp8ctl ]]; then _fp8ctl \"$@\"; else compdef _fp8ctl fp8ctl; fi\n");
  return s;
}

}  // namespace fp8::ctl
