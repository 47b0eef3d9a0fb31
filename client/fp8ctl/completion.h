// `fp8ctl completion bash|zsh|fish`: a completion script generated from fp8ctl's own verbs
// and flags (so it cannot fall behind them). Verbs, global and per-verb flags, the values
// of flags with a few words (-o, --state, --metric) or a file, job.yaml files, and job ids
// (from `fp8ctl list -o name`, best effort: nothing when that fails).
#pragma once

#include <string>

namespace CLI {
class App;
}  // namespace CLI

namespace fp8::ctl {

std::string bash_completion_script(const CLI::App& app);
// The same for zsh (completion_zsh.cc) and fish (completion_fish.cc), from the verbs and
// flags as completion_model.h reads them.
std::string zsh_completion_script(const CLI::App& app);
std::string fish_completion_script(const CLI::App& app);

}  // namespace fp8::ctl
