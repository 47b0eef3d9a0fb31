// CPU embedding lookup and its backward. Arguments are validated by the caller (token
// ids included).
#pragma once

#include <cstdint>

namespace fp8::ops::cpu {

void embedding_forward(const int32_t* tokens, int64_t n, const float* table, int64_t dim, float* out);

// grad_table[tokens[i]] += grad_out[i]. Each thread owns a slice of the vocabulary and
// adds its tokens' rows in position order, so repeated tokens never race and the sums are
// the same on every run.
void embedding_backward(const int32_t* tokens, int64_t n, const float* grad_out, int64_t vocab, int64_t dim,
                        float* grad_table);

}  // namespace fp8::ops::cpu
