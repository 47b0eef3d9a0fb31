// `fp8ctl plot --out FILE.csv`: the jobs' progress reports as CSV, one row per job and
// step (job_id, name, recipe, step, loss, val_loss, tokens_per_second), for a
// spreadsheet or a plotting tool of one's own. Pure, so that the unit test pins it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "fp8/v1/job_service.pb.h"

namespace fp8::ctl {

struct JobProgress {
  std::string job_id, name, recipe;
  int data_parallel_ranks = 1;  // data_parallel_ranks(spec) (format.h)
  std::map<int64_t, v1::TrainingProgress> by_step;  // the latest report per step
};

// A header and a row per job and step; val_loss empty where no evaluation ran,
// tokens_per_second the job's (rank 0's x the data-parallel ranks), non-finite values as
// nan/inf.
std::string progress_csv(const std::vector<JobProgress>& jobs);

}  // namespace fp8::ctl
