// fp8ctl: the command-line client of the fp8 coordinator. Wiring only: global flags,
// the verbs (verbs/*.cc), and usage errors as exit code 2.
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "client/fp8ctl/client_config.h"
#include "client/fp8ctl/exit_codes.h"
#include "client/fp8ctl/session.h"
#include "client/fp8ctl/verbs/verbs.h"

namespace {

// The first word that is neither a flag nor a global flag's value, when it names no verb:
// CLI11 would only say "A subcommand is required".
std::optional<std::string> unknown_verb(const CLI::App& app, int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--coordinator" || arg == "--token" || arg == "--token-file" || arg == "--coordinator-ca") {
      ++i;  // its value
      continue;
    }
    if (arg.empty() || arg[0] == '-') continue;
    for (const CLI::App* verb : app.get_subcommands([](const CLI::App*) { return true; })) {
      if (verb->get_name() == arg) return std::nullopt;
    }
    return arg;
  }
  return std::nullopt;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace fp8::ctl;
  CLI::App app("fp8ctl: submit, follow and inspect fp8 training jobs on an fp8 coordinator", "fp8ctl");
  app.require_subcommand(1);
  GlobalFlags flags;
  add_global_flags(app, &flags);
  std::vector<Verb> verbs = {
      add_submit_verb(app),
      add_follow_verb(app),
      add_list_verb(app),
      add_describe_verb(app),
      add_logs_verb(app),
      add_cancel_verb(app),
      add_resume_verb(app),
      add_clone_verb(app),
      add_workers_verb(app),
      add_amax_verb(app),
      add_events_verb(app),
      add_plot_verb(app),
      add_version_verb(app),
      add_completion_verb(app),
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    if (std::optional<std::string> verb = unknown_verb(app, argc, argv)) {
      std::fprintf(stderr, "fp8ctl: unknown verb '%s'; the verbs are submit, follow, list, describe, logs, cancel, resume, clone, workers, amax, events, plot, version, completion\n",
                   verb->c_str());
      return kExitUsage;
    }
    std::fprintf(stderr, "fp8ctl: %s\nfp8ctl: run `fp8ctl --help` (or `fp8ctl VERB --help`) for usage\n", e.what());
    return kExitUsage;
  }
  Session session(resolve_client_config(flags, process_env(), real_files()));
  for (Verb& verb : verbs) {
    if (verb.command->parsed()) return verb.run(session);
  }
  std::fprintf(stderr, "fp8ctl: no verb given; run `fp8ctl --help`\n");
  return kExitUsage;
}
