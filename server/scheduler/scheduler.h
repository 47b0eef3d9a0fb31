// The coordinator's gang scheduler: plain logic over snapshots of the queue and the
// workers. No gRPC, no SQLite, no proto: the coordinator builds the views from its
// store, calls schedule(), turns each Placement into an attempt and shows each Waiting.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace fp8::scheduler {

enum class DeviceKind { kCpu, kCuda };

// "cpu" / "cuda", for messages.
const char* device_kind_name(DeviceKind kind);

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
bool fits(const JobView& job, const WorkerView& worker);

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

// Why a queued job was not placed, for `fp8ctl list`/`describe` and the metrics.
struct Waiting {
  enum class Reason {
    kWorkers,  // too few free workers of its kind that fit its ranks
    kBehind,   // enough would be free, but an earlier job of its kind holds them back
  };
  std::string job_id;
  Reason reason = Reason::kWorkers;
  // "waiting for 3 cpu workers: 2 registered, 1 free", "behind job-4 (priority 5)".
  std::string text;

  friend bool operator==(const Waiting&, const Waiting&) = default;
};

// "workers" / "behind", the metric's label.
const char* waiting_reason_name(Waiting::Reason reason);

struct Plan {
  std::vector<Placement> placements;  // in the order the jobs were considered
  std::vector<Waiting> waiting;       // every other job, in the same order
};

// Places as many queued jobs as the free workers allow, in one pass, and says why each
// other job waits.
//
// Order: priority (higher first), then submitted_seq (lower first), then id.
// Gang: a job is placed only when world_size free (alive and not busy) workers of its
//   kind that fit its ranks (Fits) exist, all of them at once.
// Each worker appears in at most one placement of a call.
// Ranks: the free workers of the kind still unused in this call that fit, sorted by
//   registered_seq then id; rank r gets the r-th. Same inputs, same output.
// Holding back (backfill): a job that cannot be placed but that the alive workers of its
//   kind could hold (enough of them fit, busy or not) holds back every free worker that
//   fits it: a later job may take only free workers it could not use, so it never delays
//   that job's start. A job more alive workers must join for (fewer fit it than it has
//   ranks) holds nothing back until they have: it cannot start sooner by waiting.
// A job with world_size < 1 is malformed (the API rejects it before it gets here): it is
//   skipped and blocks nothing. A worker id listed twice is used at most once.
Plan schedule(std::span<const JobView> queued, std::span<const WorkerView> workers);

}  // namespace fp8::scheduler
