// SwiGLU: silu(gate) * up, and its backward.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "fp8/arith.h"
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

// row_amax: max |out| of each row as stored (bf16-rounded for bf16 output); asking for it
// changes nothing else, and a row length that does not divide n is refused untouched.
TEST(SwiGlu, RowAmaxesAreEachOutputRowsLargestMagnitudeAsStored) {
  const int64_t rows = 11, cols = 45, n = rows * cols;
  const auto gate = uniform(static_cast<size_t>(n), 3, -8.0f, 8.0f), up = uniform(static_cast<size_t>(n), 4);
  std::vector<uint16_t> gate16(gate.size()), up16(up.size());
  for (size_t i = 0; i < gate.size(); ++i) {
    gate16[i] = float_to_bf16(gate[i]);
    up16[i] = float_to_bf16(up[i]);
  }
  auto& ops = cpu_model_ops();
  for (const DType act : {DType::kFloat32, DType::kBFloat16}) {
    SCOPED_TRACE(dtype_name(act));
    const bool bf16 = act == DType::kBFloat16;
    const void* g = bf16 ? static_cast<const void*>(gate16.data()) : gate.data();
    const void* u = bf16 ? static_cast<const void*>(up16.data()) : up.data();
    std::vector<float> out(gate.size()), plain(gate.size()), row_amax = nans(static_cast<size_t>(rows));
    ASSERT_TRUE(ops.swiglu_forward(g, u, n, plain.data(), act).ok());
    ASSERT_TRUE(ops.swiglu_forward(g, u, n, out.data(), act, RowAmaxes{row_amax.data(), cols}).ok());
    EXPECT_EQ(std::memcmp(out.data(), plain.data(), static_cast<size_t>(n) * dtype_size(act)), 0) << "out changed";
    const auto* out16 = reinterpret_cast<const uint16_t*>(out.data());
    for (int64_t r = 0; r < rows; ++r) {
      float want = 0.0f;
      for (int64_t j = 0; j < cols; ++j) {
        const size_t i = static_cast<size_t>(r * cols + j);
        want = std::max(want, std::fabs(bf16 ? bf16_to_float(out16[i]) : out[i]));
      }
      EXPECT_EQ(row_amax[static_cast<size_t>(r)], want) << "row " << r;
    }
  }
  std::vector<float> untouched = nans(static_cast<size_t>(n)), amax(static_cast<size_t>(rows), -1.0f);
  for (const int64_t bad : {int64_t{0}, int64_t{-45}, int64_t{44}}) {
    const absl::Status s =
        ops.swiglu_forward(gate.data(), up.data(), n, untouched.data(), DType::kFloat32, RowAmaxes{amax.data(), bad});
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(std::string(s.message()).find("swiglu_forward: row_amax needs a row_length that divides n=495"),
              std::string::npos)
        << s.message();
  }
  EXPECT_TRUE(std::all_of(untouched.begin(), untouched.end(), [](float v) { return std::isnan(v); }));
  EXPECT_TRUE(std::all_of(amax.begin(), amax.end(), [](float v) { return v == -1.0f; }));
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
