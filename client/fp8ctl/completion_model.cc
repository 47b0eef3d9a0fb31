#include "client/fp8ctl/completion_model.h"

#include <algorithm>

#include "CLI/CLI.hpp"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"

namespace fp8::ctl {
namespace {

CompletionFlag flag_of(const CLI::Option& opt) {
  CompletionFlag f;
  for (const std::string& l : opt.get_lnames()) f.spellings.push_back("--" + l);
  for (const std::string& s : opt.get_snames()) f.spellings.push_back("-" + s);
  f.help = opt.get_description();
  f.takes_value = opt.get_expected_max() > 0 && opt.get_type_size_max() > 0;
  // CLI11 appends its validators' descriptions (":{a,b}"); the name is before them.
  const std::string full_type = opt.get_type_name();
  const std::string type = full_type.substr(0, full_type.find(':'));
  f.file = type == "FILE";
  if (type.find('|') != std::string::npos) f.choices = absl::StrSplit(type, '|');
  return f;
}

}  // namespace

CompletionModel read_completion_model(const CLI::App& app) {
  CompletionModel m;
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->nonpositional()) m.global_flags.push_back(flag_of(*opt));
  }
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    CompletionVerb v;
    v.name = sub->get_name();
    v.help = sub->get_description();
    for (const CLI::Option* opt : sub->get_options()) {
      if (opt->nonpositional()) {
        v.flags.push_back(flag_of(*opt));
      } else if (opt->get_name() == "ID") {
        v.takes_job_id = true;
        v.many_job_ids = opt->get_expected_max() > 1;
      } else if (opt->get_name() == "job.yaml") {
        v.takes_file = true;
      } else {
        v.choices = flag_of(*opt).choices;
      }
    }
    m.verbs.push_back(std::move(v));
  }
  return m;
}

std::string short_help(const std::string& help) {
  std::string s = help.substr(0, std::min(help.find("; "), help.find(" (")));
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

std::string single_quoted(const std::string& text) { return absl::StrReplaceAll(text, {{"'", "'\\''"}}); }

}  // namespace fp8::ctl
