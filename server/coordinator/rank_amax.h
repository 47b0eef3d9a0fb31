// Each rank's own amax per (layer, operand) at a report step, and the job's bounded
// history of the largest one: where an outlier batch or a failing device shows as one
// rank's amax far above the others'. Plain logic over numbers; the coordinator keeps one
// RankAmax per (layer, operand) of a job and makes the events.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace fp8::server {

class RankAmax {
 public:
  // One point of the history: a step and the largest amax any rank reported at it.
  struct Point {
    int64_t step = 0;
    float amax = 0;
    int rank = 0;  // the rank that reported it
  };
  // One rank far above the rest at a step, once every rank reported.
  struct Outlier {
    int rank = 0;
    float amax = 0;
    float others = 0;  // the other ranks' largest
  };

  // At most this many points are kept: when full, every other one is dropped, so the
  // history keeps covering the whole run at half the resolution.
  static constexpr size_t kMaxPoints = 256;

  // Rank `rank` of `world_size` reported `amax` at `step`. A newer step closes the
  // previous one (its largest amax joins the history); an older step is ignored (a rank
  // reporting late). Returns the outlier when this report completes the step and one
  // rank's amax is above `factor` times every other rank's (factor <= 1: never).
  std::optional<Outlier> report(int64_t step, int rank, int world_size, float amax, double factor);

  int64_t step() const { return step_; }
  // This step's amax per rank; negative where a rank has not reported yet.
  const std::vector<float>& by_rank() const { return by_rank_; }
  // Whether every rank reported this step.
  bool step_complete() const;
  // Closed steps, oldest first, then the open one when any rank reported it.
  std::vector<Point> history() const;
  // The closed steps alone: with step() and by_rank(), what restored() takes back.
  const std::vector<Point>& closed() const { return history_; }

  // A RankAmax as it was stored (a restarted coordinator's).
  static RankAmax restored(int64_t step, std::vector<float> by_rank, std::vector<Point> closed);

 private:
  void close();

  int64_t step_ = 0;
  std::vector<float> by_rank_;
  std::vector<Point> history_;
};

}  // namespace fp8::server
