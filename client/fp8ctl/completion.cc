#include "client/fp8ctl/completion.h"

#include <set>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/fp8ctl/completion_model.h"

namespace fp8::ctl {
namespace {

// The option's spellings: "--output", "-o".
std::vector<std::string> spellings(const CLI::Option* opt) {
  std::vector<std::string> out;
  for (const std::string& l : opt->get_lnames()) out.push_back("--" + l);
  for (const std::string& s : opt->get_snames()) out.push_back("-" + s);
  return out;
}

}  // namespace

std::string bash_completion_script(const CLI::App& app) {
  std::vector<std::string> verbs;
  std::vector<std::string> global_flags;
  std::set<std::string> valued;  // flags that take a value
  for (const CLI::Option* opt : app.get_options()) {
    if (!opt->nonpositional()) continue;
    for (const std::string& s : spellings(opt)) {
      global_flags.push_back(s);
      if (opt->get_expected_max() > 0 && opt->get_type_size_max() > 0) valued.insert(s);
    }
  }
  std::string verb_flags;  // case arms
  std::string positional;  // case arms: what the verb's arguments are
  std::vector<std::string> id_verbs, file_verbs;
  for (const CLI::App* verb : app.get_subcommands([](const CLI::App*) { return true; })) {
    verbs.push_back(verb->get_name());
    std::vector<std::string> flags;
    for (const CLI::Option* opt : verb->get_options()) {
      if (!opt->nonpositional()) {
        if (opt->get_name() == "ID") id_verbs.push_back(verb->get_name());
        if (opt->get_name() == "job.yaml") file_verbs.push_back(verb->get_name());
        continue;
      }
      for (const std::string& s : spellings(opt)) {
        flags.push_back(s);
        if (opt->get_expected_max() > 0 && opt->get_type_size_max() > 0) valued.insert(s);
      }
    }
    absl::StrAppend(&verb_flags, "    ", verb->get_name(), ") flags=\"", absl::StrJoin(flags, " "), "\" ;;\n");
  }
  if (!id_verbs.empty()) {
    absl::StrAppend(&positional, "    ", absl::StrJoin(id_verbs, "|"),
                    ")\n"
                    "      local ids\n"
                    "      ids=$(\"${COMP_WORDS[0]}\" list -o name 2>/dev/null | sed 's|^job/||')\n"
                    "      COMPREPLY=($(compgen -W \"$ids\" -- \"$cur\")) ;;\n");
  }
  if (!file_verbs.empty()) {
    absl::StrAppend(&positional, "    ", absl::StrJoin(file_verbs, "|"),
                    ") COMPREPLY=($(compgen -f -- \"$cur\")) ;;\n");
  }
  for (const CompletionVerb& v : read_completion_model(app).verbs) {
    if (v.choices.empty()) continue;
    absl::StrAppend(&positional, "    ", v.name, ") COMPREPLY=($(compgen -W \"", absl::StrJoin(v.choices, " "),
                    "\" -- \"$cur\")) ;;\n");
  }

  std::vector<std::string> global_valued;
  for (const std::string& g : global_flags) {
    if (valued.count(g)) global_valued.push_back(g);
  }
  // The values of a flag, by verb ("list:-o"; "*:--token-file" for a global flag): a
  // file, or the words of its type name (completion_model.h).
  const CompletionModel model = read_completion_model(app);
  std::string value_arms;
  std::set<std::string> completed;
  auto arm = [&](const std::string& verb, const CompletionFlag& f) {
    if (!f.file && f.choices.empty()) return;
    std::vector<std::string> patterns;
    for (const std::string& sp : f.spellings) {
      patterns.push_back(absl::StrCat(verb, ":", sp));
      completed.insert(sp);
    }
    absl::StrAppend(&value_arms, "    ", absl::StrJoin(patterns, "|"), ") COMPREPLY=($(compgen ",
                    f.file ? std::string("-f") : absl::StrCat("-W \"", absl::StrJoin(f.choices, " "), "\""),
                    " -- \"$cur\")); return 0 ;;\n");
  };
  for (const CompletionFlag& f : model.global_flags) arm("*", f);
  for (const CompletionVerb& v : model.verbs) {
    for (const CompletionFlag& f : v.flags) arm(v.name, f);
  }
  std::vector<std::string> other_valued;
  for (const std::string& v : valued) {
    if (!completed.count(v)) other_valued.push_back(v);
  }

  std::string s =
      "# bash completion for fp8ctl. Load it with:\n"
      "#   source <(fp8ctl completion bash)\n"
      "# or save it as ~/.local/share/bash-completion/completions/fp8ctl\n"
      "_fp8ctl() {\n"
      "  local cur prev verb i flags\n"
      "  COMPREPLY=()\n"
      "  cur=\"${COMP_WORDS[COMP_CWORD]}\"\n"
      "  prev=\"${COMP_WORDS[COMP_CWORD-1]}\"\n";
  absl::StrAppend(&s, "  local verbs=\"", absl::StrJoin(verbs, " "), "\"\n");
  absl::StrAppend(&s, "  local global_flags=\"", absl::StrJoin(global_flags, " "), "\"\n");
  absl::StrAppend(&s,
                  "  verb=\"\"\n"
                  "  for ((i = 1; i < COMP_CWORD; i++)); do\n"
                  "    case \"${COMP_WORDS[i]}\" in\n"
                  "      ",
                  global_valued.empty() ? std::string("--coordinator") : absl::StrJoin(global_valued, "|"),
                  ") ((i++)) ;;\n"
                  "      -*) ;;\n"
                  "      *) verb=\"${COMP_WORDS[i]}\"; break ;;\n"
                  "    esac\n"
                  "  done\n"
                  "  case \"${verb:-*}:$prev\" in\n",
                  value_arms);
  if (!other_valued.empty()) {
    std::vector<std::string> patterns;
    for (const std::string& v : other_valued) patterns.push_back("*:" + v);
    absl::StrAppend(&s, "    ", absl::StrJoin(patterns, "|"), ") return 0 ;;\n");
  }
  absl::StrAppend(&s,
                  "  esac\n"
                  "  if [[ -z \"$verb\" ]]; then\n"
                  "    COMPREPLY=($(compgen -W \"$verbs $global_flags\" -- \"$cur\"))\n"
                  "    return 0\n"
                  "  fi\n"
                  "  flags=\"\"\n"
                  "  case \"$verb\" in\n",
                  verb_flags,
                  "  esac\n"
                  "  if [[ \"$cur\" == -* ]]; then\n"
                  "    COMPREPLY=($(compgen -W \"$flags $global_flags\" -- \"$cur\"))\n"
                  "    return 0\n"
                  "  fi\n"
                  "  case \"$verb\" in\n",
                  positional,
                  "  esac\n"
                  "  return 0\n"
                  "}\n"
                  "complete -o default -F _fp8ctl fp8ctl\n");
  return s;
}

}  // namespace fp8::ctl
