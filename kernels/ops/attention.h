// CPU causal self-attention with grouped-query attention, memory-efficient: only the
// log-sum-exp of each score row is kept between forward and backward. Arguments are
// validated by the caller.
//
// Work goes in blocks of kQueryBlock query rows of one (batch, head): the block's scores
// against the keys it may see, S = scale · Q_blk · K[0, end)ᵀ, are one sgemm into a
// [kQueryBlock, seq] scratch, so extra memory is O(kQueryBlock · seq) per thread instead
// of O(seq²) per head.
#pragma once

#include <cstdint>

#include "fp8/model_ops.h"

namespace fp8::ops::cpu {

// Query rows per block: enough for sgemm to run near peak, small enough that the block's
// scores stay in cache.
inline constexpr int64_t kQueryBlock = 64;

// Parallel over (batch, head, query block), each unit independent.
void attention_forward(const AttentionShape& s, const float* q, const float* k, const float* v, float* out, float* lse);

// Parallel over (batch, kv head): a unit owns the grad_k and grad_v rows of its kv head,
// which every query head of its group and every query block adds into, so no two threads
// write the same element. With P recomputed from lse and D = rowsum(grad_out ∘ out):
//   grad_v += Pᵀ·grad_out,  dS = P ∘ (grad_out·vᵀ − D),
//   grad_q  = scale·dS·k,   grad_k += scale·dSᵀ·q.
void attention_backward(const AttentionShape& s, const float* q, const float* k, const float* v, const float* out,
                        const float* lse, const float* grad_out, float* grad_q, float* grad_k, float* grad_v);

}  // namespace fp8::ops::cpu
