// The grad norm's sums of squares (kernels/cuda/ops/sum_of_squares_device.cuh) on the CPU
// under the emulation of CUDA threads: the kernels that sum many buffers in one launch give
// every buffer the double its own launch gives, bit for bit, across tables of buffers (more
// than 64), empty and ragged buffers and unaligned ones; and that double is Σ x² to fp64's
// rounding. The same kernels on a GPU: fp8_cuda_model_ops_test's grad norm.
#include "tests/ops/emulation/cuda_emulation.h"
// The kernels, after the emulation.
#include "cuda/ops/sum_of_squares_device.cuh"

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace fp8::cuda::squares {
namespace {

// The single-buffer path: partials, then one block combining them.
double one_launch(const float* x, int64_t n) {
  if (n <= 0) return 0.0;
  const auto blocks = static_cast<unsigned>(partial_count(n));
  std::vector<double> partial(blocks, NAN);
  double result = NAN;
  if (model::aligned16(x)) {
    emulation::launch(blocks, kThreads, 0, partial_sum_of_squares_kernel<true>, x, n, partial.data());
  } else {
    emulation::launch(blocks, kThreads, 0, partial_sum_of_squares_kernel<false>, x, n, partial.data());
  }
  emulation::launch(1, kThreads, 0, combine_partials_kernel, static_cast<const double*>(partial.data()),
                    static_cast<int64_t>(blocks), &result);
  return result;
}

// What launch_sums_of_squares launches: a table at a time, its partials then its combine.
std::vector<double> many_launches(const std::vector<const float*>& xs, const std::vector<int64_t>& ns) {
  const int count = static_cast<int>(xs.size());
  std::vector<double> results(xs.size(), NAN);
  for (int first = 0; first < count; first += SquaresTable::kMax) {
    const SquaresTable t = make_table(xs.data(), ns.data(), first, count);
    std::vector<double> partials(static_cast<size_t>(t.first_block[t.count]), NAN);
    if (!partials.empty()) {
      emulation::launch(static_cast<unsigned>(partials.size()), kThreads, 0, many_partial_sums_kernel, t,
                        partials.data());
    }
    emulation::launch(static_cast<unsigned>(t.count), kThreads, 0, many_combine_kernel, t,
                      static_cast<const double*>(partials.data()), results.data() + first);
  }
  return results;
}

TEST(SumOfSquaresEmulation, ManyBuffersAtOnceGiveEachBufferItsOwnLaunchsDouble) {
  // One pool, 16-byte aligned; buffers start at chosen offsets (some not aligned).
  std::vector<float> pool(200'000);
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (float& v : pool) v = normal(rng);
  ASSERT_TRUE(model::aligned16(pool.data()));
  std::vector<const float*> xs;
  std::vector<int64_t> ns;
  int64_t at = 0;
  auto add = [&](int64_t n, bool aligned) {
    at = (at + 3) / 4 * 4 + (aligned ? 0 : 1);
    xs.push_back(pool.data() + at);
    ns.push_back(n);
    at += n;
  };
  // Empty, ragged (n % 4 != 0), unaligned, several partials, the most partials a buffer
  // gets (1024 would need a million values; 20000 takes 20), then enough small ones that
  // the buffers span two tables.
  for (int64_t n : {0, 1, 3, 4, 7, 1000, 1027, 12289}) add(n, n % 2 == 0);
  add(20'000, true);
  add(5'000, false);
  for (int64_t n = 1; n <= 66; ++n) add(n * 3, n % 3 != 0);
  ASSERT_GT(xs.size(), static_cast<size_t>(SquaresTable::kMax));
  ASSERT_LE(at, static_cast<int64_t>(pool.size()));

  const std::vector<double> many = many_launches(xs, ns);
  for (size_t i = 0; i < xs.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "buffer " << i << " of " << ns[i] << " values");
    const double own = one_launch(xs[i], ns[i]);
    EXPECT_EQ(std::bit_cast<uint64_t>(many[i]), std::bit_cast<uint64_t>(own)) << many[i] << " vs " << own;
    double exact = 0.0;
    for (int64_t k = 0; k < ns[i]; ++k) exact += static_cast<double>(xs[i][k]) * xs[i][k];
    EXPECT_NEAR(many[i], exact, 1e-12 * exact);
  }
}

// A buffer of more than 1024 blocks' worth of groups gets 1024 partials, whose threads
// then loop over it: here a table made by hand with fewer blocks than partial_count, against
// the single-buffer kernel on a grid as small.
TEST(SumOfSquaresEmulation, BlocksThatLoopOverTheirBufferAgreeToo) {
  std::vector<float> x(9'001);
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& v : x) v = normal(rng);
  SquaresTable t{};
  t.count = 2;
  t.x[0] = x.data();
  t.n[0] = 9'001;
  t.x[1] = x.data() + 1;  // unaligned
  t.n[1] = 5'000;
  t.first_block[1] = 2;
  t.first_block[2] = 5;
  t.aligned = 1;
  std::vector<double> partials(5, NAN), many(2, NAN);
  emulation::launch(5, kThreads, 0, many_partial_sums_kernel, t, partials.data());
  emulation::launch(2, kThreads, 0, many_combine_kernel, t, static_cast<const double*>(partials.data()), many.data());

  std::vector<double> own_partials(3, NAN);
  double own[2] = {NAN, NAN};
  emulation::launch(2, kThreads, 0, partial_sum_of_squares_kernel<true>, static_cast<const float*>(x.data()),
                    int64_t{9'001}, own_partials.data());
  emulation::launch(1, kThreads, 0, combine_partials_kernel, static_cast<const double*>(own_partials.data()),
                    int64_t{2}, &own[0]);
  emulation::launch(3, kThreads, 0, partial_sum_of_squares_kernel<false>, static_cast<const float*>(x.data() + 1),
                    int64_t{5'000}, own_partials.data());
  emulation::launch(1, kThreads, 0, combine_partials_kernel, static_cast<const double*>(own_partials.data()),
                    int64_t{3}, &own[1]);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(std::bit_cast<uint64_t>(many[i]), std::bit_cast<uint64_t>(own[i])) << "buffer " << i;
  }
}

}  // namespace
}  // namespace fp8::cuda::squares
