// Which linear layers train in fp8: fp8.include and fp8.exclude, globs over layer names.
#pragma once

#include <string_view>

#include "fp8/v1/job.pb.h"

namespace fp8::jobspec {

// Shell-style glob over a whole name: '*' matches any run of characters, dots included
// ("layers.*.wq" matches layers.0.attention.wq), '?' matches one character.
bool glob_matches(std::string_view glob, std::string_view name);

// A linear is fp8 when the recipe is not none, it matches include (or include is empty)
// and it matches no exclude.
bool is_float8_linear(const v1::Fp8Spec& fp8, std::string_view layer_name);

}  // namespace fp8::jobspec
