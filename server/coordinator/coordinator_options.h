// The coordinator's settings (fp8-coordinator's flags fill them in; see main.cc).
#pragma once

#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "server/coordinator/spec_admission.h"

namespace fp8::server {

struct CoordinatorOptions {
  // host:port trainers reach this coordinator at (StartRank.coordinator_address).
  std::string advertise_address = "127.0.0.1:7070";
  // Workers heartbeat this often and are lost after lost_after without one.
  absl::Duration heartbeat_interval = absl::Seconds(1);
  absl::Duration lost_after = absl::Seconds(10);
  // SIGTERM to SIGKILL for ranks the coordinator stops (StopRank.grace_seconds).
  int stop_grace_seconds = 10;
  // Where job paths may point.
  PathRoots roots;
  // Bounds on what one job keeps.
  int64_t log_lines_per_job = 20000;
  int progress_events_per_job = 2000;
  // An amax that jumps above this many times its history's earlier maximum is an event.
  double amax_jump_factor = 100;
  // One rank's cast amax above this many times every other rank's at a report step is an
  // event (AMAX_OUTLIER); <= 1 turns it off.
  double amax_outlier_factor = 8;
};

}  // namespace fp8::server
