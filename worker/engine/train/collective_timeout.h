// How long a training step's collectives wait for a peer, from the pace of the job's own
// steps.
//
// A rank that dies or hangs leaves its peers blocked in a collective until the group's
// timeout runs out. One fixed timeout must cover the slowest moments of any job (the
// rendezvous, the first steps that warm caches, a checkpoint written to slow storage), so
// in steady training a hang was caught minutes late. As torchtitan separates its init and
// train timeouts, this keeps the group's own timeout (fp8-train --timeout) for those
// moments and sets the steps' once their pace is known:
//   train.collective_timeout_seconds > 0: that, for every step's collectives;
//   0 (the default): after kSettleSteps steps, kSlowestStepMultiple x the slowest step so
//     far, within [kShortestDerived, the group's timeout].
// Resumes, evaluations and checkpoints run with the group's timeout (Relaxed).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/time/time.h"
#include "worker/engine/collectives/process_group.h"

namespace fp8::engine {

inline constexpr int kSettleSteps = 3;
inline constexpr int kSlowestStepMultiple = 20;
inline constexpr absl::Duration kShortestDerived = absl::Seconds(60);

// The derived timeout for steps whose slowest took `slowest_step`, under a group whose own
// timeout is `group_timeout` (never more than that).
absl::Duration derived_collective_timeout(absl::Duration slowest_step, absl::Duration group_timeout);

class CollectiveTimeout {
 public:
  // `group` (not owned, may be null: nothing to do) keeps its timeout until the steps'
  // applies. `configured_seconds` is train.collective_timeout_seconds.
  CollectiveTimeout(collectives::ProcessGroup* group, int64_t configured_seconds)
      : CollectiveTimeout(std::vector<collectives::ProcessGroup*>{group}, configured_seconds) {}
  // The same for every group of a mesh (the data- and tensor-parallel ones; nulls skipped),
  // all waiting alike; the groups' own timeout is the shortest of theirs.
  CollectiveTimeout(std::vector<collectives::ProcessGroup*> groups, int64_t configured_seconds);

  // Before a training step: the group waits what steps wait, once that is known.
  void begin_step();
  // After it: how long it took on the host, waits for the device included.
  void end_step(absl::Duration step_time);

  // What a step's collectives wait now (the group's timeout until it is known).
  absl::Duration for_steps() const;

  // While it lives, the group waits its own (longest) timeout.
  class Relaxed {
   public:
    explicit Relaxed(const CollectiveTimeout& owner);
    ~Relaxed();
    Relaxed(const Relaxed&) = delete;
    Relaxed& operator=(const Relaxed&) = delete;

   private:
    std::vector<collectives::ProcessGroup*> groups_;
    std::vector<absl::Duration> restore_;
  };
  Relaxed relaxed() const { return Relaxed(*this); }

 private:
  std::vector<collectives::ProcessGroup*> groups_;
  absl::Duration group_timeout_;
  absl::Duration configured_;  // zero: derived
  int steps_ = 0;
  absl::Duration slowest_ = absl::ZeroDuration();
};

}  // namespace fp8::engine
