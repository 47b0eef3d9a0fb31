// The one place where a process group combines values: element by element, starting from
// rank 0's value and folding in ranks 1, 2, ..., W-1 in that order. The order never depends
// on which message arrived first, so every rank that computes an element gets the same bits,
// in every run (FSDP compares losses bit for bit between runs).
//
// Max propagates NaN (an overflowed amax must not vanish in the reduction) and keeps the
// earlier rank's value on ties, so max(-0, +0) is decided by rank order too.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>

#include "fp8/arith.h"
#include "worker/engine/collectives/process_group.h"

namespace fp8::engine::collectives {

template <typename T>
inline T combine(ReduceOp op, T acc, T next) {
  if (op == ReduceOp::kSum) return acc + next;
  return (acc < next || next != next) ? next : acc;  // NaN-propagating max
}

// out[i] = inputs[0][i] ⊕ inputs[1][i] ⊕ ... in rank order, i < count. `out` may be one of
// the inputs (exactly, not partially overlapping): each block of every input is read before
// that block of `out` is written.
template <typename T>
void reduce_in_rank_order(ReduceOp op, std::span<const T* const> inputs, T* out, int64_t count) {
  constexpr int64_t kBlock = 1024;  // stays in L1 while every rank's block is folded in
  T acc[kBlock];
  for (int64_t begin = 0; begin < count; begin += kBlock) {
    const int64_t n = std::min(kBlock, count - begin);
    std::copy_n(inputs[0] + begin, n, acc);
    for (size_t r = 1; r < inputs.size(); ++r) {
      const T* in = inputs[r] + begin;
      if (op == ReduceOp::kSum) {
        for (int64_t i = 0; i < n; ++i) acc[i] = combine(ReduceOp::kSum, acc[i], in[i]);
      } else {
        for (int64_t i = 0; i < n; ++i) acc[i] = combine(ReduceOp::kMax, acc[i], in[i]);
      }
    }
    std::copy_n(acc, n, out + begin);
  }
}

// The sum of bf16 values (raw bits): each widened to fp32 exactly, summed in fp32 in rank
// order, rounded to bf16 once (to nearest even). Same aliasing rule as above.
inline void sum_bf16_in_rank_order(std::span<const uint16_t* const> inputs, uint16_t* out, int64_t count) {
  constexpr int64_t kBlock = 1024;
  float acc[kBlock];
  for (int64_t begin = 0; begin < count; begin += kBlock) {
    const int64_t n = std::min(kBlock, count - begin);
    for (int64_t i = 0; i < n; ++i) acc[i] = bf16_to_float(inputs[0][begin + i]);
    for (size_t r = 1; r < inputs.size(); ++r) {
      const uint16_t* in = inputs[r] + begin;
      for (int64_t i = 0; i < n; ++i) acc[i] += bf16_to_float(in[i]);
    }
    for (int64_t i = 0; i < n; ++i) out[begin + i] = float_to_bf16(acc[i]);
  }
}

}  // namespace fp8::engine::collectives
