// AdamW, as torch.optim.AdamW defines it: decoupled weight decay, bias-corrected moments.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "fp8/model_ops.h"
#include "tests/ops/gradient_check.h"

namespace fp8::ops_test {
namespace {

// lr 0.1, betas (0.9, 0.99), eps 1e-8, weight_decay 0.1, worked by hand:
//
// parameter 0 starts at 1.0, gradients 0.5 then -0.25
//   step 1: decay      p = 1.0 · (1 − 0.1·0.1)                  = 0.99
//           moments    m = 0.1·0.5 = 0.05        v = 0.01·0.25 = 0.0025
//           corrected  m̂ = 0.05 / (1 − 0.9) = 0.5  v̂ = 0.0025 / (1 − 0.99) = 0.25
//           update     p = 0.99 − 0.1 · 0.5 / (√0.25 + 1e-8)   = 0.890000002
//   step 2: decay      p = 0.890000002 · 0.99                   = 0.88110000198
//           moments    m = 0.9·0.05 + 0.1·(−0.25) = 0.02
//                      v = 0.99·0.0025 + 0.01·0.0625 = 0.0031
//           corrected  m̂ = 0.02 / (1 − 0.81) = 0.105263158
//                      v̂ = 0.0031 / (1 − 0.9801) = 0.155778894, √v̂ = 0.394688351
//           update     p = 0.88110000198 − 0.1 · 0.105263158 / 0.394688361 = 0.854430060
//
// parameter 1 starts at 2.0 with gradient 0 both steps: only the decay acts (m = v = 0,
// and the update 0 / (0 + eps) is 0): 2 · 0.99² = 1.9602.
TEST(AdamW, MatchesTwoStepsWorkedByHand) {
  AdamWHyperparams h;
  h.lr = 0.1f;
  h.beta1 = 0.9f;
  h.beta2 = 0.99f;
  h.eps = 1e-8f;
  h.weight_decay = 0.1f;
  std::vector<float> param = {1.0f, 2.0f}, m = {0.0f, 0.0f}, v = {0.0f, 0.0f};
  const std::vector<float> grad1 = {0.5f, 0.0f}, grad2 = {-0.25f, 0.0f};
  auto& ops = cpu_model_ops();
  // Relative tolerance 2e-6: the hyperparameters are fp32, and 1 − 0.99f = 0.0099999905
  // is already 1e-6 away from 0.01.
  auto expect_close = [](float got, double want) { EXPECT_NEAR(got, want, 2e-6 * std::abs(want)); };
  ASSERT_TRUE(ops.adamw_step(h, 1, param.data(), grad1.data(), m.data(), v.data(), 2).ok());
  expect_close(param[0], 0.890000002);
  expect_close(m[0], 0.05);
  expect_close(v[0], 0.0025);
  ASSERT_TRUE(ops.adamw_step(h, 2, param.data(), grad2.data(), m.data(), v.data(), 2).ok());
  expect_close(param[0], 0.854430060);
  expect_close(m[0], 0.02);
  expect_close(v[0], 0.0031);
  expect_close(param[1], 1.9602);
  EXPECT_EQ(m[1], 0.0f);
  EXPECT_EQ(v[1], 0.0f);
}

// A buffer split across threads, many steps, against the same formulas in double.
TEST(AdamW, ManyStepsOverALargeBufferMatchDoublePrecision) {
  const size_t n = 70001;
  const AdamWHyperparams h;  // torch defaults
  auto param = uniform(n, 1);
  std::vector<float> m(n, 0.0f), v(n, 0.0f);
  Vec p_ref = to_double(param), m_ref(n, 0.0), v_ref(n, 0.0);
  for (int64_t step = 1; step <= 5; ++step) {
    const auto grad = uniform(n, 100 + static_cast<uint32_t>(step));
    ASSERT_TRUE(cpu_model_ops()
                    .adamw_step(h, step, param.data(), grad.data(), m.data(), v.data(), static_cast<int64_t>(n))
                    .ok());
    const double c1 = 1.0 - std::pow(0.9, static_cast<double>(step)),
                 c2 = 1.0 - std::pow(0.999, static_cast<double>(step));
    for (size_t i = 0; i < n; ++i) {
      p_ref[i] *= 1.0 - 1e-3 * 1e-2;
      m_ref[i] = 0.9 * m_ref[i] + 0.1 * grad[i];
      v_ref[i] = 0.999 * v_ref[i] + 0.001 * grad[i] * grad[i];
      p_ref[i] -= 1e-3 * (m_ref[i] / c1) / (std::sqrt(v_ref[i] / c2) + 1e-8);
    }
  }
  // An update is lr · m̂ / (√v̂ + eps) ≤ ~lr, so 1e-6 absolute is ~1e-3 of a step.
  EXPECT_LT(scaled_max_error(param, p_ref), 1e-6);
}

// param_row_amax: each row's max |param| after the update, for the weight's fp8 casts;
// asking for it changes no state, and a row length that does not divide n is refused
// with nothing updated.
TEST(AdamW, RowAmaxesAreThoseOfTheUpdatedParameter) {
  const int64_t rows = 5, cols = 23, n = rows * cols;
  const size_t un = static_cast<size_t>(n);
  const auto start = uniform(un, 91, -2.0f, 2.0f), grad = uniform(un, 92);
  AdamWHyperparams h;
  h.lr = 0.05f;
  h.weight_decay = 0.1f;
  auto& ops = cpu_model_ops();
  std::vector<float> plain = start, pm(un, 0.0f), pv(un, 0.0f);
  std::vector<float> param = start, m(un, 0.0f), v(un, 0.0f), row_amax = nans(static_cast<size_t>(rows));
  for (int64_t step = 1; step <= 3; ++step) {
    ASSERT_TRUE(ops.adamw_step(h, step, plain.data(), grad.data(), pm.data(), pv.data(), n).ok());
    ASSERT_TRUE(
        ops.adamw_step(h, step, param.data(), grad.data(), m.data(), v.data(), n, {row_amax.data(), cols}).ok());
    EXPECT_EQ(param, plain);
    EXPECT_EQ(m, pm);
    EXPECT_EQ(v, pv);
    for (int64_t r = 0; r < rows; ++r) {
      float want = 0.0f;
      for (int64_t j = 0; j < cols; ++j) want = std::max(want, std::fabs(param[static_cast<size_t>(r * cols + j)]));
      EXPECT_EQ(row_amax[static_cast<size_t>(r)], want) << "step " << step << " row " << r;
    }
  }
  const std::vector<float> before = param;
  const absl::Status s = ops.adamw_step(h, 4, param.data(), grad.data(), m.data(), v.data(), n, {row_amax.data(), 22});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(std::string(s.message()).find("adamw_step: param_row_amax needs a row_length that divides n=115, got 22"),
            std::string::npos)
      << s.message();
  EXPECT_EQ(param, before);
}

// Clipping by a factor the implementation's memory holds (queue_grad_norm's clip_scale):
// the same bits as grad_scale, a NaN factor leaves everything untouched, and grad_scale
// must then be 1.
TEST(AdamW, GradScaleInActsAsGradScaleAndNanSkipsTheUpdate) {
  const int64_t rows = 3, cols = 8, n = rows * cols;
  const size_t un = static_cast<size_t>(n);
  const auto start = uniform(un, 93, -2.0f, 2.0f), grad = uniform(un, 94);
  auto& ops = cpu_model_ops();
  AdamWHyperparams scaled;
  scaled.lr = 0.05f;
  scaled.grad_scale = 0.375f;
  std::vector<float> want = start, wm(un, 0.0f), wv(un, 0.0f);
  ASSERT_TRUE(ops.adamw_step(scaled, 1, want.data(), grad.data(), wm.data(), wv.data(), n).ok());

  AdamWHyperparams from_memory = scaled;
  from_memory.grad_scale = 1.0f;
  const float factor = 0.375f;
  from_memory.grad_scale_in = &factor;
  std::vector<float> param = start, m(un, 0.0f), v(un, 0.0f), row_amax = nans(static_cast<size_t>(rows));
  ASSERT_TRUE(ops.adamw_step(from_memory, 1, param.data(), grad.data(), m.data(), v.data(), n,
                             {row_amax.data(), cols})
                  .ok());
  EXPECT_EQ(param, want);
  EXPECT_EQ(m, wm);
  EXPECT_EQ(v, wv);

  const float skip = NAN;
  from_memory.grad_scale_in = &skip;
  const std::vector<float> before = param, before_m = m, before_v = v, before_amax = row_amax;
  ASSERT_TRUE(ops.adamw_step(from_memory, 2, param.data(), grad.data(), m.data(), v.data(), n,
                             {row_amax.data(), cols})
                  .ok());
  EXPECT_EQ(param, before);
  EXPECT_EQ(m, before_m);
  EXPECT_EQ(v, before_v);
  EXPECT_EQ(row_amax, before_amax);

  from_memory.grad_scale = 0.5f;  // both: which one?
  const absl::Status s = ops.adamw_step(from_memory, 2, param.data(), grad.data(), m.data(), v.data(), n);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(std::string(s.message()).find("grad_scale must be 1 with grad_scale_in"), std::string::npos) << s;
}

}  // namespace
}  // namespace fp8::ops_test
