// Argument checks for every ModelOps method, shared by all implementations so that each
// rejects the same bad call with the same message before touching memory. Messages start
// with the method's name and say what is wrong and where.
//
// Every method taking activations checks `act` first (float32 or bfloat16, model_ops.h).
// The shape checks bound a tensor's size as fp32 whatever `act`: the CPU stages bf16
// activations through fp32 copies, and one limit for both types keeps the messages alike.
//
// Shape and pointer checks need no memory access. Token ids and targets are values in the
// implementation's memory: `check_token_ids` and `check_targets` read them and so suit
// host memory only (a device implementation checks them in its kernels).
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "fp8/fp8.h"
#include "fp8/model_ops.h"

namespace fp8::ops {

absl::Status validate_embedding_forward(const int32_t* tokens, int64_t n, const float* table, int64_t vocab,
                                        int64_t dim, const void* out, DType act);
absl::Status validate_embedding_backward(const int32_t* tokens, int64_t n, const void* grad_out, int64_t vocab,
                                         int64_t dim, const float* grad_table, DType act);
absl::Status validate_rmsnorm_forward(const void* x, const float* weight, int64_t rows, int64_t dim, float eps,
                                      const void* out, const float* inv_rms, DType act);
absl::Status validate_rmsnorm_backward(const void* x, const float* weight, const float* inv_rms, const void* grad_out,
                                       int64_t rows, int64_t dim, const void* grad_x, const float* grad_weight,
                                       DType act);
absl::Status validate_rope_forward(const RopeShape& shape, double theta, const void* x, const void* out, DType act);
absl::Status validate_rope_backward(const RopeShape& shape, double theta, const void* grad_out, const void* grad_x,
                                    DType act);
absl::Status validate_attention_forward(const AttentionShape& s, const void* q, const void* k, const void* v,
                                        const void* out, const float* lse, DType act);
absl::Status validate_attention_backward(const AttentionShape& s, const void* q, const void* k, const void* v,
                                         const void* out, const float* lse, const void* grad_out, const void* grad_q,
                                         const void* grad_k, const void* grad_v, DType act);
absl::Status validate_kv_cache_attention_forward(const KvCacheAttentionShape& s, const void* q, const void* k_cache,
                                                 const void* v_cache, const void* out, DType act);
absl::Status validate_swiglu_forward(const void* gate, const void* up, int64_t n, const void* out, DType act,
                                     const RowAmaxes& row_amax);
absl::Status validate_swiglu_backward(const void* gate, const void* up, const void* grad_out, int64_t n,
                                      const void* grad_gate, const void* grad_up, DType act,
                                      const RowAmaxes& grad_gate_row_amax, const RowAmaxes& grad_up_row_amax);
absl::Status validate_add(const void* a, const void* b, int64_t n, const void* out, DType act);
absl::Status validate_accumulate(const void* x, int64_t n, const void* y, DType act);
absl::Status validate_cross_entropy_forward(const void* logits, const int32_t* targets, int64_t rows, int64_t vocab,
                                            int64_t padded_vocab, const float* loss, const float* lse, DType act);
absl::Status validate_cross_entropy_backward(const void* logits, const int32_t* targets, const float* lse, int64_t rows,
                                             int64_t vocab, int64_t padded_vocab, float grad_loss,
                                             const void* grad_logits, DType act);
absl::Status validate_adamw(const AdamWHyperparams& h, int64_t step, const RowAmaxes& param_row_amax,
                            const float* param, const float* grad,
                            const float* m, const float* v, int64_t n);
absl::Status validate_sum_of_squares(const float* x, int64_t n);
// queue_grad_norm's own arguments (each buffer: validate_sum_of_squares).
absl::Status validate_grad_norm(double max_norm, const double* sum_of_squares, const float* clip_scale,
                                const char* op = "queue_grad_norm");

// Host-memory value checks (see above).
absl::Status check_token_ids(const char* op, const int32_t* tokens, int64_t n, int64_t vocab);
absl::Status check_targets(const char* op, const int32_t* targets, int64_t rows, int64_t vocab);

}  // namespace fp8::ops
