// What `fp8ctl follow` prints once the job has ended: the outcome, the loss from the first
// report to the last, the newest validation loss, the tokens trained, the wall time from
// the first attempt's start to the end, the restarts, and the numerics events by group
// (numerics_groups.h). Fed the same events as the printer; pure, so that the unit test
// pins it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "client/fp8ctl/numerics_groups.h"
#include "fp8/v1/job_service.pb.h"

namespace fp8::ctl {

class FollowSummary {
 public:
  // `tokens_per_rank_step`: train.batch_size x data.seq_len (a rank's tokens per step);
  // `tensor_parallel`: parallel.tensor, the ranks that train one batch together.
  FollowSummary(int64_t total_steps, int64_t tokens_per_rank_step, int tensor_parallel = 1)
      : total_steps_(total_steps),
        tokens_per_rank_step_(tokens_per_rank_step),
        tensor_parallel_(tensor_parallel < 1 ? 1 : tensor_parallel) {}

  void on_event(const v1::JobEvent& event);

  // Tokens trained over every attempt (steps each advanced past its checkpoint x its
  // data-parallel ranks x tokens per rank step): work redone after a restart counts.
  int64_t tokens() const;
  int restarts() const { return attempts_.empty() ? 0 : static_cast<int>(attempts_.size()) - 1; }

  // "Summary:" and one indented line per item, each ending with '\n'.
  std::string render() const;

 private:
  struct AttemptWork {
    int ranks = 0;
    int64_t resumed_from = 0;
    int64_t last_step = 0;
  };
  int64_t total_steps_;
  int64_t tokens_per_rank_step_;
  int tensor_parallel_;
  std::map<int32_t, AttemptWork> attempts_;
  std::optional<v1::TrainingProgress> first_, last_;
  std::optional<std::pair<int64_t, double>> val_;  // step, val_loss
  int64_t first_attempt_ms_ = 0;
  int64_t end_ms_ = 0;
  std::optional<v1::Job::State> outcome_;
  NumericsGroups numerics_;
};

}  // namespace fp8::ctl
