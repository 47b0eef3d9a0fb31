// Delayed scaling's state of one fp8 cast as a flat array of floats, and the rule that
// records a step's amax into it (TransformerEngine's DelayedScaling). One array layout
// and one record() serve the host class that reports and checkpoints the state
// (worker/engine/float8/scaling.h) and every backend's Backend::record_delayed_amaxes,
// which keeps the state in backend memory so that a training step never waits for its
// amaxes: all of them compute the same bits.
//
// Integers in the array (lengths, indices, flags) are far below 2^24, so fp32 holds them
// exactly.
#pragma once

#include <cstdint>

#include "fp8/arith.h"

namespace fp8::delayed {

enum Field : int {
  kHistoryLen,  // h >= 1, the ring's length
  kNext,        // the ring slot the next amax goes to
  kFilled,      // amaxes recorded so far, at most h
  kHasScale,    // 1 once a usable amax (finite and > 0) gave a scale, else 0
  kScale,       // the scale for the next cast (meaningful when kHasScale is 1)
  kRangeUse,    // the last recorded cast's amax × the scale it used / fp8_max; 0 when it had none
  kFp8Max,      // the cast format's largest value (448 for e4m3, 57344 for e5m2)
  kPow2,        // 1 when scales round down to a power of two, else 0
  kRing,        // h amaxes follow, ring[kNext] the oldest once the ring is full
};

FP8_HD int64_t state_floats(int history_len) { return kRing + history_len; }

FP8_HD bool is_finite(float x) { return (float_bits(x) & 0x7F800000u) != 0x7F800000u; }

FP8_HD Format format_of(const float* state) {
  return state[kFp8Max] == fp8_max(Format::kE4M3) ? Format::kE4M3 : Format::kE5M2;
}

// A fresh state: nothing recorded, no scale yet.
FP8_HD void init_state(float* state, int history_len, Format format, bool pow2) {
  state[kHistoryLen] = static_cast<float>(history_len);
  state[kNext] = 0.0f;
  state[kFilled] = 0.0f;
  state[kHasScale] = 0.0f;
  state[kScale] = 0.0f;
  state[kRangeUse] = 0.0f;
  state[kFp8Max] = fp8_max(format);
  state[kPow2] = pow2 ? 1.0f : 0.0f;
  for (int i = 0; i < history_len; ++i) state[kRing + i] = 0.0f;
}

// Appends this step's amax (evicting the oldest once h are held) and recomputes the scale
// from the max over the window. TransformerEngine's rule: when that max is 0 or not finite
// (a NaN or Inf anywhere in the window), the previous scale is kept, so one overflowing
// step freezes the scale for h steps rather than poisoning it.
FP8_HD void record(float* state, float amax) {
  const int h = static_cast<int>(state[kHistoryLen]);
  const bool had_scale = state[kHasScale] != 0.0f;
  // The cast being recorded used the scale from before this amax.
  state[kRangeUse] = had_scale && is_finite(amax) ? amax * state[kScale] / state[kFp8Max] : 0.0f;
  int next = static_cast<int>(state[kNext]);
  state[kRing + next] = amax;
  next = next + 1 == h ? 0 : next + 1;
  state[kNext] = static_cast<float>(next);
  int filled = static_cast<int>(state[kFilled]);
  if (filled < h) ++filled;
  state[kFilled] = static_cast<float>(filled);

  // The window max, any non-finite entry making the whole window unusable (as torch.max
  // over TE's history propagates a NaN).
  float window_max = 0.0f;
  bool finite = true;
  for (int i = 0; i < filled; ++i) {
    const float a = state[kRing + i];
    if (!is_finite(a)) finite = false;
    if (a > window_max) window_max = a;
  }
  if (finite && window_max > 0.0f) {
    state[kScale] = scale_from_amax(window_max, format_of(state), state[kPow2] != 0.0f);
    state[kHasScale] = 1.0f;
  }
}

// record(), then the scale for the cast's next step and its inverse (inverse_scale) into
// *scale and *inverse: what Backend::record_delayed_amaxes does for each cast. Both are 1
// while the state has no scale (the cast then scales dynamically and reads neither).
FP8_HD void record_and_publish(float* state, float amax, float* scale, float* inverse) {
  record(state, amax);
  const float s = state[kHasScale] != 0.0f ? state[kScale] : 1.0f;
  *scale = s;
  *inverse = inverse_scale(s);
}

}  // namespace fp8::delayed
