// SwiGLU: silu(gate) * up, and its backward.
#include <cmath>

#include <gtest/gtest.h>

#include "fp8/model_ops.h"
#include "tests/ops/gradient_check.h"
#include "tests/ops/reference_ops.h"

namespace fp8::ops_test {
namespace {

TEST(SwiGlu, ForwardMatchesReference) {
  const size_t n = 100003;  // several chunks
  const auto gate = uniform(n, 1, -6.0f, 6.0f), up = uniform(n, 2);
  auto out = nans(n);
  ASSERT_TRUE(cpu_model_ops().swiglu_forward(gate.data(), up.data(), static_cast<int64_t>(n), out.data()).ok());
  EXPECT_LT(scaled_max_error(out, ref::swiglu(to_double(gate), to_double(up))), 1e-6);
}

TEST(SwiGlu, BackwardMatchesFiniteDifferences) {
  const size_t n = 60;
  const auto gate = uniform(n, 3, -5.0f, 5.0f), up = uniform(n, 4), w = uniform(n, 5);
  auto grad_gate = nans(n), grad_up = nans(n);
  ASSERT_TRUE(
      cpu_model_ops()
          .swiglu_backward(gate.data(), up.data(), w.data(), static_cast<int64_t>(n), grad_gate.data(), grad_up.data())
          .ok());
  const Vec gd = to_double(gate), ud = to_double(up);
  expect_gradient_near(
      grad_gate, numeric_gradient([&](const Vec& g) { return weighted_sum(ref::swiglu(g, ud), w); }, gd), "grad_gate");
  expect_gradient_near(grad_up, numeric_gradient([&](const Vec& u) { return weighted_sum(ref::swiglu(gd, u), w); }, ud),
                       "grad_up");
}

// exp(-gate) overflows for very negative gates: the limits (0 and gate·up) come out,
// never NaN.
TEST(SwiGlu, SaturatesCleanlyAtExtremeGates) {
  const std::vector<float> gate = {-1e4f, -100.0f, 100.0f, 1e4f}, up = {2.0f, 2.0f, 2.0f, 2.0f},
                           grad_out = {1.0f, 1.0f, 1.0f, 1.0f};
  std::vector<float> out(4), grad_gate(4), grad_up(4);
  ASSERT_TRUE(cpu_model_ops().swiglu_forward(gate.data(), up.data(), 4, out.data()).ok());
  ASSERT_TRUE(cpu_model_ops()
                  .swiglu_backward(gate.data(), up.data(), grad_out.data(), 4, grad_gate.data(), grad_up.data())
                  .ok());
  const std::vector<float> want_out = {0.0f, 0.0f, 200.0f, 2e4f}, want_grad_gate = {0.0f, 0.0f, 2.0f, 2.0f},
                           want_grad_up = {0.0f, 0.0f, 100.0f, 1e4f};
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(out[i], want_out[i], 1e-3f) << i;
    EXPECT_NEAR(grad_gate[i], want_grad_gate[i], 1e-3f) << i;
    EXPECT_NEAR(grad_up[i], want_grad_up[i], 1e-3f) << i;
  }
}

}  // namespace
}  // namespace fp8::ops_test
