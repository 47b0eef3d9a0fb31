// Naive double-precision forwards of the model ops, written from the formulas and
// independently of kernels/ops: the definitions the fp32 kernels are compared with, and
// what the finite-difference gradient checks re-evaluate. Tensor layouts are those of
// fp8/model_ops.h.
#pragma once

#include <cstdint>
#include <vector>

#include "fp8/model_ops.h"
#include "tests/ops/gradient_check.h"

namespace fp8::ops_test::ref {

Vec embedding(const std::vector<int32_t>& tokens, const Vec& table, int64_t dim);

// Also returns each row's 1/rms when `inv_rms` is given.
Vec rmsnorm(const Vec& x, const Vec& weight, int64_t rows, int64_t dim, double eps, Vec* inv_rms = nullptr);

// Rotation by +angle (forward); `inverse` rotates by −angle.
Vec rope(const Vec& x, const RopeShape& s, double theta, bool inverse = false);

// Materialises each head's full [seq, seq] probability matrix, future keys at −∞.
struct AttentionResult {
  Vec out;  // [batch, seq, n_heads, head_dim]
  Vec lse;  // [batch, n_heads, seq]
};
AttentionResult attention(const Vec& q, const Vec& k, const Vec& v, const AttentionShape& s);

Vec swiglu(const Vec& gate, const Vec& up);
Vec add(const Vec& a, const Vec& b);

// Mean over rows whose target is not kIgnoreTarget; 0 if there are none.
double cross_entropy(const Vec& logits, const std::vector<int32_t>& targets, int64_t rows, int64_t vocab);

// y = x · wᵀ for x [rows, in] and w [out, in] (torch.nn.Linear's layout).
Vec linear(const Vec& x, const Vec& w, int64_t rows, int64_t in, int64_t out);

}  // namespace fp8::ops_test::ref
