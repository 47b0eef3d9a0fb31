// Helpers for the model-op tests: random data, and finite-difference gradient checks.
//
// How the gradient checks work: each op's fp32 backward (the code under test) is compared
// with central differences of an independent double-precision re-evaluation of the op's
// forward (reference_ops.h), for the scalar loss L = Σ w ∘ y with fixed random weights w
// (so the backward's grad_out is w). In double, with step h = 1e-5 and O(1) data, the
// central difference is accurate to ~1e-9 (truncation h²·f''' and rounding 1e-16·|L|/h),
// so what the check measures is the fp32 backward's own error.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "fp8/fp8.h"

namespace fp8::ops_test {

using Vec = std::vector<double>;

// Uniform in [lo, hi), reproducible from the seed.
std::vector<float> uniform(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f);
// Quiet NaNs: the initial contents of a buffer the op must overwrite entirely.
std::vector<float> nans(size_t n);
Vec to_double(const std::vector<float>& x);

// Σ w_i · y_i, the test loss.
double weighted_sum(const Vec& y, const std::vector<float>& w);

// Central differences ∂f/∂x_i at the listed indices (all when `indices` is empty).
// Entries not listed are 0.
Vec numeric_gradient(const std::function<double(const Vec&)>& f, Vec x, const std::vector<size_t>& indices = {},
                     double h = 1e-5);

// `count` distinct indices in [0, n), for shapes too large to difference every entry.
std::vector<size_t> sample_indices(size_t n, size_t count, uint32_t seed);

// The relative tolerance of an fp32 gradient against the double reference: every entry
// must satisfy |analytic − numeric| ≤ tol · max(1, max_i |numeric_i|). fp32 backward
// passes land near 1e-6 of the gradient's scale; 1e-4 leaves room for accumulation
// over a few hundred terms while any formula error (O(1) of the scale) fails loudly.
inline constexpr double kGradTolerance = 1e-5;

// Compares at the listed indices (all when empty); reports the worst entry on failure.
void expect_gradient_near(const std::vector<float>& analytic, const Vec& numeric, const std::string& what,
                          const std::vector<size_t>& indices = {}, double tol = kGradTolerance);

// Largest |a_i − b_i| / max(1, max |b|): the comparison of forward outputs.
double scaled_max_error(const std::vector<float>& a, const Vec& b);

// max |x| over each of `rows` runs of `cols` values: what an op's row-amax output
// (fp8::RowAmaxes) must equal bit for bit, given the values as stored.
std::vector<float> row_amaxes(const std::vector<float>& x, int64_t rows, int64_t cols);
// The same of rows · cols values stored as `act` at x (bf16 widened exactly).
std::vector<float> stored_row_amaxes(const void* x, DType act, int64_t rows, int64_t cols);

}  // namespace fp8::ops_test
