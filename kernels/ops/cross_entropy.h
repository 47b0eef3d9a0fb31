// CPU mean cross-entropy over rows of logits, and its backward. Arguments are validated
// by the caller (targets included).
#pragma once

#include <cstdint>

namespace fp8::ops::cpu {

// Rows of logits are `ld` floats apart, their first `vocab` the vocabulary's (the rest is
// padding, outside the softmax).
//
// *loss = mean over non-ignored rows of (lse_r - logits[r, target_r]), 0 if every row is
// ignored. Row sums and the loss sum are accumulated in double; per-chunk partial sums are
// added in chunk order, so the result does not depend on thread timing.
void cross_entropy_forward(const float* logits, const int32_t* targets, int64_t rows, int64_t vocab, int64_t ld,
                           float* loss, float* lse);

// grad_logits[r, j] = grad_loss / n_counted * (softmax(logits[r])_j - [j == target_r]),
// and 0 on ignored rows and in the padding.
void cross_entropy_backward(const float* logits, const int32_t* targets, const float* lse, int64_t rows, int64_t vocab,
                            int64_t ld, float grad_loss, float* grad_logits);

}  // namespace fp8::ops::cpu
