// The coordinator's gang scheduler: plain logic over snapshots of the queue and the
// workers. No gRPC, no SQLite, no proto: the coordinator builds the views from its
// store, calls Schedule(), and turns each Placement into an attempt.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace fp8::scheduler {

enum class DeviceKind { kCpu, kCuda };

// "cpu" / "cuda", for messages.
const char* DeviceKindName(DeviceKind kind);

struct WorkerView {
  std::string id;
  DeviceKind kind = DeviceKind::kCpu;
  int64_t registered_seq = 0;  // order of (re-)registration; ties broken by id
  bool busy = false;           // already holds a rank of a running attempt
  bool alive = false;          // heartbeating within the liveness window
  int cpus = 0;                // cores offered to a rank; 0: unknown (any job fits)
  double memory_gb = 0;        // host memory offered to a rank, GiB; 0: unknown
};

struct JobView {
  std::string id;
  int priority = 0;           // higher runs first
  int64_t submitted_seq = 0;  // lower runs first within a priority; ties broken by id
  int world_size = 1;
  DeviceKind kind = DeviceKind::kCpu;
  int cpus_per_rank = 1;  // resources.cpus_per_rank
  double memory_gb = 0;   // a rank's need, GiB (the coordinator's RankMemoryNeedGb); 0: nothing to check
};

// Whether `worker` can hold one rank of `job`: its offered cores and memory (where it
// said what it offers) cover the rank's.
bool Fits(const JobView& job, const WorkerView& worker);

struct RankSlot {
  int rank = 0;
  std::string worker_id;

  friend bool operator==(const RankSlot&, const RankSlot&) = default;
};

struct Placement {
  std::string job_id;
  std::vector<RankSlot> ranks;  // ranks[r].rank == r, r in [0, world_size)

  friend bool operator==(const Placement&, const Placement&) = default;
};

// Places as many queued jobs as the free workers allow, in one pass.
//
// Order: priority (higher first), then submitted_seq (lower first), then id.
// Gang: a job is placed only when world_size free (alive and not busy) workers of its
//   kind that fit its ranks (Fits) exist, all of them at once; otherwise nothing is
//   reserved for it.
// Each worker appears in at most one placement of a call.
// Ranks: the free workers of the kind still unused in this call that fit, sorted by
//   registered_seq then id; rank r gets the r-th. Same inputs, same output.
// Head of line, per device kind: a job that does not fit blocks every job after it of
//   the SAME kind in this call (see scheduler.cc for why); jobs of the other kind are
//   unaffected.
// A job with world_size < 1 is malformed (the API rejects it before it gets here): it is
//   skipped and blocks nothing. A worker id listed twice is used at most once.
//
// Returns the placements in the order the jobs were considered.
std::vector<Placement> Schedule(std::span<const JobView> queued,
                                std::span<const WorkerView> workers);

}  // namespace fp8::scheduler
