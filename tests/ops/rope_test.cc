// Rotary position embedding: the Llama pairing and frequencies, norm preservation, the
// backward as the inverse rotation, in-place use, and bad shapes.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "fp8/arith.h"
#include "fp8/model_ops.h"
#include "tests/ops/gradient_check.h"
#include "tests/ops/reference_ops.h"

namespace fp8::ops_test {
namespace {

size_t elements(const RopeShape& s) { return static_cast<size_t>(s.batch * s.seq * s.heads * s.head_dim); }

// head_dim 4, theta 100: pair 0 turns by pos rad, pair 1 by pos · 100^(-2/4) = pos / 10.
TEST(Rope, RotatesAdjacentPairsByPositionTimesFrequency) {
  const RopeShape s{1, 4, 1, 4};
  std::vector<float> x;
  for (int pos = 0; pos < 4; ++pos) x.insert(x.end(), {1.0f, 0.0f, 0.0f, 1.0f});
  std::vector<float> y(x.size());
  ASSERT_TRUE(cpu_model_ops().rope_forward(s, 100.0, x.data(), y.data()).ok());
  for (int pos = 0; pos < 4; ++pos) {
    const float* v = y.data() + pos * 4;
    EXPECT_NEAR(v[0], std::cos(pos), 1e-6) << pos;
    EXPECT_NEAR(v[1], std::sin(pos), 1e-6) << pos;
    EXPECT_NEAR(v[2], -std::sin(pos / 10.0), 1e-6) << pos;
    EXPECT_NEAR(v[3], std::cos(pos / 10.0), 1e-6) << pos;
  }
  for (int j = 0; j < 4; ++j) EXPECT_EQ(y[j], x[j]) << "position 0 is not rotated";
}

TEST(Rope, MatchesReferenceForLlamaThetas) {
  const RopeShape s{2, 37, 3, 16};
  const auto x = uniform(elements(s), 1);
  for (double theta : {10000.0, 500000.0}) {
    std::vector<float> y(x.size());
    ASSERT_TRUE(cpu_model_ops().rope_forward(s, theta, x.data(), y.data()).ok());
    EXPECT_LT(scaled_max_error(y, ref::rope(to_double(x), s, theta)), 1e-6) << theta;
  }
}

// A generation step rotates its tokens at their positions: a call starting at `start` is,
// bit for bit, those rows of one call over the whole sequence, forward and backward, and
// whatever tables earlier calls left behind.
TEST(Rope, ARunStartingAtAPositionIsThoseRowsOfTheWholeSequence) {
  const RopeShape whole{1, 40, 3, 16};
  const int64_t row = whole.heads * whole.head_dim;
  const auto x = uniform(elements(whole), 7);
  for (const bool forward : {true, false}) {
    std::vector<float> want(x.size());
    ASSERT_TRUE((forward ? cpu_model_ops().rope_forward(whole, 500000.0, x.data(), want.data())
                         : cpu_model_ops().rope_backward(whole, 500000.0, x.data(), want.data()))
                    .ok());
    for (const auto& [start, seq] : {std::pair<int64_t, int64_t>{1, 1}, {17, 1}, {5, 7}, {33, 7}, {39, 1}}) {
      SCOPED_TRACE(testing::Message() << (forward ? "forward" : "backward") << " start " << start << " seq " << seq);
      const RopeShape part{1, seq, whole.heads, whole.head_dim, start};
      std::vector<float> got(static_cast<size_t>(seq * row));
      const float* in = x.data() + start * row;
      ASSERT_TRUE((forward ? cpu_model_ops().rope_forward(part, 500000.0, in, got.data())
                           : cpu_model_ops().rope_backward(part, 500000.0, in, got.data()))
                      .ok());
      EXPECT_EQ(0, std::memcmp(got.data(), want.data() + start * row, got.size() * sizeof(float)));
    }
  }
}

TEST(Rope, PreservesEveryPairsNorm) {
  const RopeShape s{1, 300, 2, 8};
  const auto x = uniform(elements(s), 2);
  std::vector<float> y(x.size());
  ASSERT_TRUE(cpu_model_ops().rope_forward(s, 500000.0, x.data(), y.data()).ok());
  for (size_t i = 0; i < x.size(); i += 2) {
    const double before = std::hypot(x[i], x[i + 1]);
    const double after = std::hypot(y[i], y[i + 1]);
    EXPECT_NEAR(after, before, 1e-6 * (1.0 + before)) << i;
  }
}

TEST(Rope, BackwardUndoesForward) {
  const RopeShape s{2, 50, 4, 32};
  const auto x = uniform(elements(s), 3);
  std::vector<float> y(x.size()), back(x.size());
  ASSERT_TRUE(cpu_model_ops().rope_forward(s, 10000.0, x.data(), y.data()).ok());
  ASSERT_TRUE(cpu_model_ops().rope_backward(s, 10000.0, y.data(), back.data()).ok());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(back[i], x[i], 1e-6) << i;
}

TEST(Rope, InPlaceEqualsOutOfPlace) {
  const RopeShape s{2, 9, 3, 6};
  const auto x = uniform(elements(s), 4);
  std::vector<float> out(x.size()), in_place(x);
  ASSERT_TRUE(cpu_model_ops().rope_forward(s, 10000.0, x.data(), out.data()).ok());
  ASSERT_TRUE(cpu_model_ops().rope_forward(s, 10000.0, in_place.data(), in_place.data()).ok());
  EXPECT_EQ(in_place, out);
  ASSERT_TRUE(cpu_model_ops().rope_backward(s, 10000.0, in_place.data(), in_place.data()).ok());
  ASSERT_TRUE(cpu_model_ops().rope_backward(s, 10000.0, out.data(), out.data()).ok());
  EXPECT_EQ(in_place, out);
}

// grad_x_row_amax: max |grad_x[r, :]| of each row [heads · head_dim] as stored (bf16-rounded
// for bf16), in place or not; asking for it changes nothing else. head_dim 6 makes groups
// of four elements straddle heads in the CUDA kernel that must match this.
TEST(Rope, BackwardRowAmaxIsEachGradientRowsLargestMagnitudeAsStored) {
  for (const RopeShape& s : {RopeShape{2, 9, 3, 6}, RopeShape{1, 5, 4, 16}, RopeShape{1, 3, 1, 2}}) {
    const auto g = uniform(elements(s), 7, -3.0f, 3.0f);
    std::vector<uint16_t> g16(g.size());
    for (size_t i = 0; i < g.size(); ++i) g16[i] = float_to_bf16(g[i]);
    const int64_t rows = s.batch * s.seq, cols = s.heads * s.head_dim;
    for (const DType act : {DType::kFloat32, DType::kBFloat16}) {
      for (const bool in_place : {false, true}) {
        SCOPED_TRACE(::testing::Message() << dtype_name(act) << " in_place=" << in_place << " head_dim "
                                          << s.head_dim);
        const bool bf16 = act == DType::kBFloat16;
        std::vector<float> plain(g.size()), out(g);  // fp32 buffers big enough for either type
        if (bf16) std::memcpy(out.data(), g16.data(), g16.size() * sizeof(uint16_t));
        const void* in = in_place ? out.data() : bf16 ? static_cast<const void*>(g16.data()) : g.data();
        std::vector<float> row_amax = nans(static_cast<size_t>(rows));
        ASSERT_TRUE(cpu_model_ops()
                        .rope_backward(s, 10000.0, bf16 ? static_cast<const void*>(g16.data()) : g.data(),
                                       plain.data(), act)
                        .ok());
        ASSERT_TRUE(cpu_model_ops().rope_backward(s, 10000.0, in, out.data(), act, row_amax.data()).ok());
        const size_t bytes = g.size() * dtype_size(act);
        EXPECT_EQ(std::memcmp(out.data(), plain.data(), bytes), 0) << "grad_x changed";
        EXPECT_EQ(row_amax, stored_row_amaxes(out.data(), act, rows, cols));
      }
    }
  }
}

TEST(Rope, BackwardMatchesFiniteDifferences) {
  const RopeShape s{2, 5, 2, 6};
  const double theta = 10000.0;
  const auto x = uniform(elements(s), 5);
  const auto w = uniform(x.size(), 6);
  auto grad_x = nans(x.size());
  ASSERT_TRUE(cpu_model_ops().rope_backward(s, theta, w.data(), grad_x.data()).ok());
  const Vec numeric =
      numeric_gradient([&](const Vec& xd) { return weighted_sum(ref::rope(xd, s, theta), w); }, to_double(x));
  expect_gradient_near(grad_x, numeric, "grad_x");
}

}  // namespace
}  // namespace fp8::ops_test
