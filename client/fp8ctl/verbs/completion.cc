// fp8ctl completion bash|zsh|fish: print a completion script for fp8ctl.
#include <iostream>

#include "CLI/CLI.hpp"
#include "client/fp8ctl/completion.h"
#include "client/fp8ctl/exit_codes.h"
#include "client/fp8ctl/verbs/verbs.h"

namespace fp8::ctl {

Verb add_completion_verb(CLI::App& app) {
  auto shell = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand(
      "completion",
      "print a shell completion script: source <(fp8ctl completion bash); zsh and fish alike (see its first lines)");
  cmd->add_option("SHELL", *shell, "bash, zsh or fish")
      ->required()
      ->check(CLI::IsMember({"bash", "zsh", "fish"}))
      ->type_name("bash|zsh|fish");
  const CLI::App* root = &app;
  return {cmd, [shell, root](Session&) {
            if (*shell == "zsh") {
              std::cout << zsh_completion_script(*root);
            } else if (*shell == "fish") {
              std::cout << fish_completion_script(*root);
            } else {
              std::cout << bash_completion_script(*root);
            }
            return static_cast<int>(kExitOk);
          }};
}

}  // namespace fp8::ctl
