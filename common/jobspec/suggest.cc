#include "common/jobspec/suggest.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace fp8::jobspec {
namespace {

// Longer words than this are not typos of a field name; bounding them keeps the
// quadratic distance cheap on hostile input.
constexpr size_t kMaxComparedChars = 64;

size_t typo_budget(std::string_view word) {
  if (word.size() <= 3) return 1;
  return std::max<size_t>(2, word.size() / 3);
}

}  // namespace

size_t edit_distance(std::string_view a, std::string_view b) {
  // One row of the dynamic-programming table at a time.
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      bool same = absl::ascii_tolower(static_cast<unsigned char>(a[i - 1])) ==
                  absl::ascii_tolower(static_cast<unsigned char>(b[j - 1]));
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (same ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string closest_name(std::string_view word, const std::vector<std::string>& candidates) {
  if (word.empty() || word.size() > kMaxComparedChars) return "";
  std::string best;
  size_t best_distance = typo_budget(word) + 1;
  for (const std::string& candidate : candidates) {
    size_t d = edit_distance(word, candidate);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  return best;
}

std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates) {
  std::string best = closest_name(word, candidates);
  return best.empty() ? "" : absl::StrCat(" (did you mean '", best, "'?)");
}

}  // namespace fp8::jobspec
