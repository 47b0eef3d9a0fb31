// What `fp8ctl follow` prints for each JobEvent: a line per state change, attempt start
// and end and numerics group (the first event of each kind, layer and operand; repeats are
// counted in the summary), and a progress line (step/total, loss, tokens/s, ETA). On a
// terminal the progress line carries a bar and is redrawn in place with '\r', always the
// last line, until the final state: it is then left where it is, above the final state
// line and the summary. Otherwise one plain line per report (a log file or a pipe should
// not fill with carriage returns). No I/O besides the stream it is given, so the unit test
// feeds it events.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>

#include "client/fp8ctl/follow_summary.h"
#include "fp8/v1/job_service.pb.h"

namespace fp8::ctl {

// Remaining time from the observed step rate of the current attempt (a restart resets it:
// the new attempt's rate is what matters, and its steps restart from a checkpoint).
class EtaEstimator {
 public:
  void observe(int32_t attempt, int64_t step, int64_t time_unix_ms);
  // Seconds to reach `total_steps`; nullopt until two reports of one attempt are apart.
  std::optional<double> seconds_left(int64_t total_steps) const;

 private:
  int32_t attempt_ = -1;
  int64_t first_step_ = 0, first_ms_ = 0, last_step_ = 0, last_ms_ = 0;
};

struct ProgressLineInput {
  int64_t step = 0;
  int64_t total_steps = 0;  // 0 = unknown
  double loss = 0;
  std::optional<double> val_loss;
  double tokens_per_second = 0;  // the job's (rank 0's times the data-parallel ranks)
  std::optional<double> eta_seconds;
};

// "step 20/40 (50%)  loss 3.4521  val 3.5012  tok/s 12.3k  ETA 0:12"
std::string progress_line(const ProgressLineInput& in);

// "[##########..........]" for step of total, `width` cells inside the brackets.
std::string progress_bar(int64_t step, int64_t total, int width = 24);

class FollowPrinter {
 public:
  // `data_parallel_ranks` (format.h) scales rank 0's tokens/s to the job's;
  // `tokens_per_rank_step` (batch_size x seq_len) and `tensor_parallel` (parallel.tensor,
  // the ranks that share a batch) count the summary's tokens.
  FollowPrinter(std::ostream& out, bool terminal, int64_t total_steps, int data_parallel_ranks,
                int64_t tokens_per_rank_step = 0, int tensor_parallel = 1);

  void on_event(const v1::JobEvent& event);
  // Ends a live progress line, so that what follows starts on a fresh line.
  void finish();
  // finish(), then the summary (follow_summary.h).
  void print_summary();

  // The final state once a state change into one has been seen.
  std::optional<v1::Job::State> final_state() const { return final_state_; }
  const std::string& final_reason() const { return final_reason_; }

 private:
  void line(int64_t time_unix_ms, const std::string& text);
  void progress(const v1::JobEvent& event);

  std::ostream& out_;
  bool terminal_;
  int64_t total_steps_;
  int data_parallel_ranks_;
  EtaEstimator eta_;
  FollowSummary summary_;
  NumericsGroups numerics_;  // only a group's first event is printed
  std::string live_;  // the progress line currently drawn (terminal only)
  std::optional<v1::Job::State> final_state_;
  std::string final_reason_;
};

}  // namespace fp8::ctl
