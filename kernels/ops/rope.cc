#include "ops/rope.h"

#include "cpu/parallel.h"
#include "ops/cpu_loops.h"
#include "ops/model_arith.h"

namespace fp8::ops::cpu {

void rope(const RopeShape& shape, const RopeTable& table, RopeDirection direction, const float* in, float* out) {
  const int64_t pairs = shape.head_dim / 2;
  const int64_t row = shape.heads * shape.head_dim;  // one (batch, position)
  // The inverse rotation is the rotation by the negated angle: same cosine, negated sine.
  const float sin_sign = direction == RopeDirection::kForward ? 1.0f : -1.0f;
  fp8::cpu::parallel_for(shape.batch * shape.seq, row_grain(row), [&](int64_t, int64_t begin, int64_t end) {
    for (int64_t bs = begin; bs < end; ++bs) {
      const int64_t pos = shape.start + bs % shape.seq;
      const float* cos_row = table.cos_row(pos);
      const float* sin_row = table.sin_row(pos);
      for (int64_t h = 0; h < shape.heads; ++h) {
        const float* x = in + bs * row + h * shape.head_dim;
        float* y = out + bs * row + h * shape.head_dim;
        for (int64_t i = 0; i < pairs; ++i) {
          rotate_pair(x[2 * i], x[2 * i + 1], cos_row[i], sin_sign * sin_row[i], &y[2 * i], &y[2 * i + 1]);
        }
      }
    }
  });
}

}  // namespace fp8::ops::cpu
