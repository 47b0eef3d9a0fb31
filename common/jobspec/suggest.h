// "did you mean 'n_heads'?": the closest known name to a misspelt one.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace fp8::jobspec {

// Levenshtein distance (insertions, deletions, substitutions), ignoring ASCII case.
size_t edit_distance(std::string_view a, std::string_view b);

// The candidate closest to `word`, if it is close enough to be a likely typo (about one
// edit per three characters); empty otherwise.
std::string closest_name(std::string_view word, const std::vector<std::string>& candidates);

// " (did you mean 'x'?)" when there is a close candidate, else "".
std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace fp8::jobspec
