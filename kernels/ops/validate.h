// Argument checks for every ModelOps method, shared by all implementations so that each
// rejects the same bad call with the same message before touching memory. Messages start
// with the method's name and say what is wrong and where.
//
// Shape and pointer checks need no memory access. Token ids and targets are values in the
// implementation's memory: `check_token_ids` and `check_targets` read them and so suit
// host memory only (a device implementation checks them in its kernels).
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "fp8/model_ops.h"

namespace fp8::ops {

absl::Status validate_embedding_forward(const int32_t* tokens, int64_t n, const float* table, int64_t vocab,
                                        int64_t dim, const float* out);
absl::Status validate_embedding_backward(const int32_t* tokens, int64_t n, const float* grad_out, int64_t vocab,
                                         int64_t dim, const float* grad_table);
absl::Status validate_rmsnorm_forward(const float* x, const float* weight, int64_t rows, int64_t dim, float eps,
                                      const float* out, const float* inv_rms);
absl::Status validate_rmsnorm_backward(const float* x, const float* weight, const float* inv_rms, const float* grad_out,
                                       int64_t rows, int64_t dim, const float* grad_x, const float* grad_weight);
absl::Status validate_rope_forward(const RopeShape& shape, double theta, const float* x, const float* out);
absl::Status validate_rope_backward(const RopeShape& shape, double theta, const float* grad_out, const float* grad_x);
absl::Status validate_attention_forward(const AttentionShape& s, const float* q, const float* k, const float* v,
                                        const float* out, const float* lse);
absl::Status validate_attention_backward(const AttentionShape& s, const float* q, const float* k, const float* v,
                                         const float* out, const float* lse, const float* grad_out, const float* grad_q,
                                         const float* grad_k, const float* grad_v);
absl::Status validate_swiglu_forward(const float* gate, const float* up, int64_t n, const float* out);
absl::Status validate_swiglu_backward(const float* gate, const float* up, const float* grad_out, int64_t n,
                                      const float* grad_gate, const float* grad_up);
absl::Status validate_add(const float* a, const float* b, int64_t n, const float* out);
absl::Status validate_accumulate(const float* x, int64_t n, const float* y);
absl::Status validate_cross_entropy_forward(const float* logits, const int32_t* targets, int64_t rows, int64_t vocab,
                                            const float* loss, const float* lse);
absl::Status validate_cross_entropy_backward(const float* logits, const int32_t* targets, const float* lse,
                                             int64_t rows, int64_t vocab, float grad_loss, const float* grad_logits);
absl::Status validate_adamw(const AdamWHyperparams& h, int64_t step, const float* param, const float* grad,
                            const float* m, const float* v, int64_t n);
absl::Status validate_sum_of_squares(const float* x, int64_t n);
absl::Status validate_scale_inplace(const float* x, int64_t n, float factor);

// Host-memory value checks (see above).
absl::Status check_token_ids(const char* op, const int32_t* tokens, int64_t n, int64_t vocab);
absl::Status check_targets(const char* op, const int32_t* targets, int64_t rows, int64_t vocab);

}  // namespace fp8::ops
