// Delayed scaling of one fp8 cast (TransformerEngine's DelayedScaling): the scale used in
// step t comes from the largest amax recorded in the last h steps, so the cast needs no
// amax pass of its own and the amaxes of a whole model can be reduced across ranks once
// per step.
//
// Plain host state, cheap to copy: a ring of the last h amaxes and the scale they give,
// held in the flat layout of fp8/delayed_state.h. A training step keeps the same layout in
// backend memory and records each step there (Backend::record_delayed_amaxes), with the
// same rule, so this class is what the host makes of a state it read back (reports,
// checkpoints) or is about to upload (a restore, a history replayed from the coordinator).
// It knows nothing of backends or ranks: the owner records amaxes that were already
// reduced (all-reduce MAX) across ranks, so every rank's state evolves identically.
//
// scaling.cc also holds Float8Linear's side of scaling (its histories in backend memory,
// the step's amaxes, checkpointed state, the weight's scale for a cast made elsewhere).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "fp8/arith.h"

namespace fp8::engine {

class DelayedScaling {
 public:
  // history_len >= 1 (the caller validates it; see config.h).
  DelayedScaling(int history_len, Format format, bool pow2_scale);

  // A state in fp8/delayed_state.h's layout (as backend memory holds it), checked: the
  // history length, indices, flags and format must be what a state of history_len, format
  // and pow2_scale can hold.
  static absl::StatusOr<DelayedScaling> from_state(absl::Span<const float> state, int history_len, Format format,
                                                   bool pow2_scale);
  // The state in fp8/delayed_state.h's layout, delayed::state_floats(history_len()) floats.
  const std::vector<float>& state() const { return state_; }

  // The scale for the next cast, computed from the history before that cast runs.
  // nullopt until a usable amax (finite and > 0) has been recorded: the owner then scales
  // that cast dynamically, which is what the very first step does.
  std::optional<float> next_scale() const;

  // Appends this step's amax (evicting the oldest once h are held) and recomputes the
  // scale from the max over the window: delayed::record, which says how NaN, Inf and 0
  // amaxes are handled.
  void record(float amax);

  // Starts over from `amaxes` (oldest first; only the newest history_len count), as if a
  // fresh state had recorded them one by one: how a restarted job resumes the history the
  // coordinator kept.
  void replay(absl::Span<const float> amaxes);

  // How much of the fp8 range the newest recorded cast used: its amax times the scale it
  // was cast with, over fp8_max. Above 1 the cast saturated (values beyond the range were
  // clamped), which delayed scaling allows when a tensor outgrows its history. 0 when
  // that cast had no delayed scale yet (it scaled dynamically) or nothing was recorded.
  float last_range_use() const;

  // Recorded amaxes, oldest first (at most history_len of them).
  std::vector<float> history() const;
  int history_len() const;
  Format format() const { return format_; }
  bool pow2_scale() const { return pow2_; }

  // Checkpoint form: a flat float vector, serialized_size(history_len) long: the history
  // length, the ring's next slot and fill, whether there is a scale, the scale, then the
  // ring. The last cast's range use is not kept: a restored state reports 0 until it
  // records again.
  std::vector<float> serialize() const;
  // Restores what serialize() wrote for a state of the same history_len; on error (wrong
  // length or a corrupt header) the state is unchanged.
  absl::Status restore(absl::Span<const float> data);
  static int64_t serialized_size(int history_len);

 private:
  std::vector<float> state_;  // fp8/delayed_state.h's layout
  Format format_;
  bool pow2_;
};

}  // namespace fp8::engine
