#include "server/coordinator/amax_merge.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace fp8::server {

StepHistory merge_amax(const std::optional<StepHistory>& stored, int64_t step, const v1::AmaxHistory& reported) {
  if (!stored.has_value() || step > stored->step) return StepHistory{step, reported};
  if (step < stored->step) return *stored;
  StepHistory merged = *stored;
  auto* amaxes = merged.history.mutable_history();
  // Ranks keep equally long histories; should one be shorter (a rank that joined late),
  // the newest entries line up.
  const int n = amaxes->size(), m = reported.history_size();
  for (int i = 0; i < std::min(n, m); ++i) {
    float& mine = (*amaxes)[n - 1 - i];
    mine = std::max(mine, reported.history(m - 1 - i));
  }
  if (m > n) {
    v1::AmaxHistory longer = reported;
    for (int i = 0; i < n; ++i) (*longer.mutable_history())[m - 1 - i] = (*amaxes)[n - 1 - i];
    *amaxes = longer.history();
  }
  merged.history.set_scale(std::min(merged.history.scale(), reported.scale()));
  merged.history.set_range_use(std::max(merged.history.range_use(), reported.range_use()));
  return merged;
}

std::optional<double> amax_jump_baseline(const v1::AmaxHistory& history, double factor) {
  const int n = history.history_size();
  if (n < 2) return std::nullopt;
  float earlier = 0;
  for (int i = 0; i + 1 < n; ++i) earlier = std::max(earlier, history.history(i));
  if (earlier > 0 && history.history(n - 1) > factor * earlier) return earlier;
  return std::nullopt;
}

std::string amax_history_problem(const v1::AmaxHistory& history, int max_len) {
  if (history.layer().empty() || history.layer().size() > 256) return "layer: empty or longer than 256 bytes";
  if (history.operand() == v1::AmaxHistory::OPERAND_UNSPECIFIED || !v1::AmaxHistory::Operand_IsValid(history.operand())) {
    return "operand: unspecified";
  }
  if (history.history_size() == 0 || history.history_size() > max_len) {
    return absl::StrCat("history: ", history.history_size(), " entries, expected 1 to ", max_len);
  }
  for (float a : history.history()) {
    if (!std::isfinite(a) || a < 0) return absl::StrCat("history: amax ", a, " is not finite and >= 0");
  }
  if (!std::isfinite(history.scale()) || history.scale() <= 0) {
    return absl::StrCat("scale: ", history.scale(), " is not finite and > 0");
  }
  if (!std::isfinite(history.range_use()) || history.range_use() < 0) {
    return absl::StrCat("range_use: ", history.range_use(), " is not finite and >= 0");
  }
  return "";
}

}  // namespace fp8::server
