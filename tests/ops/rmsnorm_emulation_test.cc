// The CUDA RMSNorm kernels (kernels/cuda/ops/rmsnorm_device.cuh) run on the CPU under the
// emulation of CUDA threads and warp collectives (emulation/), bit for bit against a host
// model of the same arithmetic: the row sums in double in the kernels' order (each thread
// its groups of 16 bytes in turn, the warps' shuffle trees, the warp totals in order), then
// every value per element as the CPU's rmsnorm computes it. Forward with its row amaxes;
// backward overwriting and accumulating grad_x with its row amaxes, and the per-chunk
// grad_weight partials, in shared memory and in global memory; fp32 and bf16; ragged rows
// (element by element) and whole 16-byte groups; rows past one sweep of the block; fewer
// blocks than rows. The same kernels on a GPU, against the CPU: fp8_cuda_model_ops_test.
#include "tests/ops/emulation/cuda_emulation.h"
// The kernels, after the emulation.
#include "cuda/ops/rmsnorm_device.cuh"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <type_traits>
#include <vector>

#include "fp8/arith.h"
#include "gtest/gtest.h"
#include "tests/ops/emulated_kernel_checks.h"

namespace fp8::cuda::rmsnorm_device {
namespace {

using model::bf16_bits;
using namespace emulation_test;

struct Shape {
  int64_t rows, dim;
};

// Ragged (element by element) and whole groups; rows past 256 groups.
constexpr Shape kShapes[] = {{3, 37}, {4, 72}, {3, 2056}, {2, 2051}};
constexpr unsigned kBlocks = 2;  // the forward's grid, fewer blocks than rows: they loop

std::vector<float> values(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// Σ term(j) over j < dim as the kernels add it: thread t sums the elements of its groups
// (g = t, t + kThreads, ...; kG elements each, in order), each warp folds its 32 sums with
// __shfl_down_sync at offsets 16, 8, 4, 2, 1 (lane 0's result), and the warp totals are
// added in warp order.
template <int kG, typename Term>
double block_order_sum(int64_t dim, Term term) {
  std::vector<double> thread_sum(kThreads, 0.0);
  const int64_t groups = (dim + kG - 1) / kG;
  for (int64_t g = 0; g < groups; ++g) {
    for (int k = 0; k < kG; ++k) {
      const int64_t j = kG * g + k;
      thread_sum[static_cast<size_t>(g % kThreads)] += j < dim ? term(j) : 0.0;
    }
  }
  double total = 0.0;
  for (int w = 0; w < kThreads / 32; ++w) {
    std::vector<double> lane(thread_sum.begin() + 32 * w, thread_sum.begin() + 32 * w + 32);
    for (int offset = 16; offset > 0; offset /= 2) {
      std::vector<double> next = lane;
      for (int l = 0; l < 32; ++l) {
        const int source = l + offset < 32 ? l + offset : l;  // past the warp: the lane's own value
        next[static_cast<size_t>(l)] += lane[static_cast<size_t>(source)];
      }
      lane = next;
    }
    total = w == 0 ? lane[0] : total + lane[0];
  }
  return total;
}

template <typename T>
void check(Shape s) {
  SCOPED_TRACE(::testing::Message() << (std::is_same_v<T, float> ? "fp32 " : "bf16 ") << s.rows << "x" << s.dim);
  constexpr int kG = model::kPer16Bytes<T>;
  const size_t n = static_cast<size_t>(s.rows * s.dim);
  const auto x = stored<T>(values(n, 1, -2.0f, 2.0f)), grad_out = stored<T>(values(n, 2, -1.0f, 1.0f));
  const auto weight = values(static_cast<size_t>(s.dim), 3, 0.5f, 1.5f);
  const float eps = 1e-5f;
  auto at = [&](const std::vector<T>& v, int64_t r, int64_t j) {
    return widened(v[static_cast<size_t>(r * s.dim + j)]);
  };

  // Forward.
  std::vector<float> want_inv(static_cast<size_t>(s.rows));
  std::vector<T> want_out(n);
  for (int64_t r = 0; r < s.rows; ++r) {
    const double sum = block_order_sum<kG>(s.dim, [&](int64_t j) {
      const double v = at(x, r, j);
      return v * v;
    });
    const float inv = static_cast<float>(1.0 / std::sqrt(sum / static_cast<double>(s.dim) + static_cast<double>(eps)));
    want_inv[static_cast<size_t>(r)] = inv;
    for (int64_t j = 0; j < s.dim; ++j) {
      want_out[static_cast<size_t>(r * s.dim + j)] = as_stored<T>(at(x, r, j) * inv * weight[static_cast<size_t>(j)]);
    }
  }
  std::vector<T> out(n);
  std::vector<float> inv(static_cast<size_t>(s.rows), -1.0f), out_amax(inv);
  on_the_launchers_path<T>(s.dim, [&](auto vec) {
    emulation::launch(kBlocks, kThreads, 0, rmsnorm_forward_kernel<T, decltype(vec)::value>, x.data(), weight.data(),
                      s.rows, s.dim, eps, out.data(), inv.data(), out_amax.data());
  });
  expect_bits_equal(inv, want_inv, "inv_rms");
  expect_bits_equal(out, want_out, "out");
  expect_bits_equal(out_amax, row_amaxes(want_out, s.rows, s.dim), "out row amaxes");

  // Backward: chunks of 2 rows (a last chunk of 1 where rows are odd), each block its
  // chunk's grad_weight partial, in shared memory or in `partial` itself.
  const int64_t rows_per_chunk = 2, chunks = (s.rows + 1) / 2;
  const auto held = stored<T>(values(n, 4, -1.0f, 1.0f));  // grad_x's earlier contents, to accumulate onto
  for (bool accumulate : {false, true}) {
    std::vector<T> want_dx(n);
    std::vector<float> want_partial(static_cast<size_t>(chunks * s.dim), 0.0f);
    for (int64_t r = 0; r < s.rows; ++r) {
      const float inv_r = want_inv[static_cast<size_t>(r)];
      const double gwx = block_order_sum<kG>(s.dim, [&](int64_t j) {
        const float go_w = at(grad_out, r, j) * weight[static_cast<size_t>(j)];
        return static_cast<double>(go_w) * static_cast<double>(at(x, r, j));
      });
      const float coeff = static_cast<float>(gwx * inv_r * inv_r * inv_r / static_cast<double>(s.dim));
      for (int64_t j = 0; j < s.dim; ++j) {
        const size_t i = static_cast<size_t>(r * s.dim + j);
        const float go = at(grad_out, r, j), v = at(x, r, j), w = weight[static_cast<size_t>(j)];
        float dx = inv_r * (go * w) - coeff * v;
        if (accumulate) dx = widened(held[i]) + dx;
        want_dx[i] = as_stored<T>(dx);
        want_partial[static_cast<size_t>(r / rows_per_chunk * s.dim + j)] += go * v * inv_r;
      }
    }
    for (bool shared_partial : {true, false}) {
      SCOPED_TRACE(::testing::Message() << (accumulate ? "accumulating" : "overwriting") << ", partials in "
                                        << (shared_partial ? "shared" : "global") << " memory");
      std::vector<T> dx = accumulate ? held : std::vector<T>(n);
      std::vector<float> dx_amax(static_cast<size_t>(s.rows), -1.0f);
      std::vector<float> partial(static_cast<size_t>(chunks * s.dim), -1.0f);
      const size_t smem = shared_partial ? static_cast<size_t>(s.dim) * sizeof(float) : 0;
      on_the_launchers_path<T>(s.dim, [&](auto vec) {
        constexpr bool kVec = decltype(vec)::value;
        auto launch = [&](auto kernel) {
          emulation::launch(static_cast<unsigned>(chunks), kThreads, smem, kernel, x.data(), weight.data(),
                            want_inv.data(), grad_out.data(), s.rows, s.dim, rows_per_chunk, dx.data(), accumulate,
                            dx_amax.data(), partial.data());
        };
        if (shared_partial) {
          launch(rmsnorm_backward_kernel<T, kVec, true>);
        } else {
          launch(rmsnorm_backward_kernel<T, kVec, false>);
        }
      });
      expect_bits_equal(dx, want_dx, "grad_x");
      expect_bits_equal(dx_amax, row_amaxes(want_dx, s.rows, s.dim), "grad_x row amaxes");
      expect_bits_equal(partial, want_partial, "grad_weight partials");
    }
  }
}

TEST(RmsNormEmulation, ForwardAndBackwardMatchTheHostModelBitForBit) {
  for (Shape s : kShapes) {
    check<float>(s);
    check<bf16_bits>(s);
  }
}

}  // namespace
}  // namespace fp8::cuda::rmsnorm_device
