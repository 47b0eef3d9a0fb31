#include "server/coordinator/rank_amax.h"

#include <algorithm>
#include <cmath>

namespace fp8::server {
namespace {

// The largest reported amax and its rank; nullopt when no rank reported.
std::optional<RankAmax::Point> largest(int64_t step, const std::vector<float>& by_rank) {
  std::optional<RankAmax::Point> best;
  for (size_t r = 0; r < by_rank.size(); ++r) {
    if (by_rank[r] < 0) continue;
    if (!best || by_rank[r] > best->amax) best = RankAmax::Point{step, by_rank[r], static_cast<int>(r)};
  }
  return best;
}

}  // namespace

std::optional<RankAmax::Outlier> RankAmax::report(int64_t step, int rank, int world_size, float amax, double factor) {
  if (step < step_ || rank < 0 || rank >= world_size || !(amax >= 0) || std::isinf(amax)) return std::nullopt;
  if (step > step_ || static_cast<int>(by_rank_.size()) != world_size) {
    close();
    step_ = step;
    by_rank_.assign(static_cast<size_t>(world_size), -1.0f);
  }
  by_rank_[static_cast<size_t>(rank)] = amax;
  if (world_size < 2 || factor <= 1 || std::any_of(by_rank_.begin(), by_rank_.end(), [](float a) { return a < 0; })) {
    return std::nullopt;
  }
  const std::optional<Point> top = largest(step_, by_rank_);
  float others = 0;
  for (size_t r = 0; r < by_rank_.size(); ++r) {
    if (static_cast<int>(r) != top->rank) others = std::max(others, by_rank_[r]);
  }
  // A rank whose peers all saw zeros (padding, an idle layer) is not an outlier of them.
  if (others <= 0 || top->amax <= factor * others) return std::nullopt;
  return Outlier{top->rank, top->amax, others};
}

void RankAmax::close() {
  const std::optional<Point> top = largest(step_, by_rank_);
  if (!top) return;
  if (history_.size() >= kMaxPoints) {
    std::vector<Point> kept;
    for (size_t i = 0; i < history_.size(); i += 2) kept.push_back(history_[i]);
    history_ = std::move(kept);
  }
  history_.push_back(*top);
}

bool RankAmax::step_complete() const {
  return !by_rank_.empty() && std::none_of(by_rank_.begin(), by_rank_.end(), [](float a) { return a < 0; });
}

RankAmax RankAmax::restored(int64_t step, std::vector<float> by_rank, std::vector<Point> closed) {
  RankAmax r;
  r.step_ = step;
  r.by_rank_ = std::move(by_rank);
  if (closed.size() > kMaxPoints) closed.erase(closed.begin(), closed.end() - static_cast<std::ptrdiff_t>(kMaxPoints));
  r.history_ = std::move(closed);
  return r;
}

std::vector<RankAmax::Point> RankAmax::history() const {
  std::vector<Point> out = history_;
  if (const std::optional<Point> open = largest(step_, by_rank_)) out.push_back(*open);
  return out;
}

}  // namespace fp8::server
