// Amax histories from the ranks of an attempt, merged into the job's one history per
// (layer, operand), and the jumps worth an event. Plain logic over messages.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "fp8/v1/trainer_service.pb.h"

namespace fp8::server {

// A stored history and the step it was reported at.
struct StepHistory {
  int64_t step = 0;
  v1::AmaxHistory history;
};

// `stored` merged with one rank's `reported` at `step`:
//   a newer step replaces the stored history; the same step merges elementwise (max of
//   amaxes, min of scales: the largest amax sets the scale); an older step is ignored
//   (a rank of a finished attempt reporting late).
StepHistory merge_amax(const std::optional<StepHistory>& stored, int64_t step, const v1::AmaxHistory& reported);

// When the newest amax of `history` exceeds `factor` times the largest earlier one: that
// earlier maximum (the threshold is factor x it). Histories shorter than 2 never jump.
std::optional<double> amax_jump_baseline(const v1::AmaxHistory& history, double factor);

// "" when the history is well formed, else what is wrong (negative or non-finite amaxes,
// a non-positive scale, longer than max_len).
std::string amax_history_problem(const v1::AmaxHistory& history, int max_len);

}  // namespace fp8::server
