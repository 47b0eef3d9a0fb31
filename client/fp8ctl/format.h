// Small text renderings shared by the verbs: state names, times, ages, rates. Pure, so
// the unit test pins them down.
#pragma once

#include <cstdint>
#include <string>

#include "common/jobspec/model_shapes.h"
#include "fp8/v1/job_service.pb.h"

namespace fp8::ctl {

std::string job_state_name(v1::Job::State state);           // "RUNNING"
std::string attempt_state_name(v1::Attempt::State state);    // "SUCCEEDED"
std::string recipe_name(v1::Fp8Spec::Recipe recipe);        // "tensorwise"
std::string device_name(v1::ResourceSpec::Device device);   // "cpu"
// How resources.world_size ranks split by parallel.tensor (world_size = data-parallel x
// tensor-parallel): "1 data-parallel x 2 tensor-parallel ranks".
std::string mesh_text(const v1::JobSpec& spec);
// The data-parallel ranks (jobspec::data_parallel_ranks): the job's tokens/s is rank 0's
// (TrainingProgress.tokens_per_second) times this.
using jobspec::data_parallel_ranks;
bool is_final(v1::Job::State state);

// Local time "YYYY-MM-DD hh:mm:ss" ("hh:mm:ss" when `with_date` is false);
// "-" for 0 (not yet).
std::string local_time(int64_t unix_ms, bool with_date = true);
// A coarse age: "45s", "12m", "3h04m", "2d03h"; negative ages (clock skew) read "0s".
std::string age(int64_t ms);
// A duration as a clock: "0:07", "12:34", "1:02:03".
std::string clock_duration(double seconds);
// A rate with an SI suffix: "950", "12.3k", "4.56M".
std::string si_rate(double per_second);

int64_t now_unix_ms();

}  // namespace fp8::ctl
