#include "common/jobspec/module_filter.h"

#include <algorithm>

namespace fp8::jobspec {

bool glob_matches(std::string_view glob, std::string_view name) {
  // Greedy matching that remembers the last '*': on a mismatch, let that star swallow
  // one more character and retry. Time O(|glob| * |name|), no recursion.
  size_t g = 0, n = 0;
  size_t star = std::string_view::npos, star_n = 0;
  while (n < name.size()) {
    if (g < glob.size() && (glob[g] == '?' || glob[g] == name[n])) {
      ++g;
      ++n;
    } else if (g < glob.size() && glob[g] == '*') {
      star = g++;
      star_n = n;
    } else if (star != std::string_view::npos) {
      g = star + 1;
      n = ++star_n;
    } else {
      return false;
    }
  }
  while (g < glob.size() && glob[g] == '*') ++g;
  return g == glob.size();
}

bool is_float8_linear(const v1::Fp8Spec& fp8, std::string_view layer_name) {
  if (fp8.recipe() == v1::Fp8Spec::NONE) return false;
  auto matches = [&](const std::string& glob) { return glob_matches(glob, layer_name); };
  bool included = fp8.include().empty() || std::any_of(fp8.include().begin(), fp8.include().end(), matches);
  bool excluded = std::any_of(fp8.exclude().begin(), fp8.exclude().end(), matches);
  return included && !excluded;
}

}  // namespace fp8::jobspec
