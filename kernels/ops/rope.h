// CPU rotary position embedding over [batch, seq, heads, head_dim]. Arguments are
// validated by the caller.
#pragma once

#include <cstdint>

#include "fp8/model_ops.h"
#include "ops/rope_table.h"

namespace fp8::ops::cpu {

enum class RopeDirection { kForward, kInverse };

// out may equal in: each pair is read before it is written.
void rope(const RopeShape& shape, const RopeTable& table, RopeDirection direction, const float* in, float* out);

}  // namespace fp8::ops::cpu
