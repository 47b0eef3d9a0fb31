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
    EXPECT_EQ(row_amax, stored_row_amaxes(out.data(), act, rows, cols));
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

// The backward's row amaxes: max |grad_gate| and max |grad_up| of each row as stored,
// either alone or both; asking changes no gradient, and a bad row length is refused with
// nothing written.
TEST(SwiGlu, BackwardRowAmaxesAreEachGradientRowsLargestMagnitudeAsStored) {
  const int64_t rows = 7, cols = 37, n = rows * cols;
  const size_t un = static_cast<size_t>(n), urows = static_cast<size_t>(rows);
  const auto gate = uniform(un, 6, -8.0f, 8.0f), up = uniform(un, 7), grad_out = uniform(un, 8, -3.0f, 3.0f);
  std::vector<uint16_t> gate16(un), up16(un), grad_out16(un);
  for (size_t i = 0; i < un; ++i) {
    gate16[i] = float_to_bf16(gate[i]);
    up16[i] = float_to_bf16(up[i]);
    grad_out16[i] = float_to_bf16(grad_out[i]);
  }
  auto& ops = cpu_model_ops();
  // The rows' amaxes of an output as stored, fp32 or bf16.
  auto amaxes_of = [&](const std::vector<float>& stored, bool bf16) {
    const auto* stored16 = reinterpret_cast<const uint16_t*>(stored.data());
    std::vector<float> want(urows, 0.0f);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < cols; ++j) {
        const size_t i = static_cast<size_t>(r * cols + j);
        want[static_cast<size_t>(r)] =
            std::max(want[static_cast<size_t>(r)], std::fabs(bf16 ? bf16_to_float(stored16[i]) : stored[i]));
      }
    }
    return want;
  };
  for (const DType act : {DType::kFloat32, DType::kBFloat16}) {
    SCOPED_TRACE(dtype_name(act));
    const bool bf16 = act == DType::kBFloat16;
    const void* g = bf16 ? static_cast<const void*>(gate16.data()) : gate.data();
    const void* u = bf16 ? static_cast<const void*>(up16.data()) : up.data();
    const void* d = bf16 ? static_cast<const void*>(grad_out16.data()) : grad_out.data();
    std::vector<float> plain_gate(un), plain_up(un);
    ASSERT_TRUE(ops.swiglu_backward(g, u, d, n, plain_gate.data(), plain_up.data(), act).ok());
    const size_t bytes = un * dtype_size(act);
    for (const bool want_gate : {true, false}) {
      for (const bool want_up : {true, false}) {
        SCOPED_TRACE(::testing::Message() << "gate " << want_gate << " up " << want_up);
        std::vector<float> grad_gate(un), grad_up(un), gate_amax = nans(urows), up_amax = nans(urows);
        const RowAmaxes gate_rows{want_gate ? gate_amax.data() : nullptr, cols};
        const RowAmaxes up_rows{want_up ? up_amax.data() : nullptr, cols};
        ASSERT_TRUE(ops.swiglu_backward(g, u, d, n, grad_gate.data(), grad_up.data(), act, gate_rows, up_rows).ok());
        EXPECT_EQ(std::memcmp(grad_gate.data(), plain_gate.data(), bytes), 0) << "grad_gate changed";
        EXPECT_EQ(std::memcmp(grad_up.data(), plain_up.data(), bytes), 0) << "grad_up changed";
        if (want_gate) {
          EXPECT_EQ(gate_amax, amaxes_of(grad_gate, bf16));
        }
        if (want_up) {
          EXPECT_EQ(up_amax, amaxes_of(grad_up, bf16));
        }
      }
    }
  }
  std::vector<float> untouched = nans(un), untouched_up = nans(un), amax(urows, -1.0f), other(urows, -1.0f);
  struct Bad {
    RowAmaxes gate, up;
    const char* message;
  };
  const Bad bad[] = {
      {{amax.data(), 36}, {}, "swiglu_backward: grad_gate_row_amax needs a row_length that divides n=259, got 36"},
      {{}, {other.data(), 0}, "swiglu_backward: grad_up_row_amax needs a row_length that divides n=259, got 0"},
      {{amax.data(), 37}, {other.data(), 259},
       "swiglu_backward: grad_gate_row_amax and grad_up_row_amax need the same row_length, got 37 and 259"},
  };
  for (const Bad& b : bad) {
    const absl::Status s = ops.swiglu_backward(gate.data(), up.data(), grad_out.data(), n, untouched.data(),
                                               untouched_up.data(), DType::kFloat32, b.gate, b.up);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(std::string(s.message()).find(b.message), std::string::npos) << s.message();
  }
  for (const auto* v : {&untouched, &untouched_up}) {
    EXPECT_TRUE(std::all_of(v->begin(), v->end(), [](float x) { return std::isnan(x); }));
  }
  for (const auto* v : {&amax, &other}) {
    EXPECT_TRUE(std::all_of(v->begin(), v->end(), [](float x) { return x == -1.0f; }));
  }
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
