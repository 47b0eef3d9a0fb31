// `fp8ctl completion bash`: a bash completion script generated from fp8ctl's own verbs and
// flags (so it cannot fall behind them). Verbs, global and per-verb flags, the values of
// -o/--output, --state and --metric, job.yaml files, and job ids (from
// `fp8ctl list -o json`, best effort: nothing when that fails).
#pragma once

#include <string>

namespace CLI {
class App;
}  // namespace CLI

namespace fp8::ctl {

std::string BashCompletionScript(const CLI::App& app);

}  // namespace fp8::ctl
