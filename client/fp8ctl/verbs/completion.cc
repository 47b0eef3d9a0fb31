// fp8ctl completion bash: print a bash completion script for fp8ctl.
#include <iostream>

#include "CLI/CLI.hpp"
#include "client/fp8ctl/completion.h"
#include "client/fp8ctl/exit_codes.h"
#include "client/fp8ctl/verbs/verbs.h"

namespace fp8::ctl {

Verb AddCompletionVerb(CLI::App& app) {
  auto shell = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand(
      "completion", "print a shell completion script: source <(fp8ctl completion bash)");
  cmd->add_option("SHELL", *shell, "the shell (only bash)")->required()->check(CLI::IsMember({"bash"}));
  const CLI::App* root = &app;
  return {cmd, [shell, root](Session&) {
            std::cout << BashCompletionScript(*root);
            return static_cast<int>(kExitOk);
          }};
}

}  // namespace fp8::ctl
