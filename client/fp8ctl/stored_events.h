// The events a job has recorded so far, for `describe` (without progress reports) and
// `plot` (with them).
//
// WatchJob has no "stored only" mode: for a job still running, the stream stays open
// waiting for live events. So the stream is read until it goes quiet (no event for a short
// gap once the stored ones have come out, which they do in one burst) and then cancelled;
// for a final job it ends by itself.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "client/fp8ctl/session.h"

namespace fp8::ctl {

struct StoredEventsResult {
  std::vector<v1::JobEvent> events;
  grpc::Status status;  // OK also when the quiet gap ended the read
};

StoredEventsResult read_stored_events(Session& session, const std::string& job_id, bool include_progress = false,
                                    std::chrono::milliseconds first_event_wait = std::chrono::seconds(3),
                                    std::chrono::milliseconds quiet_gap = std::chrono::milliseconds(400));

}  // namespace fp8::ctl
