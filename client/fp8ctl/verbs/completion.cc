// fp8ctl completion bash|zsh|fish: print a completion script for fp8ctl.
#include <iostream>

#include "CLI/CLI.hpp"
#include "client/fp8ctl/completion.h"
#include "client/fp8ctl/exit_codes.h"
#include "client/fp8ctl/verbs/verbs.h"

namespace fp8::ctl {

Verb AddCompletionVerb(CLI::App& app) {
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
              std::cout << ZshCompletionScript(*root);
            } else if (*shell == "fish") {
              std::cout << FishCompletionScript(*root);
            } else {
              std::cout << BashCompletionScript(*root);
            }
            return static_cast<int>(kExitOk);
          }};
}

}  // namespace fp8::ctl
