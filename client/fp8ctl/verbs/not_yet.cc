// Verbs the product will have but this version does not: present in --help so that a user
// looking for them learns they are planned rather than misspelt.
#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "client/fp8ctl/exit_codes.h"
#include "client/fp8ctl/verbs/verbs.h"

namespace fp8::ctl {

Verb AddNotYetVerb(CLI::App& app, const std::string& name, const std::string& what) {
  CLI::App* cmd = app.add_subcommand(name, absl::StrCat(what, " (not yet available)"));
  cmd->allow_extras();
  return {cmd, [name](Session&) {
            return Report({kExitUsage, absl::StrCat("'", name, "' is not available yet in this version of fp8ctl")});
          }};
}

}  // namespace fp8::ctl
