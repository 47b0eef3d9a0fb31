// CPU attention of new queries against a KV cache (ModelOps::kv_cache_attention_forward),
// for generation. Arguments are validated by the caller.
//
// Each (batch, query, head) is a plain loop over its visible keys: scores, softmax and the
// weighted sum of values in double, one rounding to fp32 at the end. A decode step has one
// query a head, so its products are matrix-vector ones, which these loops do in one pass.
#pragma once

#include "fp8/model_ops.h"

namespace fp8::ops::cpu {

// Parallel over (batch, query, head), each unit independent.
void kv_cache_attention_forward(const KvCacheAttentionShape& s, const float* q, const float* k_cache,
                                const float* v_cache, float* out);

}  // namespace fp8::ops::cpu
