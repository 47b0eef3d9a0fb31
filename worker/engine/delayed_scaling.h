// Delayed scaling of one fp8 cast (TransformerEngine's DelayedScaling; REFERENCE.md
// "Scaling"): the scale used in step t comes from the largest amax recorded in the last
// h steps, so the cast needs no amax pass of its own and the amaxes of a whole model can
// be reduced across ranks once per step.
//
// Plain host state, cheap to copy: a ring of the last h amaxes and the scale they give.
// It knows nothing of backends or ranks: the owner records amaxes that were already
// reduced (all-reduce MAX) across ranks, so every rank's state evolves identically.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "fp8/arith.h"

namespace fp8::engine {

class DelayedScaling {
 public:
  // history_len >= 1 (the caller validates it; see cast_config.h).
  DelayedScaling(int history_len, Format format, bool pow2_scale);

  // The scale for the next cast, computed from the history before that cast runs.
  // nullopt until a usable amax (finite and > 0) has been recorded: the owner then scales
  // that cast dynamically, which is what the very first step does.
  std::optional<float> next_scale() const { return scale_; }

  // Appends this step's amax (evicting the oldest once h are held) and recomputes the
  // scale from the max over the window. TransformerEngine's rule: when that max is 0 or
  // not finite (a NaN or Inf anywhere in the window), the previous scale is kept, so a
  // single overflowing step freezes the scale for h steps rather than poisoning it.
  void record(float amax);

  // Starts over from `amaxes` (oldest first; only the newest history_len count), as if a
  // fresh state had recorded them one by one: how a restarted job resumes the history the
  // coordinator kept.
  void replay(absl::Span<const float> amaxes);

  // How much of the fp8 range the newest recorded cast used: its amax times the scale it
  // was cast with, over fp8_max. Above 1 the cast saturated (values beyond the range were
  // clamped), which delayed scaling allows when a tensor outgrows its history. 0 when
  // that cast had no delayed scale yet (it scaled dynamically) or nothing was recorded.
  float last_range_use() const { return last_range_use_; }

  // Recorded amaxes, oldest first (at most history_len of them).
  std::vector<float> history() const;
  int history_len() const { return static_cast<int>(ring_.size()); }
  Format format() const { return format_; }
  bool pow2_scale() const { return pow2_; }

  // Checkpoint form: a flat float vector, serialized_size(history_len) long. Integers in
  // it (counts, indices) are far below 2^24, so fp32 holds them exactly.
  std::vector<float> serialize() const;
  // Restores what serialize() wrote for a state of the same history_len; on error (wrong
  // length or a corrupt header) the state is unchanged.
  absl::Status restore(absl::Span<const float> data);
  static int64_t serialized_size(int history_len);

 private:
  std::vector<float> ring_;  // ring_[next_] is the slot the next amax goes to
  int next_ = 0;
  int filled_ = 0;
  std::optional<float> scale_;
  float last_range_use_ = 0.0f;
  Format format_;
  bool pow2_;
};

}  // namespace fp8::engine
