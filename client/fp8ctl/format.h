// Small text renderings shared by the verbs: state names, times, ages, rates. Pure, so
// the unit test pins them down.
#pragma once

#include <cstdint>
#include <string>

#include "fp8/v1/job_service.pb.h"

namespace fp8::ctl {

std::string JobStateName(v1::Job::State state);           // "RUNNING"
std::string AttemptStateName(v1::Attempt::State state);    // "SUCCEEDED"
std::string RecipeName(v1::Fp8Spec::Recipe recipe);        // "tensorwise"
std::string DeviceName(v1::ResourceSpec::Device device);   // "cpu"
bool IsFinal(v1::Job::State state);

// Local time "YYYY-MM-DD hh:mm:ss" ("hh:mm:ss" when `with_date` is false);
// "-" for 0 (not yet).
std::string LocalTime(int64_t unix_ms, bool with_date = true);
// A coarse age: "45s", "12m", "3h04m", "2d03h"; negative ages (clock skew) read "0s".
std::string Age(int64_t ms);
// A duration as a clock: "0:07", "12:34", "1:02:03".
std::string ClockDuration(double seconds);
// A rate with an SI suffix: "950", "12.3k", "4.56M".
std::string SiRate(double per_second);

int64_t NowUnixMs();

}  // namespace fp8::ctl
