// RMSNorm and its backward.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "fp8/arith.h"
#include "fp8/model_ops.h"
#include "tests/ops/gradient_check.h"
#include "tests/ops/reference_ops.h"

namespace fp8::ops_test {
namespace {

constexpr float kEps = 1e-5f;

struct RmsnormCase {
  int64_t rows, dim;
};

void check_rmsnorm(const RmsnormCase& c, size_t fd_samples) {
  const auto x = uniform(static_cast<size_t>(c.rows * c.dim), 1, -2.0f, 2.0f);
  const auto weight = uniform(static_cast<size_t>(c.dim), 2, 0.5f, 1.5f);
  const auto w = uniform(x.size(), 3);
  auto& ops = cpu_model_ops();

  auto out = nans(x.size());
  auto inv_rms = nans(static_cast<size_t>(c.rows));
  ASSERT_TRUE(ops.rmsnorm_forward(x.data(), weight.data(), c.rows, c.dim, kEps, out.data(), inv_rms.data()).ok());
  Vec want_inv_rms;
  const Vec want = ref::rmsnorm(to_double(x), to_double(weight), c.rows, c.dim, kEps, &want_inv_rms);
  EXPECT_LT(scaled_max_error(out, want), 1e-6);
  EXPECT_LT(scaled_max_error(inv_rms, want_inv_rms), 1e-6);

  auto grad_x = nans(x.size());
  const float prior = -0.5f;
  std::vector<float> grad_weight(static_cast<size_t>(c.dim), prior);
  ASSERT_TRUE(ops.rmsnorm_backward(x.data(), weight.data(), inv_rms.data(), w.data(), c.rows, c.dim, grad_x.data(),
                                   grad_weight.data())
                  .ok());
  for (auto& g : grad_weight) g -= prior;

  const auto x_indices = fd_samples == 0 ? std::vector<size_t>{} : sample_indices(x.size(), fd_samples, 5);
  const Vec numeric_x = numeric_gradient(
      [&](const Vec& xd) { return weighted_sum(ref::rmsnorm(xd, to_double(weight), c.rows, c.dim, kEps), w); },
      to_double(x), x_indices);
  expect_gradient_near(grad_x, numeric_x, "grad_x", x_indices);
  const Vec numeric_weight = numeric_gradient(
      [&](const Vec& wd) { return weighted_sum(ref::rmsnorm(to_double(x), wd, c.rows, c.dim, kEps), w); },
      to_double(weight));
  expect_gradient_near(grad_weight, numeric_weight, "grad_weight");
}

TEST(RmsNorm, ForwardMatchesReferenceAndBackwardMatchesFiniteDifferences) { check_rmsnorm({6, 10}, 0); }

// 1100 rows of 32 make two chunks of rows (1024 per chunk at most): grad_weight is summed
// from per-thread partials, which must add up.
TEST(RmsNorm, ManyRowsSplitAcrossThreads) { check_rmsnorm({1100, 32}, 16); }

// The scale of x cancels (up to eps): 1000·x normalises to the same output.
TEST(RmsNorm, OutputIsScaleInvariant) {
  const int64_t rows = 3, dim = 16;
  const auto x = uniform(static_cast<size_t>(rows * dim), 7);
  std::vector<float> big(x);
  for (auto& v : big) v *= 1000.0f;
  const std::vector<float> weight(static_cast<size_t>(dim), 1.0f);
  std::vector<float> a(x.size()), b(x.size()), inv(static_cast<size_t>(rows));
  ASSERT_TRUE(cpu_model_ops().rmsnorm_forward(x.data(), weight.data(), rows, dim, 1e-12f, a.data(), inv.data()).ok());
  ASSERT_TRUE(cpu_model_ops().rmsnorm_forward(big.data(), weight.data(), rows, dim, 1e-12f, b.data(), inv.data()).ok());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5f) << i;
}

// row_amax: max |out[r, :]| of each row as stored (bf16-rounded for bf16 output), the
// rowwise amax an fp8 cast of `out` would compute; asking for it changes nothing else.
TEST(RmsNorm, RowAmaxIsEachOutputRowsLargestMagnitudeAsStored) {
  const int64_t rows = 9, dim = 37;
  const auto x = uniform(static_cast<size_t>(rows * dim), 8, -3.0f, 3.0f);
  const auto weight = uniform(static_cast<size_t>(dim), 9, -1.5f, 1.5f);
  const std::vector<uint16_t> x16 = [&] {
    std::vector<uint16_t> v(x.size());
    for (size_t i = 0; i < x.size(); ++i) v[i] = float_to_bf16(x[i]);
    return v;
  }();
  auto& ops = cpu_model_ops();
  for (const DType act : {DType::kFloat32, DType::kBFloat16}) {
    SCOPED_TRACE(dtype_name(act));
    const bool bf16 = act == DType::kBFloat16;
    const void* in = bf16 ? static_cast<const void*>(x16.data()) : x.data();
    std::vector<float> out(x.size()), plain_out(x.size()), inv(static_cast<size_t>(rows));
    std::vector<float> plain_inv(inv.size()), row_amax = nans(inv.size());
    ASSERT_TRUE(ops.rmsnorm_forward(in, weight.data(), rows, dim, kEps, plain_out.data(), plain_inv.data(), act).ok());
    ASSERT_TRUE(ops.rmsnorm_forward(in, weight.data(), rows, dim, kEps, out.data(), inv.data(), act, row_amax.data())
                    .ok());
    const size_t bytes = static_cast<size_t>(rows * dim) * dtype_size(act);
    EXPECT_EQ(std::memcmp(out.data(), plain_out.data(), bytes), 0) << "out changed";
    EXPECT_EQ(inv, plain_inv);
    EXPECT_EQ(row_amax, stored_row_amaxes(out.data(), act, rows, dim));
  }
}

// Store::kAccumulate adds grad_x to what the buffer holds (a residual stream's gradient):
// in fp32, exactly the written gradient plus the prior value, and grad_weight as before.
TEST(RmsNorm, BackwardCanAccumulateGradXIntoItsBuffer) {
  const int64_t rows = 5, dim = 24;
  const auto x = uniform(static_cast<size_t>(rows * dim), 21, -2.0f, 2.0f);
  const auto weight = uniform(static_cast<size_t>(dim), 22, 0.5f, 1.5f);
  const auto g = uniform(x.size(), 23);
  const auto prior = uniform(x.size(), 24, -3.0f, 3.0f);
  auto& ops = cpu_model_ops();
  std::vector<float> out(x.size()), inv(static_cast<size_t>(rows));
  ASSERT_TRUE(ops.rmsnorm_forward(x.data(), weight.data(), rows, dim, kEps, out.data(), inv.data()).ok());

  auto written = nans(x.size());
  std::vector<float> written_dw(static_cast<size_t>(dim), 0.0f), added_dw = written_dw;
  ASSERT_TRUE(ops.rmsnorm_backward(x.data(), weight.data(), inv.data(), g.data(), rows, dim, written.data(),
                                   written_dw.data())
                  .ok());
  std::vector<float> added = prior;
  ASSERT_TRUE(ops.rmsnorm_backward(x.data(), weight.data(), inv.data(), g.data(), rows, dim, added.data(),
                                   added_dw.data(), DType::kFloat32, Store::kAccumulate)
                  .ok());
  for (size_t i = 0; i < added.size(); ++i) EXPECT_EQ(added[i], prior[i] + written[i]) << i;
  EXPECT_EQ(added_dw, written_dw);
}

// grad_x_row_amax: max |grad_x[r, :]| of each row as stored (the sum when accumulating,
// bf16-rounded for bf16), for the fp8 cast of the linear that reads grad_x next; asking for
// it changes nothing else.
TEST(RmsNorm, BackwardRowAmaxIsEachGradRowsLargestMagnitudeAsStored) {
  const int64_t rows = 6, dim = 29;
  const size_t n = static_cast<size_t>(rows * dim);
  const auto x = uniform(n, 31, -2.0f, 2.0f), weight = uniform(static_cast<size_t>(dim), 32, 0.5f, 1.5f);
  const auto g = uniform(n, 33, -4.0f, 4.0f), prior = uniform(n, 34, -3.0f, 3.0f);
  auto bf16_of = [](const std::vector<float>& v) {
    std::vector<uint16_t> b(v.size());
    for (size_t i = 0; i < v.size(); ++i) b[i] = float_to_bf16(v[i]);
    return b;
  };
  const auto x16 = bf16_of(x), g16 = bf16_of(g), prior16 = bf16_of(prior);
  auto& ops = cpu_model_ops();
  std::vector<float> out(n), inv(static_cast<size_t>(rows));
  ASSERT_TRUE(ops.rmsnorm_forward(x.data(), weight.data(), rows, dim, kEps, out.data(), inv.data()).ok());
  for (const DType act : {DType::kFloat32, DType::kBFloat16}) {
    for (const Store store : {Store::kOverwrite, Store::kAccumulate}) {
      const bool bf16 = act == DType::kBFloat16;
      SCOPED_TRACE(::testing::Message() << dtype_name(act) << (store == Store::kAccumulate ? " accumulate" : ""));
      const void* in = bf16 ? static_cast<const void*>(x16.data()) : x.data();
      const void* grad = bf16 ? static_cast<const void*>(g16.data()) : g.data();
      // grad_x starts as the prior in act's type (fp32 storage is large enough for both).
      auto start = [&] {
        std::vector<float> v(prior);
        if (bf16) std::memcpy(v.data(), prior16.data(), n * sizeof(uint16_t));
        return v;
      };
      std::vector<float> plain = start(), grad_x = start(), dw(static_cast<size_t>(dim), 0.0f), plain_dw = dw;
      std::vector<float> row_amax = nans(static_cast<size_t>(rows));
      ASSERT_TRUE(ops.rmsnorm_backward(in, weight.data(), inv.data(), grad, rows, dim, plain.data(), plain_dw.data(),
                                       act, store)
                      .ok());
      ASSERT_TRUE(ops.rmsnorm_backward(in, weight.data(), inv.data(), grad, rows, dim, grad_x.data(), dw.data(), act,
                                       store, row_amax.data())
                      .ok());
      EXPECT_EQ(std::memcmp(grad_x.data(), plain.data(), n * dtype_size(act)), 0) << "grad_x changed";
      EXPECT_EQ(dw, plain_dw);
      EXPECT_EQ(row_amax, stored_row_amaxes(grad_x.data(), act, rows, dim));
    }
  }
}

}  // namespace
}  // namespace fp8::ops_test
