// The by-rows model kernels (kernels/cuda/ops/row_kernels_device.cuh: SwiGLU and its
// backward, AdamW and RoPE, each also writing its rows' amaxes, and a bare row amax) run on
// the CPU under the emulation of CUDA threads and warp collectives (emulation/), against the CPU's
// per-element functions applied element by element: every value bit for bit, and each
// row's amax of the values as stored. Both access paths (16-byte groups, and element by
// element for ragged rows), rows longer than a block's threads cover in one sweep, and
// fewer blocks than rows. The same kernels on a GPU: fp8_cuda_model_ops_test.
#include "tests/ops/emulation/cuda_emulation.h"
// The kernels, after the emulation.
#include "cuda/ops/row_kernels_device.cuh"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <type_traits>
#include <vector>

#include "fp8/arith.h"
#include "gtest/gtest.h"
#include "ops/model_arith.h"
#include "tests/ops/emulated_kernel_checks.h"

namespace fp8::cuda::row_kernels {
namespace {

using model::bf16_bits;
using namespace emulation_test;

struct Shape {
  int64_t rows, cols;
};

// Ragged (element-by-element path) and whole 16-byte groups, one row past 256 groups.
constexpr Shape kShapes[] = {{3, 37}, {4, 72}, {2, 2056}, {2, 2051}};
constexpr unsigned kBlocks = 2;  // fewer than the rows: blocks loop

std::vector<float> values(size_t n, uint32_t seed, float scale = 2.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

template <typename T>
void check_swiglu(Shape s) {
  SCOPED_TRACE(::testing::Message() << (std::is_same_v<T, float> ? "fp32 " : "bf16 ") << s.rows << "x" << s.cols);
  const size_t n = static_cast<size_t>(s.rows * s.cols);
  const auto gate = stored<T>(values(n, 1)), up = stored<T>(values(n, 2)), grad = stored<T>(values(n, 3));

  // Forward.
  std::vector<T> out(n), want(n);
  std::vector<float> amax(static_cast<size_t>(s.rows), -1.0f);
  for (size_t i = 0; i < n; ++i) want[i] = as_stored<T>(ops::swiglu(widened(gate[i]), widened(up[i])));
  on_the_launchers_path<T>(s.cols, [&](auto vec) {
    emulation::launch(kBlocks, kThreads, 0, swiglu_rows_kernel<T, decltype(vec)::value>, gate.data(), up.data(), s.rows,
                      s.cols, out.data(), amax.data());
  });
  expect_bits_equal(out, want, "swiglu");
  expect_bits_equal(amax, row_amaxes(want, s.rows, s.cols), "swiglu row amaxes");

  // Backward, both amaxes, then in place (grad_up over grad_out) with only grad_gate's.
  std::vector<T> grad_gate(n), grad_up(n), want_gate(n), want_up(n);
  for (size_t i = 0; i < n; ++i) {
    float dg, du;
    ops::swiglu_grad(widened(gate[i]), widened(up[i]), widened(grad[i]), &dg, &du);
    want_gate[i] = as_stored<T>(dg);
    want_up[i] = as_stored<T>(du);
  }
  std::vector<float> gate_amax(static_cast<size_t>(s.rows), -1.0f), up_amax(gate_amax);
  on_the_launchers_path<T>(s.cols, [&](auto vec) {
    emulation::launch(kBlocks, kThreads, 0, swiglu_backward_rows_kernel<T, decltype(vec)::value>, gate.data(),
                      up.data(), grad.data(), s.rows, s.cols, grad_gate.data(), grad_up.data(), gate_amax.data(),
                      up_amax.data());
  });
  expect_bits_equal(grad_gate, want_gate, "grad_gate");
  expect_bits_equal(grad_up, want_up, "grad_up");
  expect_bits_equal(gate_amax, row_amaxes(want_gate, s.rows, s.cols), "grad_gate row amaxes");
  expect_bits_equal(up_amax, row_amaxes(want_up, s.rows, s.cols), "grad_up row amaxes");

  std::vector<T> in_place = grad;
  std::fill(grad_gate.begin(), grad_gate.end(), T{});
  std::fill(gate_amax.begin(), gate_amax.end(), -1.0f);
  on_the_launchers_path<T>(s.cols, [&](auto vec) {
    emulation::launch(kBlocks, kThreads, 0, swiglu_backward_rows_kernel<T, decltype(vec)::value>, gate.data(),
                      up.data(), in_place.data(), s.rows, s.cols, grad_gate.data(), in_place.data(), gate_amax.data(),
                      static_cast<float*>(nullptr));
  });
  expect_bits_equal(grad_gate, want_gate, "grad_gate, in place");
  expect_bits_equal(in_place, want_up, "grad_up over grad_out");
  expect_bits_equal(gate_amax, row_amaxes(want_gate, s.rows, s.cols), "grad_gate row amaxes, in place");
}

TEST(RowKernelsEmulation, SwigluAndItsBackwardMatchTheCpuWithTheirRowAmaxes) {
  for (Shape s : kShapes) {
    check_swiglu<float>(s);
    check_swiglu<bf16_bits>(s);
  }
}

// The bare row amax (the SIMT attention's): each row's amax of x as stored, on both paths.
template <typename T>
void check_row_amax(Shape s) {
  SCOPED_TRACE(::testing::Message() << (std::is_same_v<T, float> ? "fp32 " : "bf16 ") << s.rows << "x" << s.cols);
  const auto x = stored<T>(values(static_cast<size_t>(s.rows * s.cols), 4));
  std::vector<float> amax(static_cast<size_t>(s.rows), -1.0f);
  on_the_launchers_path<T>(s.cols, [&](auto vec) {
    emulation::launch(kBlocks, kThreads, 0, row_amax_kernel<T, decltype(vec)::value>, x.data(), s.rows, s.cols,
                      amax.data());
  });
  expect_bits_equal(amax, row_amaxes(x, s.rows, s.cols), "row amaxes");
}

TEST(RowKernelsEmulation, RowAmaxIsEachRowsAmaxAsStored) {
  for (Shape s : kShapes) {
    check_row_amax<float>(s);
    check_row_amax<bf16_bits>(s);
  }
}

// The gradients' factor comes from c.grad_scale, or from device memory (scale_in: the grad
// norm's clip_scale), where NaN leaves everything as it was.
TEST(RowKernelsEmulation, AdamwMatchesTheCpuWithTheUpdatedRowAmaxes) {
  ops::AdamWCoefficients c;
  c.decay = 1.0f - 1e-3f * 0.1f;
  c.beta1 = 0.9f;
  c.beta2 = 0.95f;
  c.step_size = 1e-3f / (1.0f - 0.9f * 0.9f);
  c.sqrt_correction2 = std::sqrt(1.0f - 0.95f * 0.95f);
  c.eps = 1e-8f;
  c.grad_scale = 0.5f;
  const float half = 0.5f, not_finite = NAN;
  struct Variant {
    const char* name;
    float c_scale;
    const float* scale_in;
  };
  for (const Variant& variant : {Variant{"grad_scale", 0.5f, nullptr}, Variant{"scale_in", 1.0f, &half},
                                 Variant{"scale_in NaN", 1.0f, &not_finite}}) {
    for (Shape s : kShapes) {
      SCOPED_TRACE(::testing::Message() << variant.name << " " << s.rows << "x" << s.cols);
      const bool skips = variant.scale_in == &not_finite;
      const size_t n = static_cast<size_t>(s.rows * s.cols);
      std::vector<float> param = values(n, 4), grad = values(n, 5), m = values(n, 6, 0.1f), v = values(n, 7, 0.1f);
      for (float& x : v) x = x * x;
      std::vector<float> want_param = param, want_m = m, want_v = v;
      if (!skips) {
        for (size_t i = 0; i < n; ++i) ops::adamw_update(c, grad[i], &want_param[i], &want_m[i], &want_v[i]);
      }
      std::vector<float> amax(static_cast<size_t>(s.rows), -1.0f);
      ops::AdamWCoefficients k = c;
      k.grad_scale = variant.c_scale;
      on_the_launchers_path<float>(s.cols, [&](auto vec) {
        emulation::launch(kBlocks, kThreads, 0, adamw_rows_kernel<decltype(vec)::value>, k, variant.scale_in,
                          param.data(), grad.data(), m.data(), v.data(), s.rows, s.cols, amax.data());
      });
      expect_bits_equal(param, want_param, "param");
      expect_bits_equal(m, want_m, "m");
      expect_bits_equal(v, want_v, "v");
      expect_bits_equal(amax, skips ? std::vector<float>(amax.size(), -1.0f) : row_amaxes(want_param, s.rows, s.cols),
                        "param row amaxes");
    }
  }
}

// Rows of heads · head_dim (head_dim 4 puts two heads in one bf16 group, 6 makes groups
// straddle heads, 64 is llama's), forward and inverse, in place, by both kernels.
template <typename T>
void check_rope(int64_t batch, int64_t seq, int64_t heads, int64_t head_dim, float sin_sign) {
  SCOPED_TRACE(::testing::Message() << (std::is_same_v<T, float> ? "fp32 " : "bf16 ") << batch << "x" << seq << "x"
                                    << heads << "x" << head_dim << (sin_sign < 0 ? " inverse" : ""));
  const Shape s{batch * seq, heads * head_dim};
  const int64_t pairs = head_dim / 2;
  std::vector<float> cos_table(static_cast<size_t>(seq * pairs)), sin_table(cos_table.size());
  for (int64_t p = 0; p < seq; ++p) {
    for (int64_t i = 0; i < pairs; ++i) {
      const double angle = static_cast<double>(p) * std::pow(10000.0, -2.0 * static_cast<double>(i) / head_dim);
      cos_table[static_cast<size_t>(p * pairs + i)] = static_cast<float>(std::cos(angle));
      sin_table[static_cast<size_t>(p * pairs + i)] = static_cast<float>(std::sin(angle));
    }
  }
  const size_t n = static_cast<size_t>(s.rows * s.cols);
  std::vector<T> x = stored<T>(values(n, 8)), want(n);
  for (int64_t r = 0; r < s.rows; ++r) {
    for (int64_t c = 0; c < s.cols; c += 2) {
      const size_t i = static_cast<size_t>(r * s.cols + c);
      const size_t t = static_cast<size_t>(r % seq * pairs + c % head_dim / 2);
      float y0, y1;
      ops::rotate_pair(widened(x[i]), widened(x[i + 1]), cos_table[t], sin_sign * sin_table[t], &y0, &y1);
      want[i] = as_stored<T>(y0);
      want[i + 1] = as_stored<T>(y1);
    }
  }
  // By rows, with the amaxes.
  std::vector<T> y = x;
  std::vector<float> amax(static_cast<size_t>(s.rows), -1.0f);
  on_the_launchers_path<T>(s.cols, [&](auto vec) {
    emulation::launch(kBlocks, kThreads, 0, rope_rows_kernel<T, decltype(vec)::value>, s.rows, seq, s.cols, head_dim,
                      cos_table.data(), sin_table.data(), sin_sign, y.data(), y.data(), amax.data());
  });
  expect_bits_equal(y, want, "rotated by rows");
  expect_bits_equal(amax, row_amaxes(want, s.rows, s.cols), "row amaxes");

  // Swept over items without them (row_sweep's grid and blocks: several rows a block when
  // a row has fewer items than a block threads), the launcher's choice of item.
  y = x;
  on_the_launchers_path<T>(head_dim, [&](auto vec) {
    constexpr bool kVec = decltype(vec)::value;
    const int64_t items = s.cols / (kVec ? model::kPer16Bytes<T> : 2);
    const model::RowSweep sweep = model::row_sweep(s.rows, items);
    ASSERT_TRUE(sweep.ok);
    emulation::launch_blocks(sweep.grid, sweep.block, 0, rope_kernel<T, kVec>, s.rows, seq, s.cols, pairs,
                             cos_table.data(), sin_table.data(), sin_sign, y.data(), y.data());
  });
  expect_bits_equal(y, want, "rotated by items");
}

TEST(RowKernelsEmulation, RopeMatchesTheCpuWithItsRowAmaxes) {
  for (float sin_sign : {1.0f, -1.0f}) {
    check_rope<float>(2, 3, 2, 64, sin_sign);
    check_rope<bf16_bits>(2, 3, 2, 64, sin_sign);
    check_rope<bf16_bits>(1, 3, 3, 6, sin_sign);   // 18 a row: ragged, groups straddle heads
    check_rope<bf16_bits>(1, 3, 4, 4, sin_sign);   // 16 a row: two heads a group
    check_rope<float>(1, 3, 3, 6, sin_sign);
    check_rope<bf16_bits>(1, 2, 33, 64, sin_sign);  // 2112 a row: past one sweep of the block
  }
}

}  // namespace
}  // namespace fp8::cuda::row_kernels
