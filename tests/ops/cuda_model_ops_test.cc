// The CUDA ModelOps (make_cuda_model_ops) against the CPU implementation, op by op, on
// random inputs and on shapes that reach the kernels' edge cases: rows that are not a
// multiple of a block, dims that are not multiples of 4, pointers that are not 16-byte
// aligned (the scalar paths), head_dim 16/64/128 with GQA groups of 1, 2 and 4, sequences
// that are not a multiple of any tile, vocabularies of 256 and 32000, ignored, repeated
// and out-of-range ids. Also: determinism (every op run twice gives the same bits),
// accumulation into parameter gradients, in-place RoPE, and bad arguments rejected with
// the CPU's message and nothing written.
//
// Tolerances, per op, against the CPU:
//  * bit-identical: embedding forward and backward (same additions in the same order),
//    add / accumulate / scale, RoPE (same tables, same rotation, no FMA contraction on
//    either side), AdamW (same coefficients from the host, IEEE sqrt and division);
//  * SwiGLU: CUDA's expf is within 2 ulp where glibc's is within 1, which can move the
//    rounding of the sigmoid s by an ulp: forward within 1e-6 of max(1, |cpu|); backward
//    within 4e-6, because near s = 1 an ulp of s is an absolute 1.2e-7 in 1 − s, which
//    1 + g·(1 − s) multiplies by |g| (gates up to 12 here);
//  * RMSNorm: inv_rms and out within 4 ulp (the mean square is summed in double in another
//    order, which can move the float rounding of 1/rms by 1 ulp); grad_x within 1e-6 of
//    the row's scale (same formula, coefficient from a double sum in another order);
//    grad_weight against a double reference within 2e-6 of Σ|terms| (float partial sums
//    over at most a few rows per chunk), and the CPU within its own bound;
//  * cross-entropy: loss and lse 1e-6 relative (double sums in another order, one float
//    rounding); grad within 1e-6 of max(|cpu|, scale) (expf again), ignored rows exactly 0;
//  * sum_of_squares: 1e-12 relative (double accumulation in another order);
//  * attention: 1e-5 scaled max error forward, 2e-5 backward (fp32 tiles accumulate in
//    another order than OpenBLAS; each side is within ~1e-6 of the exact result).
// Without a GPU, one test checks that the ops say why they are unavailable, and the
// others skip, saying so. These are the fp32 activations; cuda_bf16_model_ops_test.cc
// runs the same ops with bf16 ones.
#include <algorithm>
#include <bit>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/string_view.h"
#include "fp8/model_ops.h"
#include "tests/ops/gradient_check.h"

#if defined(FP8_HAVE_CUDA)
#include <cuda_runtime_api.h>

#include "tests/ops/device_array.h"
#endif

namespace fp8::ops_test {
namespace {

bool contains(absl::string_view s, absl::string_view needle) { return s.find(needle) != absl::string_view::npos; }

// ---- without a GPU ---------------------------------------------------------------------------

TEST(CudaModelOpsAvailability, NoGpuIsReportedAsUnavailableWithTheReason) {
  auto ops = make_cuda_model_ops(0, nullptr);
  if (ops.ok()) GTEST_SKIP() << "a CUDA GPU is present: " << (*ops)->name();
  EXPECT_EQ(ops.status().code(), absl::StatusCode::kUnavailable) << ops.status();
  const std::string message(ops.status().message());
  // "no CUDA GPU available: ..." or "this build has no CUDA model ops (...)".
  EXPECT_TRUE(contains(message, "CUDA")) << message;
  EXPECT_GT(message.size(), 30u) << "the reason is missing: " << message;
}

TEST(CudaModelOpsAvailability, DeviceIndexOutOfRangeIsUnavailable) {
  for (int device : {-1, 1 << 20}) {
    const auto ops = make_cuda_model_ops(device, nullptr);
    ASSERT_FALSE(ops.ok()) << device;
    EXPECT_EQ(ops.status().code(), absl::StatusCode::kUnavailable) << ops.status();
  }
}

#if !defined(FP8_HAVE_CUDA)

TEST(CudaModelOps, NeedsACudaBuild) { GTEST_SKIP() << "this build has no CUDA (nvcc was not found at configure time)"; }

#else

// ---- device memory ----------------------------------------------------------------------------

using DeviceFloats = DeviceArray<float>;
using DeviceInts = DeviceArray<int32_t>;

size_t sz(int64_t n) { return static_cast<size_t>(n); }

// ---- comparisons --------------------------------------------------------------------------------

uint32_t bits(float x) { return std::bit_cast<uint32_t>(x); }

// Distance in representable floats between two finite floats of any signs.
int64_t ulp_distance(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b) ? 0 : INT64_MAX;
  auto ordered = [](float x) {
    const int64_t b = static_cast<int32_t>(bits(x));
    return b < 0 ? INT32_MIN - b : b;  // monotonic in x; -0 and +0 both map to 0
  };
  const int64_t d = ordered(a) - ordered(b);
  return d < 0 ? -d : d;
}

void expect_bit_identical(const std::vector<float>& gpu, const std::vector<float>& cpu, const std::string& what) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  size_t mismatches = 0, first = 0;
  for (size_t i = 0; i < gpu.size(); ++i) {
    if (bits(gpu[i]) != bits(cpu[i])) {
      if (mismatches++ == 0) first = i;
    }
  }
  EXPECT_EQ(mismatches, 0u) << what << ": " << mismatches << " of " << gpu.size() << " differ, first at " << first
                            << ": gpu " << gpu[first] << " cpu " << cpu[first];
}

void expect_within_ulps(const std::vector<float>& gpu, const std::vector<float>& cpu, int64_t ulps,
                        const std::string& what) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  int64_t worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < gpu.size(); ++i) {
    const int64_t d = ulp_distance(gpu[i], cpu[i]);
    if (d > worst) worst = d, at = i;
  }
  EXPECT_LE(worst, ulps) << what << ": worst at " << at << ": gpu " << gpu[at] << " cpu " << cpu[at];
}

// |gpu − cpu| <= tol · max(floor, |cpu|) for every element (NaN fails).
void expect_relative(const std::vector<float>& gpu, const std::vector<float>& cpu, double tol, double floor,
                     const std::string& what) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  double worst = 0.0;
  size_t at = 0;
  for (size_t i = 0; i < gpu.size(); ++i) {
    const double err =
        std::abs(static_cast<double>(gpu[i]) - cpu[i]) / std::max(floor, std::abs(static_cast<double>(cpu[i])));
    if (!(err <= worst)) worst = std::isnan(err) ? INFINITY : err, at = i;
  }
  EXPECT_LE(worst, tol) << what << ": worst at " << at << ": gpu " << gpu[at] << " cpu " << cpu[at];
}

// The scaled max error of tests/ops: max |gpu − cpu| / max(1, max |cpu|).
void expect_scaled(const std::vector<float>& gpu, const std::vector<float>& cpu, double tol, const std::string& what) {
  EXPECT_LT(scaled_max_error(gpu, to_double(cpu)), tol) << what;
}

std::vector<int32_t> random_ids(size_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> dist(0, vocab - 1);
  std::vector<int32_t> ids(n);
  for (auto& t : ids) t = static_cast<int32_t>(dist(rng));
  return ids;
}

// ---- fixture -----------------------------------------------------------------------------------

class CudaModelOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ops = make_cuda_model_ops(0, nullptr);
    if (!ops.ok()) GTEST_SKIP() << "no CUDA GPU, nothing to run the CUDA model ops on: " << ops.status().message();
    ops_ = std::move(*ops);
  }

  ModelOps& gpu() { return *ops_; }
  static ModelOps& cpu() { return cpu_model_ops(); }

  std::unique_ptr<ModelOps> ops_;
};

TEST_F(CudaModelOpsTest, NamesItsDevice) { EXPECT_EQ(gpu().name().rfind("cuda:0 (", 0), 0u) << gpu().name(); }

// ---- embedding ---------------------------------------------------------------------------------

struct EmbeddingCase {
  int64_t vocab, dim, n;
  size_t offset;  // elements; 1 makes the float pointers misaligned
};

const EmbeddingCase kEmbeddingCases[] = {
    {256, 64, 1000, 0}, {256, 64, 1000, 1},   {32000, 131, 517, 0}, {7, 3, 5, 0},
    {11, 1, 300, 0},    {32000, 4096, 64, 0}, {32000, 20, 2000, 1}, {1, 8, 3, 0},
};

// Repeated ids on purpose: a few ids take most positions, one more than 64 times (runs that
// span several 32-position windows of the backward kernel).
std::vector<int32_t> embedding_ids(int64_t n, int64_t vocab, uint32_t seed) {
  auto ids = random_ids(sz(n), vocab, seed);
  for (int64_t i = 0; i < n; i += 3) ids[sz(i)] = static_cast<int32_t>((i / 3) % 4 % vocab);
  return ids;
}

TEST_F(CudaModelOpsTest, EmbeddingForwardIsBitIdentical) {
  for (const auto& c : kEmbeddingCases) {
    SCOPED_TRACE(testing::Message() << "vocab " << c.vocab << " dim " << c.dim << " n " << c.n << " offset "
                                    << c.offset);
    const auto ids = embedding_ids(c.n, c.vocab, 1);
    const auto table = uniform(sz(c.vocab * c.dim), 2);
    std::vector<float> want(sz(c.n * c.dim));
    ASSERT_TRUE(cpu().embedding_forward(ids.data(), c.n, table.data(), c.vocab, c.dim, want.data()).ok());
    DeviceInts d_ids(ids);
    DeviceFloats d_table(table, c.offset), d_out(nans(sz(c.n * c.dim)), c.offset);
    ASSERT_TRUE(gpu().embedding_forward(d_ids.get(), c.n, d_table.get(), c.vocab, c.dim, d_out.get()).ok());
    expect_bit_identical(d_out.download(), want, "out");
  }
}

TEST_F(CudaModelOpsTest, EmbeddingBackwardIsBitIdenticalAndAccumulates) {
  for (const auto& c : kEmbeddingCases) {
    SCOPED_TRACE(testing::Message() << "vocab " << c.vocab << " dim " << c.dim << " n " << c.n << " offset "
                                    << c.offset);
    const auto ids = embedding_ids(c.n, c.vocab, 3);
    const auto grad_out = uniform(sz(c.n * c.dim), 4);
    // A previous micro-batch's gradient: the backward adds onto it.
    auto want = uniform(sz(c.vocab * c.dim), 5);
    const auto prior = want;
    ASSERT_TRUE(cpu().embedding_backward(ids.data(), c.n, grad_out.data(), c.vocab, c.dim, want.data()).ok());
    DeviceInts d_ids(ids);
    DeviceFloats d_grad_out(grad_out, c.offset);
    for (int run = 0; run < 2; ++run) {  // twice from the same prior: the same bits
      DeviceFloats d_table(prior, c.offset);
      ASSERT_TRUE(gpu().embedding_backward(d_ids.get(), c.n, d_grad_out.get(), c.vocab, c.dim, d_table.get()).ok());
      expect_bit_identical(d_table.download(), want, "grad_table, run " + std::to_string(run));
    }
  }
}

// Ids in device memory cannot be checked before the kernels run: a bad one reads and
// writes nothing out of bounds, gives a zero row forward and contributes nothing backward.
TEST_F(CudaModelOpsTest, EmbeddingOutOfRangeIdsGiveZeroRowsAndAreSkipped) {
  const int64_t vocab = 50, dim = 12;
  const std::vector<int32_t> ids = {3, -1, 49, 50, INT32_MAX, INT32_MIN, 3, 7, -7, 0};
  const int64_t n = static_cast<int64_t>(ids.size());
  auto valid = [&](int32_t t) { return t >= 0 && t < vocab; };
  const auto table = uniform(sz(vocab * dim), 6);
  DeviceInts d_ids(ids);
  DeviceFloats d_table(table), d_out(nans(sz(n * dim)));
  ASSERT_TRUE(gpu().embedding_forward(d_ids.get(), n, d_table.get(), vocab, dim, d_out.get()).ok());
  const auto out = d_out.download();
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < dim; ++j) {
      const float want = valid(ids[sz(i)]) ? table[sz(ids[sz(i)] * dim + j)] : 0.0f;
      ASSERT_EQ(bits(out[sz(i * dim + j)]), bits(want)) << "position " << i << " column " << j;
    }
  }

  // Backward: the CPU over the valid positions alone is what the GPU must give.
  const auto grad_out = uniform(sz(n * dim), 7);
  std::vector<int32_t> kept_ids;
  std::vector<float> kept_grad;
  for (int64_t i = 0; i < n; ++i) {
    if (!valid(ids[sz(i)])) continue;
    kept_ids.push_back(ids[sz(i)]);
    kept_grad.insert(kept_grad.end(), grad_out.begin() + i * dim, grad_out.begin() + (i + 1) * dim);
  }
  auto want = uniform(sz(vocab * dim), 8);
  DeviceFloats d_grad_table(want), d_grad_out(grad_out);
  ASSERT_TRUE(cpu()
                  .embedding_backward(kept_ids.data(), static_cast<int64_t>(kept_ids.size()), kept_grad.data(), vocab,
                                      dim, want.data())
                  .ok());
  ASSERT_TRUE(gpu().embedding_backward(d_ids.get(), n, d_grad_out.get(), vocab, dim, d_grad_table.get()).ok());
  expect_bit_identical(d_grad_table.download(), want, "grad_table");
}

// ---- RMSNorm -------------------------------------------------------------------------------------

struct RmsCase {
  int64_t rows, dim;
  size_t offset;
};

// 9001 columns: partial sums in scratch rather than shared memory; 4099 and 6001 rows:
// chunks of 3 rows (at most 2048 chunks), the last one short.
const RmsCase kRmsCases[] = {{1, 1, 0},    {3, 7, 0},    {257, 64, 0},  {257, 64, 1},  {100, 4096, 0},
                             {33, 130, 0}, {5, 9001, 0}, {4099, 36, 0}, {6001, 40, 1}, {601, 256, 1}};

TEST_F(CudaModelOpsTest, RmsNormForwardMatchesTheCpu) {
  for (const auto& c : kRmsCases) {
    SCOPED_TRACE(testing::Message() << "rows " << c.rows << " dim " << c.dim << " offset " << c.offset);
    const float eps = 1e-5f;
    const auto x = uniform(sz(c.rows * c.dim), 10, -2.0f, 2.0f), w = uniform(sz(c.dim), 11, 0.5f, 1.5f);
    std::vector<float> want(x.size()), want_inv(sz(c.rows));
    ASSERT_TRUE(cpu().rmsnorm_forward(x.data(), w.data(), c.rows, c.dim, eps, want.data(), want_inv.data()).ok());
    DeviceFloats d_x(x, c.offset), d_w(w, c.offset), d_out(nans(x.size()), c.offset), d_inv(nans(sz(c.rows)));
    ASSERT_TRUE(gpu().rmsnorm_forward(d_x.get(), d_w.get(), c.rows, c.dim, eps, d_out.get(), d_inv.get()).ok());
    expect_within_ulps(d_inv.download(), want_inv, 4, "inv_rms");
    expect_within_ulps(d_out.download(), want, 4, "out");
  }
}

// row_amax is the rowwise amax of the output the kernel wrote, and asking for it leaves
// out and inv_rms as they are without it.
TEST_F(CudaModelOpsTest, RmsNormRowAmaxIsTheRowwiseAmaxOfItsOutput) {
  for (const auto& c : kRmsCases) {
    SCOPED_TRACE(testing::Message() << "rows " << c.rows << " dim " << c.dim << " offset " << c.offset);
    const auto x = uniform(sz(c.rows * c.dim), 16, -2.0f, 2.0f), w = uniform(sz(c.dim), 17, -1.5f, 1.5f);
    DeviceFloats d_x(x, c.offset), d_w(w, c.offset), d_out(nans(x.size()), c.offset), d_inv(nans(sz(c.rows)));
    DeviceFloats d_plain(nans(x.size()), c.offset), d_plain_inv(nans(sz(c.rows))), d_amax(nans(sz(c.rows)));
    ASSERT_TRUE(
        gpu().rmsnorm_forward(d_x.get(), d_w.get(), c.rows, c.dim, 1e-5f, d_plain.get(), d_plain_inv.get()).ok());
    ASSERT_TRUE(gpu()
                    .rmsnorm_forward(d_x.get(), d_w.get(), c.rows, c.dim, 1e-5f, d_out.get(), d_inv.get(),
                                     DType::kFloat32, d_amax.get())
                    .ok());
    const auto out = d_out.download();
    EXPECT_EQ(out, d_plain.download()) << "out with and without row_amax";
    EXPECT_EQ(d_inv.download(), d_plain_inv.download()) << "inv_rms with and without row_amax";
    const auto amax = d_amax.download();
    ASSERT_EQ(amax, row_amaxes(out, c.rows, c.dim));
  }
}

TEST_F(CudaModelOpsTest, RmsNormBackwardMatchesTheCpuAndAccumulatesGradWeight) {
  for (const auto& c : kRmsCases) {
    SCOPED_TRACE(testing::Message() << "rows " << c.rows << " dim " << c.dim << " offset " << c.offset);
    const auto x = uniform(sz(c.rows * c.dim), 12, -2.0f, 2.0f), w = uniform(sz(c.dim), 13, 0.5f, 1.5f);
    const auto g = uniform(sz(c.rows * c.dim), 14);
    std::vector<float> y(x.size()), inv(sz(c.rows));
    ASSERT_TRUE(cpu().rmsnorm_forward(x.data(), w.data(), c.rows, c.dim, 1e-5f, y.data(), inv.data()).ok());
    const auto prior = uniform(sz(c.dim), 15);  // grad_weight from a previous micro-batch
    std::vector<float> want_dx(x.size()), want_dw = prior;
    ASSERT_TRUE(
        cpu()
            .rmsnorm_backward(x.data(), w.data(), inv.data(), g.data(), c.rows, c.dim, want_dx.data(), want_dw.data())
            .ok());
    // grad_weight in double from the same inputs, and the bound of its float sums.
    std::vector<double> exact(prior.begin(), prior.end()), magnitude(sz(c.dim));
    for (int64_t r = 0; r < c.rows; ++r) {
      for (int64_t j = 0; j < c.dim; ++j) {
        const double term = static_cast<double>(g[sz(r * c.dim + j)]) * x[sz(r * c.dim + j)] * inv[sz(r)];
        exact[sz(j)] += term;
        magnitude[sz(j)] += std::abs(term);
      }
    }
    DeviceFloats d_x(x, c.offset), d_w(w, c.offset), d_inv(inv), d_g(g, c.offset);
    std::vector<float> first_dx, first_dw;
    for (int run = 0; run < 2; ++run) {
      DeviceFloats d_dx(nans(x.size()), c.offset), d_dw(prior, c.offset);
      ASSERT_TRUE(
          gpu()
              .rmsnorm_backward(d_x.get(), d_w.get(), d_inv.get(), d_g.get(), c.rows, c.dim, d_dx.get(), d_dw.get())
              .ok());
      const auto dx = d_dx.download(), dw = d_dw.download();
      if (run == 0) {
        first_dx = dx;
        first_dw = dw;
        continue;
      }
      expect_bit_identical(dx, first_dx, "grad_x, run twice");
      expect_bit_identical(dw, first_dw, "grad_weight, run twice");
    }
    for (int64_t r = 0; r < c.rows; ++r) {
      const std::vector<float> gpu_row(first_dx.begin() + r * c.dim, first_dx.begin() + (r + 1) * c.dim);
      const std::vector<float> cpu_row(want_dx.begin() + r * c.dim, want_dx.begin() + (r + 1) * c.dim);
      expect_scaled(gpu_row, cpu_row, 1e-6, "grad_x row " + std::to_string(r));
    }
    for (int64_t j = 0; j < c.dim; ++j) {
      const double bound = std::abs(static_cast<double>(prior[sz(j)])) + magnitude[sz(j)];
      ASSERT_LE(std::abs(first_dw[sz(j)] - exact[sz(j)]), 2e-6 * bound) << "grad_weight " << j << " vs exact";
      ASSERT_LE(std::abs(first_dw[sz(j)] - want_dw[sz(j)]), 1e-4 * bound) << "grad_weight " << j << " vs cpu";
    }

    // Store::kAccumulate: the same gradient, added to what grad_x held.
    const auto prior_dx = uniform(x.size(), 16, -2.0f, 2.0f);
    DeviceFloats d_sum(prior_dx, c.offset), d_dw(prior, c.offset);
    ASSERT_TRUE(gpu()
                    .rmsnorm_backward(d_x.get(), d_w.get(), d_inv.get(), d_g.get(), c.rows, c.dim, d_sum.get(),
                                      d_dw.get(), DType::kFloat32, Store::kAccumulate)
                    .ok());
    const auto sum = d_sum.download();
    for (size_t i = 0; i < sum.size(); ++i) ASSERT_EQ(sum[i], prior_dx[i] + first_dx[i]) << "accumulated grad_x " << i;
    expect_bit_identical(d_dw.download(), first_dw, "grad_weight, accumulating grad_x");

    // grad_x_row_amax: each row's amax of grad_x as stored, written or accumulated, and
    // grad_x as without it.
    for (const Store store : {Store::kOverwrite, Store::kAccumulate}) {
      DeviceFloats d_dx(prior_dx, c.offset), d_dw2(prior, c.offset), d_amax(nans(sz(c.rows)));
      ASSERT_TRUE(gpu()
                      .rmsnorm_backward(d_x.get(), d_w.get(), d_inv.get(), d_g.get(), c.rows, c.dim, d_dx.get(),
                                        d_dw2.get(), DType::kFloat32, store, d_amax.get())
                      .ok());
      const auto dx = d_dx.download(), amax = d_amax.download();
      expect_bit_identical(dx, store == Store::kAccumulate ? sum : first_dx, "grad_x with grad_x_row_amax");
      ASSERT_EQ(amax, row_amaxes(dx, c.rows, c.dim));
    }
  }
}

// ---- RoPE ------------------------------------------------------------------------------------------

struct RopeCase {
  RopeShape shape;
  double theta;
  size_t offset;
};

const RopeCase kRopeCases[] = {
    {{2, 17, 3, 16}, 10000.0, 0}, {{1, 100, 4, 64}, 500000.0, 0}, {{3, 33, 2, 128}, 10000.0, 0},
    {{1, 5, 1, 2}, 10000.0, 0},   {{2, 7, 3, 6}, 10000.0, 0},     {{2, 17, 3, 16}, 10000.0, 1},
};

size_t rope_size(const RopeShape& s) { return sz(s.batch * s.seq * s.heads * s.head_dim); }

TEST_F(CudaModelOpsTest, RopeIsBitIdenticalForwardBackwardAndInPlace) {
  for (const auto& c : kRopeCases) {
    const RopeShape& s = c.shape;
    SCOPED_TRACE(testing::Message() << "shape [" << s.batch << ", " << s.seq << ", " << s.heads << ", " << s.head_dim
                                    << "] theta " << c.theta << " offset " << c.offset);
    const auto x = uniform(rope_size(s), 20);
    std::vector<float> want_fwd(x.size()), want_bwd(x.size());
    ASSERT_TRUE(cpu().rope_forward(s, c.theta, x.data(), want_fwd.data()).ok());
    ASSERT_TRUE(cpu().rope_backward(s, c.theta, x.data(), want_bwd.data()).ok());
    DeviceFloats d_x(x, c.offset), d_out(nans(x.size()), c.offset);
    ASSERT_TRUE(gpu().rope_forward(s, c.theta, d_x.get(), d_out.get()).ok());
    expect_bit_identical(d_out.download(), want_fwd, "forward");
    ASSERT_TRUE(gpu().rope_backward(s, c.theta, d_x.get(), d_out.get()).ok());
    expect_bit_identical(d_out.download(), want_bwd, "backward");
    // In place, both directions.
    ASSERT_TRUE(gpu().rope_forward(s, c.theta, d_x.get(), d_x.get()).ok());
    expect_bit_identical(d_x.download(), want_fwd, "forward in place");
    d_x.upload(x);
    ASSERT_TRUE(gpu().rope_backward(s, c.theta, d_x.get(), d_x.get()).ok());
    expect_bit_identical(d_x.download(), want_bwd, "backward in place");
  }
}

// The backward with the rows' amaxes (a block a row): the CPU's gradient bit for bit, in
// place too, and each row's amax of it.
TEST_F(CudaModelOpsTest, RopeBackwardRowAmaxesAreTheRowwiseAmaxOfTheSameGradient) {
  for (const auto& c : kRopeCases) {
    const RopeShape& s = c.shape;
    SCOPED_TRACE(testing::Message() << "shape [" << s.batch << ", " << s.seq << ", " << s.heads << ", " << s.head_dim
                                    << "] offset " << c.offset);
    const int64_t rows = s.batch * s.seq, cols = s.heads * s.head_dim;
    const auto g = uniform(rope_size(s), 21);
    std::vector<float> want(g.size());
    ASSERT_TRUE(cpu().rope_backward(s, c.theta, g.data(), want.data()).ok());
    DeviceFloats d_g(g, c.offset), d_out(nans(g.size()), c.offset), d_amax(nans(sz(rows)));
    for (const bool in_place : {false, true}) {
      float* dst = in_place ? d_g.get() : d_out.get();
      ASSERT_TRUE(gpu().rope_backward(s, c.theta, d_g.get(), dst, DType::kFloat32, d_amax.get()).ok());
      const auto got = in_place ? d_g.download() : d_out.download();
      expect_bit_identical(got, want, in_place ? "in place" : "out of place");
      const auto amax = d_amax.download();
      ASSERT_EQ(amax, row_amaxes(want, rows, cols));
    }
  }
}

// More keys than the table cache holds: entries are dropped and rebuilt, results unchanged.
TEST_F(CudaModelOpsTest, RopeTablesSurviveCacheTurnover) {
  for (int round = 0; round < 2; ++round) {
    for (int64_t seq = 1; seq <= 20; ++seq) {
      const RopeShape s{1, seq, 2, 8};
      const auto x = uniform(rope_size(s), static_cast<uint32_t>(30 + seq));
      std::vector<float> want(x.size());
      ASSERT_TRUE(cpu().rope_forward(s, 10000.0, x.data(), want.data()).ok());
      DeviceFloats d_x(x);
      ASSERT_TRUE(gpu().rope_forward(s, 10000.0, d_x.get(), d_x.get()).ok());
      expect_bit_identical(d_x.download(), want, "seq " + std::to_string(seq));
    }
  }
}

// Generation's RoPE at an offset: the table rows of positions [start, start + seq), bit for
// bit the CPU's, as the step runs through the positions one by one and in a chunk.
TEST_F(CudaModelOpsTest, RopeAtAStartPositionIsBitIdentical) {
  for (const auto& [start, seq] : {std::pair<int64_t, int64_t>{1, 1}, {7, 1}, {63, 1}, {64, 1}, {5, 9}, {1000, 3}}) {
    const RopeShape s{1, seq, 4, 64, start};
    SCOPED_TRACE(testing::Message() << "start " << start << " seq " << seq);
    const auto x = uniform(rope_size(s), 22);
    std::vector<float> want(x.size());
    ASSERT_TRUE(cpu().rope_forward(s, 500000.0, x.data(), want.data()).ok());
    DeviceFloats d_x(x);
    ASSERT_TRUE(gpu().rope_forward(s, 500000.0, d_x.get(), d_x.get()).ok());
    expect_bit_identical(d_x.download(), want, "forward in place");
  }
}

// ---- attention ---------------------------------------------------------------------------------------

struct AttentionCase {
  AttentionShape shape;  // batch, seq, n_heads, n_kv_heads, head_dim
  size_t offset = 0;     // elements; 1 makes q, k, v, grad_out and the outputs misaligned
};

const AttentionCase kAttentionCases[] = {
    {{1, 1, 1, 1, 16}},   {{2, 37, 4, 4, 16}}, {{1, 130, 4, 2, 64}}, {{2, 67, 8, 2, 128}},
    {{1, 200, 4, 1, 64}}, {{1, 45, 2, 2, 40}}, {{1, 33, 2, 1, 256}}, {{1, 130, 4, 2, 64}, 1},
};

// out_row_amax (the SIMT kernels and an amax pass): out as without it, and each token's
// amax of it over all heads.
TEST_F(CudaModelOpsTest, AttentionOutRowAmaxesAreTheRowwiseAmaxOfTheSameOut) {
  for (const auto& c : kAttentionCases) {
    const AttentionShape& s = c.shape;
    SCOPED_TRACE(testing::Message() << "batch " << s.batch << " seq " << s.seq << " heads " << s.n_heads << "/"
                                    << s.n_kv_heads << " head_dim " << s.head_dim << " offset " << c.offset);
    const int64_t rows = s.batch * s.seq, cols = s.n_heads * s.head_dim;
    const size_t qn = sz(rows * cols), kvn = sz(s.batch * s.seq * s.n_kv_heads * s.head_dim);
    const size_t ln = sz(s.batch * s.n_heads * s.seq);
    const auto q = uniform(qn, 44, -2.0f, 2.0f), k = uniform(kvn, 45, -2.0f, 2.0f), v = uniform(kvn, 46);
    DeviceFloats d_q(q, c.offset), d_k(k, c.offset), d_v(v, c.offset);
    DeviceFloats d_plain(nans(qn), c.offset), d_out(nans(qn), c.offset), d_lse(nans(ln)), d_amax(nans(sz(rows)));
    ASSERT_TRUE(gpu().attention_forward(s, d_q.get(), d_k.get(), d_v.get(), d_plain.get(), d_lse.get()).ok());
    ASSERT_TRUE(gpu()
                    .attention_forward(s, d_q.get(), d_k.get(), d_v.get(), d_out.get(), d_lse.get(), DType::kFloat32,
                                       d_amax.get())
                    .ok());
    const auto out = d_out.download();
    expect_bit_identical(out, d_plain.download(), "out with and without out_row_amax");
    const auto amax = d_amax.download();
    ASSERT_EQ(amax, row_amaxes(out, rows, cols));
  }
}

TEST_F(CudaModelOpsTest, AttentionMatchesTheCpuAndIsDeterministic) {
  for (const auto& c : kAttentionCases) {
    const AttentionShape& s = c.shape;
    SCOPED_TRACE(testing::Message() << "batch " << s.batch << " seq " << s.seq << " heads " << s.n_heads << "/"
                                    << s.n_kv_heads << " head_dim " << s.head_dim << " offset " << c.offset);
    const size_t qn = sz(s.batch * s.seq * s.n_heads * s.head_dim),
                 kvn = sz(s.batch * s.seq * s.n_kv_heads * s.head_dim);
    const size_t ln = sz(s.batch * s.n_heads * s.seq);
    const auto q = uniform(qn, 40, -2.0f, 2.0f), k = uniform(kvn, 41, -2.0f, 2.0f), v = uniform(kvn, 42);
    const auto go = uniform(qn, 43);
    std::vector<float> out(qn), lse(ln), gq(qn), gk(kvn), gv(kvn);
    ASSERT_TRUE(cpu().attention_forward(s, q.data(), k.data(), v.data(), out.data(), lse.data()).ok());
    ASSERT_TRUE(cpu()
                    .attention_backward(s, q.data(), k.data(), v.data(), out.data(), lse.data(), go.data(), gq.data(),
                                        gk.data(), gv.data())
                    .ok());
    DeviceFloats d_q(q, c.offset), d_k(k, c.offset), d_v(v, c.offset), d_go(go, c.offset);
    std::vector<std::vector<float>> first;
    for (int run = 0; run < 2; ++run) {
      DeviceFloats d_out(nans(qn), c.offset), d_lse(nans(ln)), d_gq(nans(qn), c.offset), d_gk(nans(kvn), c.offset),
          d_gv(nans(kvn), c.offset);
      ASSERT_TRUE(gpu().attention_forward(s, d_q.get(), d_k.get(), d_v.get(), d_out.get(), d_lse.get()).ok());
      ASSERT_TRUE(gpu()
                      .attention_backward(s, d_q.get(), d_k.get(), d_v.get(), d_out.get(), d_lse.get(), d_go.get(),
                                          d_gq.get(), d_gk.get(), d_gv.get())
                      .ok());
      std::vector<std::vector<float>> got = {d_out.download(), d_lse.download(), d_gq.download(), d_gk.download(),
                                             d_gv.download()};
      if (run == 1) {
        const char* names[] = {"out", "lse", "grad_q", "grad_k", "grad_v"};
        for (size_t i = 0; i < got.size(); ++i) {
          expect_bit_identical(got[i], first[i], std::string(names[i]) + " twice");
        }
        continue;
      }
      expect_scaled(got[0], out, 1e-5, "out");
      expect_scaled(got[1], lse, 1e-5, "lse");
      expect_scaled(got[2], gq, 2e-5, "grad_q");
      expect_scaled(got[3], gk, 2e-5, "grad_k");
      expect_scaled(got[4], gv, 2e-5, "grad_v");
      first = std::move(got);
    }
  }
}

// Attention over a KV cache: one query after a context (decode), a chunk after a prefix,
// and the whole sequence (past 0), against the CPU, at head_dim up to the kernels' limit
// and past several key tiles; the cache's unused rows are NaN and never read. Run twice:
// the same bits.
TEST_F(CudaModelOpsTest, KvCacheAttentionMatchesTheCpuAndIsDeterministic) {
  const KvCacheAttentionShape cases[] = {
      {1, 1, 0, 4, 4, 2, 64},     {1, 1, 300, 512, 8, 2, 128}, {2, 1, 129, 140, 4, 4, 16},
      {1, 5, 37, 50, 4, 1, 256},  {1, 33, 0, 33, 2, 1, 40},    {3, 1, 1000, 1001, 2, 2, 64},
  };
  for (const KvCacheAttentionShape& s : cases) {
    SCOPED_TRACE(testing::Message() << "batch " << s.batch << " seq " << s.seq << " past " << s.past << " cache "
                                    << s.cache_len << " heads " << s.n_heads << "/" << s.n_kv_heads << " head_dim "
                                    << s.head_dim);
    const size_t qn = sz(s.batch * s.seq * s.n_heads * s.head_dim);
    const int64_t kv_row = s.n_kv_heads * s.head_dim;
    auto k = nans(sz(s.batch * s.cache_len * kv_row)), v = k;
    const auto k_used = uniform(k.size(), 47, -2.0f, 2.0f), v_used = uniform(k.size(), 48);
    for (int64_t b = 0; b < s.batch; ++b) {
      const int64_t first = b * s.cache_len * kv_row, n = (s.past + s.seq) * kv_row;
      std::copy_n(k_used.begin() + first, n, k.begin() + first);
      std::copy_n(v_used.begin() + first, n, v.begin() + first);
    }
    const auto q = uniform(qn, 49, -2.0f, 2.0f);
    std::vector<float> want(qn);
    ASSERT_TRUE(cpu().kv_cache_attention_forward(s, q.data(), k.data(), v.data(), want.data()).ok());
    DeviceFloats d_q(q), d_k(k), d_v(v), d_out(nans(qn));
    ASSERT_TRUE(gpu().kv_cache_attention_forward(s, d_q.get(), d_k.get(), d_v.get(), d_out.get()).ok());
    const auto got = d_out.download();
    expect_scaled(got, want, 1e-5, "out");
    ASSERT_TRUE(gpu().kv_cache_attention_forward(s, d_q.get(), d_k.get(), d_v.get(), d_out.get()).ok());
    expect_bit_identical(d_out.download(), got, "out twice");
  }
}

// ---- SwiGLU and the residual ops ----------------------------------------------------------------------

const int64_t kElementwiseSizes[] = {1, 3, 4, 5, 1000, 4097, (int64_t{1} << 20) + 3};

TEST_F(CudaModelOpsTest, SwigluMatchesTheCpu) {
  for (int64_t n : kElementwiseSizes) {
    for (size_t offset : {size_t{0}, size_t{1}}) {
      SCOPED_TRACE(testing::Message() << "n " << n << " offset " << offset);
      // Gates out to ±12 reach both tails of the sigmoid.
      const auto gate = uniform(sz(n), 50, -12.0f, 12.0f), up = uniform(sz(n), 51), go = uniform(sz(n), 52);
      std::vector<float> out(sz(n)), gg(sz(n)), gu(sz(n));
      ASSERT_TRUE(cpu().swiglu_forward(gate.data(), up.data(), n, out.data()).ok());
      ASSERT_TRUE(cpu().swiglu_backward(gate.data(), up.data(), go.data(), n, gg.data(), gu.data()).ok());
      DeviceFloats d_gate(gate, offset), d_up(up, offset), d_go(go, offset);
      DeviceFloats d_out(nans(sz(n)), offset), d_gg(nans(sz(n)), offset), d_gu(nans(sz(n)), offset);
      ASSERT_TRUE(gpu().swiglu_forward(d_gate.get(), d_up.get(), n, d_out.get()).ok());
      ASSERT_TRUE(gpu().swiglu_backward(d_gate.get(), d_up.get(), d_go.get(), n, d_gg.get(), d_gu.get()).ok());
      expect_relative(d_out.download(), out, 1e-6, 1.0, "out");
      expect_relative(d_gg.download(), gg, 4e-6, 1.0, "grad_gate");
      expect_relative(d_gu.download(), gu, 1e-6, 1.0, "grad_up");
    }
  }
}

// With row amaxes requested the kernel runs by rows: the same out bit for bit, and each
// row's amax of it.
TEST_F(CudaModelOpsTest, SwigluRowAmaxesAreTheRowwiseAmaxOfTheSameOutput) {
  struct Shape {
    int64_t rows, cols;
    size_t offset;
  };
  for (const Shape& s : {Shape{1, 1, 0}, Shape{3, 7, 0}, Shape{17, 256, 0}, Shape{17, 256, 1}, Shape{5, 9001, 0},
                         Shape{2049, 44, 0}}) {
    SCOPED_TRACE(testing::Message() << "rows " << s.rows << " cols " << s.cols << " offset " << s.offset);
    const int64_t n = s.rows * s.cols;
    const auto gate = uniform(sz(n), 53, -12.0f, 12.0f), up = uniform(sz(n), 54);
    DeviceFloats d_gate(gate, s.offset), d_up(up, s.offset), d_flat(nans(sz(n)), s.offset);
    DeviceFloats d_out(nans(sz(n)), s.offset), d_amax(nans(sz(s.rows)));
    ASSERT_TRUE(gpu().swiglu_forward(d_gate.get(), d_up.get(), n, d_flat.get()).ok());
    ASSERT_TRUE(gpu()
                    .swiglu_forward(d_gate.get(), d_up.get(), n, d_out.get(), DType::kFloat32,
                                    RowAmaxes{d_amax.get(), s.cols})
                    .ok());
    const auto out = d_out.download();
    EXPECT_EQ(out, d_flat.download()) << "out by rows and flat";
    const auto amax = d_amax.download();
    ASSERT_EQ(amax, row_amaxes(out, s.rows, s.cols));
  }
}

// The backward by rows (with row amaxes of either gradient or both): the flat kernel's
// gradients bit for bit, and each row's amax of them.
TEST_F(CudaModelOpsTest, SwigluBackwardRowAmaxesAreTheRowwiseAmaxOfTheSameGradients) {
  struct Shape {
    int64_t rows, cols;
    size_t offset;
  };
  for (const Shape& s : {Shape{1, 1, 0}, Shape{3, 7, 0}, Shape{17, 256, 1}, Shape{5, 9001, 0}, Shape{2049, 44, 0}}) {
    SCOPED_TRACE(testing::Message() << "rows " << s.rows << " cols " << s.cols << " offset " << s.offset);
    const int64_t n = s.rows * s.cols;
    const auto gate = uniform(sz(n), 55, -12.0f, 12.0f), up = uniform(sz(n), 56), go = uniform(sz(n), 57, -3.0f, 3.0f);
    DeviceFloats d_gate(gate, s.offset), d_up(up, s.offset), d_go(go, s.offset);
    DeviceFloats d_flat_gg(nans(sz(n)), s.offset), d_flat_gu(nans(sz(n)), s.offset);
    ASSERT_TRUE(gpu().swiglu_backward(d_gate.get(), d_up.get(), d_go.get(), n, d_flat_gg.get(), d_flat_gu.get()).ok());
    const auto flat_gg = d_flat_gg.download(), flat_gu = d_flat_gu.download();
    for (const bool want_gate : {true, false}) {
      for (const bool want_up : {true, false}) {
        if (!want_gate && !want_up) continue;  // the flat kernel
        SCOPED_TRACE(testing::Message() << "gate " << want_gate << " up " << want_up);
        DeviceFloats d_gg(nans(sz(n)), s.offset), d_gu(nans(sz(n)), s.offset);
        DeviceFloats d_gate_amax(nans(sz(s.rows))), d_up_amax(nans(sz(s.rows)));
        ASSERT_TRUE(gpu()
                        .swiglu_backward(d_gate.get(), d_up.get(), d_go.get(), n, d_gg.get(), d_gu.get(),
                                         DType::kFloat32, RowAmaxes{want_gate ? d_gate_amax.get() : nullptr, s.cols},
                                         RowAmaxes{want_up ? d_up_amax.get() : nullptr, s.cols})
                        .ok());
        const auto gg = d_gg.download(), gu = d_gu.download();
        EXPECT_EQ(gg, flat_gg) << "grad_gate by rows and flat";
        EXPECT_EQ(gu, flat_gu) << "grad_up by rows and flat";
        const auto gate_amax = d_gate_amax.download(), up_amax = d_up_amax.download();
        for (int64_t r = 0; r < s.rows; ++r) {
          float want_g = 0.0f, want_u = 0.0f;
          for (int64_t j = 0; j < s.cols; ++j) {
            want_g = std::max(want_g, std::fabs(gg[sz(r * s.cols + j)]));
            want_u = std::max(want_u, std::fabs(gu[sz(r * s.cols + j)]));
          }
          if (want_gate) {
            ASSERT_EQ(gate_amax[sz(r)], want_g) << "grad_gate row " << r;
          }
          if (want_up) {
            ASSERT_EQ(up_amax[sz(r)], want_u) << "grad_up row " << r;
          }
        }
      }
    }
  }
}

TEST_F(CudaModelOpsTest, AddAndAccumulateAreBitIdenticalAlsoInPlace) {
  for (int64_t n : kElementwiseSizes) {
    for (size_t offset : {size_t{0}, size_t{1}}) {
      SCOPED_TRACE(testing::Message() << "n " << n << " offset " << offset);
      const auto a = uniform(sz(n), 60), b = uniform(sz(n), 61, -3.0f, 3.0f);
      std::vector<float> sum(sz(n)), acc = b;
      ASSERT_TRUE(cpu().add(a.data(), b.data(), n, sum.data()).ok());
      ASSERT_TRUE(cpu().accumulate(a.data(), n, acc.data()).ok());
      DeviceFloats d_a(a, offset), d_b(b, offset), d_out(nans(sz(n)), offset);
      ASSERT_TRUE(gpu().add(d_a.get(), d_b.get(), n, d_out.get()).ok());
      expect_bit_identical(d_out.download(), sum, "add");
      ASSERT_TRUE(gpu().add(d_a.get(), d_b.get(), n, d_a.get()).ok());  // out == a
      expect_bit_identical(d_a.download(), sum, "add into a");
      d_a.upload(a);
      ASSERT_TRUE(gpu().add(d_a.get(), d_b.get(), n, d_b.get()).ok());  // out == b
      expect_bit_identical(d_b.download(), sum, "add into b");
      d_b.upload(b);
      ASSERT_TRUE(gpu().accumulate(d_a.get(), n, d_b.get()).ok());
      expect_bit_identical(d_b.download(), acc, "accumulate");
    }
  }
}

// ---- loss --------------------------------------------------------------------------------------------

struct CrossEntropyCase {
  int64_t rows, vocab;
  size_t offset;
};

const CrossEntropyCase kCrossEntropyCases[] = {{1, 1, 0},      {7, 256, 0},   {300, 256, 0}, {300, 256, 1},
                                               {64, 32000, 0}, {33, 1001, 0}, {5, 3, 0}};

// Roughly one row in five ignored, a few targets repeated, and two rows of large logits
// (the max subtraction keeps them finite).
void make_loss_inputs(const CrossEntropyCase& c, std::vector<float>* logits, std::vector<int32_t>* targets) {
  *logits = uniform(sz(c.rows * c.vocab), 70, -5.0f, 5.0f);
  *targets = random_ids(sz(c.rows), c.vocab, 71);
  for (int64_t r = 0; r < c.rows; ++r) {
    if (r % 5 == 2) (*targets)[sz(r)] = kIgnoreTarget;
    if (r % 7 == 3) (*targets)[sz(r)] = 0;
  }
  for (int64_t r = 0; r < std::min<int64_t>(c.rows, 2); ++r) {
    for (int64_t j = 0; j < c.vocab; ++j) (*logits)[sz(r * c.vocab + j)] += 80.0f;
  }
}

void check_cross_entropy(ModelOps& gpu, const CrossEntropyCase& c, const std::vector<float>& logits,
                         const std::vector<int32_t>& gpu_targets, const std::vector<int32_t>& cpu_targets) {
  float want_loss = NAN;
  std::vector<float> want_lse(sz(c.rows));
  ASSERT_TRUE(
      cpu_model_ops()
          .cross_entropy_forward(logits.data(), cpu_targets.data(), c.rows, c.vocab, &want_loss, want_lse.data())
          .ok());
  const float grad_loss = 0.37f;
  std::vector<float> want_grad(logits.size());
  ASSERT_TRUE(cpu_model_ops()
                  .cross_entropy_backward(logits.data(), cpu_targets.data(), want_lse.data(), c.rows, c.vocab,
                                          grad_loss, want_grad.data())
                  .ok());
  int64_t counted = 0;
  for (int32_t t : cpu_targets) counted += t != kIgnoreTarget ? 1 : 0;
  const float scale = counted == 0 ? 0.0f : static_cast<float>(static_cast<double>(grad_loss) / counted);

  DeviceFloats d_logits(logits, c.offset), d_loss(nans(1)), d_lse(nans(sz(c.rows))),
      d_grad(nans(logits.size()), c.offset);
  DeviceInts d_targets(gpu_targets);
  std::vector<float> first_grad;
  float first_loss = NAN;
  for (int run = 0; run < 2; ++run) {
    ASSERT_TRUE(
        gpu.cross_entropy_forward(d_logits.get(), d_targets.get(), c.rows, c.vocab, d_loss.get(), d_lse.get()).ok());
    ASSERT_TRUE(gpu.cross_entropy_backward(d_logits.get(), d_targets.get(), d_lse.get(), c.rows, c.vocab, grad_loss,
                                           d_grad.get())
                    .ok());
    const float loss = d_loss.download()[0];
    const auto grad = d_grad.download();
    if (run == 1) {
      EXPECT_EQ(bits(loss), bits(first_loss)) << "loss, run twice";
      expect_bit_identical(grad, first_grad, "grad_logits, run twice");
      break;
    }
    first_loss = loss;
    first_grad = grad;
    if (counted == 0) {
      EXPECT_EQ(bits(loss), bits(0.0f)) << "all rows ignored";
    } else {
      EXPECT_LE(std::abs(static_cast<double>(loss) - want_loss), 1e-6 * std::abs(static_cast<double>(want_loss)))
          << "gpu " << loss << " cpu " << want_loss;
    }
    expect_relative(d_lse.download(), want_lse, 1e-6, 1.0, "lse");
    for (int64_t r = 0; r < c.rows; ++r) {
      const std::vector<float> g(grad.begin() + r * c.vocab, grad.begin() + (r + 1) * c.vocab);
      const std::vector<float> w(want_grad.begin() + r * c.vocab, want_grad.begin() + (r + 1) * c.vocab);
      if (cpu_targets[sz(r)] == kIgnoreTarget) {
        for (float x : g) ASSERT_EQ(bits(x), bits(0.0f)) << "ignored row " << r;
      } else {
        expect_relative(g, w, 1e-6, std::max(1e-30, static_cast<double>(scale)), "grad row " + std::to_string(r));
      }
    }
  }
}

TEST_F(CudaModelOpsTest, CrossEntropyMatchesTheCpuAndIsDeterministic) {
  for (const auto& c : kCrossEntropyCases) {
    SCOPED_TRACE(testing::Message() << "rows " << c.rows << " vocab " << c.vocab << " offset " << c.offset);
    std::vector<float> logits;
    std::vector<int32_t> targets;
    make_loss_inputs(c, &logits, &targets);
    check_cross_entropy(gpu(), c, logits, targets, targets);
  }
}

TEST_F(CudaModelOpsTest, CrossEntropyWithEveryRowIgnoredGivesZeroLossAndGradient) {
  const CrossEntropyCase c{9, 256, 0};
  std::vector<float> logits;
  std::vector<int32_t> targets;
  make_loss_inputs(c, &logits, &targets);
  std::fill(targets.begin(), targets.end(), kIgnoreTarget);
  check_cross_entropy(gpu(), c, logits, targets, targets);
}

// A target the host could not check counts as ignored: the same loss and gradient as
// with -1 in its place.
TEST_F(CudaModelOpsTest, CrossEntropyOutOfRangeTargetsCountAsIgnored) {
  const CrossEntropyCase c{40, 256, 0};
  std::vector<float> logits;
  std::vector<int32_t> targets;
  make_loss_inputs(c, &logits, &targets);
  auto bad = targets;
  bad[4] = 256;
  bad[11] = -2;
  bad[12] = INT32_MAX;
  bad[13] = INT32_MIN;
  auto as_ignored = bad;
  for (auto& t : as_ignored) t = t >= 0 && t < c.vocab ? t : kIgnoreTarget;
  check_cross_entropy(gpu(), c, logits, bad, as_ignored);
}

// Logits rows padded past the vocabulary (the model's vocabulary padding): the padding,
// however large, stays outside the softmax and gets a zero gradient, as on the CPU.
TEST_F(CudaModelOpsTest, CrossEntropyIgnoresThePaddingColumnsAsTheCpuDoes) {
  struct Padded {
    int64_t rows, vocab, padded;
  };
  for (const Padded& c : {Padded{7, 13, 16}, Padded{33, 1000, 1024}, Padded{9, 1001, 1024}}) {
    SCOPED_TRACE(testing::Message() << "vocab " << c.vocab << " padded " << c.padded);
    std::vector<float> logits = uniform(sz(c.rows * c.padded), 72, -5.0f, 5.0f);
    for (int64_t r = 0; r < c.rows; ++r) {
      for (int64_t j = c.vocab; j < c.padded; ++j) logits[sz(r * c.padded + j)] = 1e4f;
    }
    std::vector<int32_t> targets = random_ids(sz(c.rows), c.vocab, 73);
    targets[1] = kIgnoreTarget;
    float want_loss = NAN;
    std::vector<float> want_lse(sz(c.rows)), want_grad(logits.size());
    auto& cpu = cpu_model_ops();
    ASSERT_TRUE(cpu.cross_entropy_forward(logits.data(), targets.data(), c.rows, c.vocab, &want_loss, want_lse.data(),
                                          DType::kFloat32, c.padded)
                    .ok());
    ASSERT_TRUE(cpu.cross_entropy_backward(logits.data(), targets.data(), want_lse.data(), c.rows, c.vocab, 0.5f,
                                           want_grad.data(), DType::kFloat32, c.padded)
                    .ok());
    DeviceFloats d_logits(logits, 0), d_loss(nans(1)), d_lse(nans(sz(c.rows))), d_grad(nans(logits.size()), 0);
    DeviceInts d_targets(targets);
    ASSERT_TRUE(gpu().cross_entropy_forward(d_logits.get(), d_targets.get(), c.rows, c.vocab, d_loss.get(),
                                            d_lse.get(), DType::kFloat32, c.padded)
                    .ok());
    ASSERT_TRUE(gpu().cross_entropy_backward(d_logits.get(), d_targets.get(), d_lse.get(), c.rows, c.vocab, 0.5f,
                                             d_grad.get(), DType::kFloat32, c.padded)
                    .ok());
    const float loss = d_loss.download()[0];
    EXPECT_LE(std::abs(static_cast<double>(loss) - want_loss), 1e-6 * std::abs(static_cast<double>(want_loss)));
    expect_relative(d_lse.download(), want_lse, 1e-6, 1.0, "lse");
    const std::vector<float> grad = d_grad.download();
    for (int64_t r = 0; r < c.rows; ++r) {
      for (int64_t j = c.vocab; j < c.padded; ++j) ASSERT_EQ(bits(grad[sz(r * c.padded + j)]), bits(0.0f));
    }
    expect_relative(grad, want_grad, 1e-6, 0.5 / static_cast<double>(c.rows), "grad_logits");
  }
}

// ---- optimizer ---------------------------------------------------------------------------------------

TEST_F(CudaModelOpsTest, AdamWIsBitIdenticalOverSeveralSteps) {
  AdamWHyperparams custom;
  custom.lr = 3e-4f;
  custom.beta1 = 0.8f;
  custom.beta2 = 0.95f;
  custom.eps = 1e-6f;
  custom.weight_decay = 0.1f;
  custom.grad_scale = 1.0f / 13.0f;  // gradient clipping's factor
  for (const AdamWHyperparams& h : {AdamWHyperparams{}, custom}) {
    for (int64_t n : {int64_t{1}, int64_t{5}, int64_t{1000}, int64_t{4099}}) {
      for (size_t offset : {size_t{0}, size_t{1}}) {
        SCOPED_TRACE(testing::Message() << "lr " << h.lr << " n " << n << " offset " << offset);
        auto param = uniform(sz(n), 80), m = std::vector<float>(sz(n), 0.0f), v = m;
        DeviceFloats d_param(param, offset), d_m(m, offset), d_v(v, offset);
        for (int64_t step : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{100}}) {
          const auto grad = uniform(sz(n), static_cast<uint32_t>(81 + step));
          DeviceFloats d_grad(grad, offset);
          ASSERT_TRUE(cpu().adamw_step(h, step, param.data(), grad.data(), m.data(), v.data(), n).ok());
          ASSERT_TRUE(gpu().adamw_step(h, step, d_param.get(), d_grad.get(), d_m.get(), d_v.get(), n).ok());
          expect_bit_identical(d_param.download(), param, "param after step " + std::to_string(step));
          expect_bit_identical(d_m.download(), m, "m after step " + std::to_string(step));
          expect_bit_identical(d_v.download(), v, "v after step " + std::to_string(step));
        }
      }
    }
  }
}

// With row amaxes requested AdamW runs by rows: the flat kernel's states bit for bit, and
// each row's amax of the updated parameter.
TEST_F(CudaModelOpsTest, AdamWRowAmaxesAreThoseOfTheUpdatedParameter) {
  struct Shape {
    int64_t rows, cols;
    size_t offset;
  };
  AdamWHyperparams h;
  h.lr = 1e-2f;
  h.weight_decay = 0.1f;
  for (const Shape& s : {Shape{1, 1, 0}, Shape{3, 7, 0}, Shape{17, 256, 1}, Shape{5, 9001, 0}, Shape{2049, 44, 0}}) {
    SCOPED_TRACE(testing::Message() << "rows " << s.rows << " cols " << s.cols << " offset " << s.offset);
    const int64_t n = s.rows * s.cols;
    const auto param = uniform(sz(n), 83, -2.0f, 2.0f), grad = uniform(sz(n), 84);
    const std::vector<float> zeros(sz(n), 0.0f);
    DeviceFloats d_grad(grad, s.offset);
    DeviceFloats flat_p(param, s.offset), flat_m(zeros, s.offset), flat_v(zeros, s.offset);
    DeviceFloats rows_p(param, s.offset), rows_m(zeros, s.offset), rows_v(zeros, s.offset), amax(nans(sz(s.rows)));
    for (int64_t step = 1; step <= 2; ++step) {
      ASSERT_TRUE(gpu().adamw_step(h, step, flat_p.get(), d_grad.get(), flat_m.get(), flat_v.get(), n).ok());
      ASSERT_TRUE(gpu()
                      .adamw_step(h, step, rows_p.get(), d_grad.get(), rows_m.get(), rows_v.get(), n,
                                  RowAmaxes{amax.get(), s.cols})
                      .ok());
    }
    const auto p = rows_p.download();
    expect_bit_identical(p, flat_p.download(), "param by rows and flat");
    expect_bit_identical(rows_m.download(), flat_m.download(), "m by rows and flat");
    expect_bit_identical(rows_v.download(), flat_v.download(), "v by rows and flat");
    const auto got = amax.download();
    ASSERT_EQ(got, row_amaxes(p, s.rows, s.cols));
  }
}

// The decomposition depends on n alone: the same bits run twice, and whatever the
// alignment of x (the vector and scalar loads sum each group in the same order).
TEST_F(CudaModelOpsTest, SumOfSquaresMatchesTheCpuAndIsDeterministic) {
  for (int64_t n : kElementwiseSizes) {
    const auto x = uniform(sz(n), 90, -3.0f, 3.0f);
    auto want = cpu().sum_of_squares(x.data(), n);
    ASSERT_TRUE(want.ok());
    double aligned = 0.0;
    for (size_t offset : {size_t{0}, size_t{1}}) {
      SCOPED_TRACE(testing::Message() << "n " << n << " offset " << offset);
      DeviceFloats d_x(x, offset);
      auto got = gpu().sum_of_squares(d_x.get(), n);
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_LE(std::abs(*got - *want), 1e-12 * *want) << "gpu " << *got << " cpu " << *want;
      auto again = gpu().sum_of_squares(d_x.get(), n);
      ASSERT_TRUE(again.ok());
      EXPECT_EQ(std::bit_cast<uint64_t>(*again), std::bit_cast<uint64_t>(*got)) << "run twice";
      if (offset == 0) aligned = *got;
      EXPECT_EQ(std::bit_cast<uint64_t>(*got), std::bit_cast<uint64_t>(aligned)) << "misaligned x";
    }
  }
}

// The global grad norm's one host wait: the same doubles as one call per buffer, added in
// the same order (buffers of every size class, one misaligned).
TEST_F(CudaModelOpsTest, TotalSumOfSquaresEqualsThePerBufferSums) {
  std::vector<std::unique_ptr<DeviceFloats>> buffers;
  std::vector<FloatSpan> spans;
  double want = 0.0;
  uint32_t seed = 95;
  for (int64_t n : kElementwiseSizes) {
    const auto x = uniform(sz(n), seed++, -2.0f, 2.0f);
    buffers.push_back(std::make_unique<DeviceFloats>(x, spans.size() % 2));
    spans.push_back({buffers.back()->get(), n});
    auto one = gpu().sum_of_squares(buffers.back()->get(), n);
    ASSERT_TRUE(one.ok()) << one.status();
    want += *one;
  }
  auto got = gpu().total_sum_of_squares(spans);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(std::bit_cast<uint64_t>(*got), std::bit_cast<uint64_t>(want));
  auto none = gpu().total_sum_of_squares({});
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, 0.0);
}

// The grad norm queued without a return to the host: the same double in device memory, and
// the clipping factor the CPU computes from it; a non-finite gradient makes it NaN, and
// AdamW reading that factor then leaves its parameter as it was.
TEST_F(CudaModelOpsTest, QueuedGradNormMatchesTheReturnedOneAndSkipsAdamWWhenNotFinite) {
  std::vector<std::unique_ptr<DeviceFloats>> buffers;
  std::vector<FloatSpan> spans;
  uint32_t seed = 195;
  for (int64_t n : kElementwiseSizes) {
    buffers.push_back(std::make_unique<DeviceFloats>(uniform(sz(n), seed++, -2.0f, 2.0f), spans.size() % 2));
    spans.push_back({buffers.back()->get(), n});
  }
  auto total = gpu().total_sum_of_squares(spans);
  ASSERT_TRUE(total.ok()) << total.status();
  const double max_norm = std::sqrt(*total) / 3;
  DeviceFloats out(std::vector<float>(4, 0.0f));  // [0, 2): the double; [2]: the factor
  auto* sum = reinterpret_cast<double*>(out.get());
  ASSERT_TRUE(gpu().queue_grad_norm(spans, max_norm, sum, out.get() + 2).ok());
  const std::vector<float> got = out.download();
  double got_sum;
  std::memcpy(&got_sum, got.data(), sizeof got_sum);
  EXPECT_EQ(std::bit_cast<uint64_t>(got_sum), std::bit_cast<uint64_t>(*total));
  EXPECT_EQ(got[2], static_cast<float>(max_norm / std::sqrt(*total)));  // the norm is 3x the limit
  // FSDP's route: the factor from the (reduced) sum alone, the same bits.
  DeviceFloats factor(std::vector<float>{0.0f});
  ASSERT_TRUE(gpu().queue_clip_scale(sum, max_norm, factor.get()).ok());
  EXPECT_EQ(factor.download()[0], got[2]);

  // A gradient holding +inf: the factor is NaN, and AdamW reading it changes nothing.
  DeviceFloats diverged(std::vector<float>{1.0f, INFINITY, 2.0f});
  ASSERT_TRUE(gpu().queue_grad_norm({{diverged.get(), 3}}, 1.0, sum, out.get() + 2).ok());
  EXPECT_TRUE(std::isnan(out.download()[2]));
  const std::vector<float> start = uniform(64, 7, -1.0f, 1.0f);
  DeviceFloats param(start), grad(uniform(64, 8)), m(std::vector<float>(64, 0.0f)), v(std::vector<float>(64, 0.0f));
  AdamWHyperparams h;
  h.grad_scale_in = out.get() + 2;
  ASSERT_TRUE(gpu().adamw_step(h, 1, param.get(), grad.get(), m.get(), v.get(), 64).ok());
  EXPECT_EQ(param.download(), start);
}

// ---- determinism of the remaining ops -----------------------------------------------------------------

// The ops not already run twice above (the reductions are: embedding and RMSNorm backward,
// attention, cross-entropy, sum_of_squares), each twice on the same inputs: the same bits.
TEST_F(CudaModelOpsTest, EveryOtherOpRunTwiceGivesTheSameBits) {
  const int64_t rows = 129, dim = 260, n = rows * dim, vocab = 300;
  const auto x = uniform(sz(n), 110), y = uniform(sz(n), 111), w = uniform(sz(dim), 112);
  const auto ids = random_ids(sz(rows), vocab, 113);
  const auto table = uniform(sz(vocab * dim), 114);
  const RopeShape rope{3, 43, 13, 20};  // 3 * 43 * 13 * 20 == rows * dim
  ASSERT_EQ(rope_size(rope), sz(n));
  DeviceFloats d_x(x), d_y(y), d_w(w), d_table(table);
  DeviceInts d_ids(ids);
  // Each entry queues one op writing into `out` (and `out2`) from the inputs above.
  const std::vector<std::pair<std::string, std::function<absl::Status(float*, float*)>>> ops = {
      {"embedding_forward",
       [&](float* out, float*) { return gpu().embedding_forward(d_ids.get(), rows, d_table.get(), vocab, dim, out); }},
      {"rmsnorm_forward",
       [&](float* out, float* out2) {
         return gpu().rmsnorm_forward(d_x.get(), d_w.get(), rows, dim, 1e-5f, out, out2);
       }},
      {"rope_forward", [&](float* out, float*) { return gpu().rope_forward(rope, 10000.0, d_x.get(), out); }},
      {"rope_backward", [&](float* out, float*) { return gpu().rope_backward(rope, 10000.0, d_x.get(), out); }},
      {"swiglu_forward", [&](float* out, float*) { return gpu().swiglu_forward(d_x.get(), d_y.get(), n, out); }},
      {"swiglu_backward",
       [&](float* out, float* out2) { return gpu().swiglu_backward(d_x.get(), d_y.get(), d_x.get(), n, out, out2); }},
      {"add", [&](float* out, float*) { return gpu().add(d_x.get(), d_y.get(), n, out); }},
  };
  for (const auto& [name, op] : ops) {
    std::vector<float> first[2];
    for (int run = 0; run < 2; ++run) {
      DeviceFloats out(nans(sz(n))), out2(nans(sz(n)));
      ASSERT_TRUE(op(out.get(), out2.get()).ok()) << name;
      if (run == 0) {
        first[0] = out.download();
        first[1] = out2.download();
        continue;
      }
      expect_bit_identical(out.download(), first[0], name);
      expect_bit_identical(out2.download(), first[1], name + ", second output");
    }
  }
  // The in-place updates, each from the same starting state twice.
  AdamWHyperparams h;
  std::vector<float> first[3];
  for (int run = 0; run < 2; ++run) {
    DeviceFloats param(x), m(y), v(std::vector<float>(sz(n), 0.25f));
    ASSERT_TRUE(gpu().accumulate(d_y.get(), n, param.get()).ok());
    ASSERT_TRUE(gpu().adamw_step(h, 5, param.get(), d_x.get(), m.get(), v.get(), n).ok());
    const std::vector<float> got[3] = {param.download(), m.download(), v.download()};
    for (int i = 0; i < 3; ++i) {
      if (run == 0) {
        first[i] = got[i];
      } else {
        expect_bit_identical(got[i], first[i], "accumulate, adamw_step: state " + std::to_string(i));
      }
    }
  }
}

// ---- bad arguments -------------------------------------------------------------------------------------

// Calls every implementation rejects before touching memory, with the CPU's message; the
// CUDA-only limits come last.
struct BadCall {
  const char* message;  // a substring of the expected message
  std::function<absl::Status(ModelOps&, float* in, float* out, int32_t* ids)> call;
  bool cpu_rejects = true;
};

std::vector<BadCall> bad_calls() {
  const AttentionShape attn{1, 4, 4, 2, 8};
  const RopeShape rope{1, 4, 2, 8};
  AdamWHyperparams adam;
  AdamWHyperparams bad_beta2 = adam;
  bad_beta2.beta2 = 1.0f;
  return {
      {"embedding_forward: tokens is null",
       [](ModelOps& o, float* in, float* out, int32_t*) { return o.embedding_forward(nullptr, 4, in, 256, 8, out); }},
      {"embedding_backward: dim must be positive, got 0",
       [](ModelOps& o, float* in, float* out, int32_t* ids) { return o.embedding_backward(ids, 4, in, 256, 0, out); }},
      {"embedding_forward: shape [n=4, dim=4611686018427387904] is too large",
       [](ModelOps& o, float* in, float* out, int32_t* ids) {
         return o.embedding_forward(ids, 4, in, 256, int64_t{1} << 62, out);
       }},
      {"rmsnorm_forward: eps must be positive and finite, got 0",
       [](ModelOps& o, float* in, float* out, int32_t*) { return o.rmsnorm_forward(in, in, 2, 8, 0.0f, out, out); }},
      {"rmsnorm_backward: grad_weight is null",
       [](ModelOps& o, float* in, float* out, int32_t*) {
         return o.rmsnorm_backward(in, in, in, in, 2, 8, out, nullptr);
       }},
      {"rope_forward: head_dim must be even to rotate pairs, got 7",
       [](ModelOps& o, float* in, float* out, int32_t*) {
         return o.rope_forward({1, 4, 2, 7}, 10000.0, in, out);
       }},
      {"rope_backward: theta must be positive and finite, got -1",
       [=](ModelOps& o, float* in, float* out, int32_t*) { return o.rope_backward(rope, -1.0, in, out); }},
      {"attention_forward: n_heads (4) is not a multiple of n_kv_heads (3)",
       [](ModelOps& o, float* in, float* out, int32_t*) {
         return o.attention_forward({1, 4, 4, 3, 8}, in, in, in, out, out);
       }},
      {"attention_backward: grad_k is null",
       [=](ModelOps& o, float* in, float* out, int32_t*) {
         return o.attention_backward(attn, in, in, in, in, in, in, out, nullptr, out);
       }},
      {"kv_cache_attention_forward: the cache's 6 rows do not hold past + seq = 5 + 2 positions",
       [](ModelOps& o, float* in, float* out, int32_t*) {
         return o.kv_cache_attention_forward({1, 2, 5, 6, 4, 2, 8}, in, in, in, out);
       }},
      {"swiglu_forward: up is null",
       [](ModelOps& o, float* in, float* out, int32_t*) { return o.swiglu_forward(in, nullptr, 8, out); }},
      {"swiglu_backward: n must be positive, got 0",
       [](ModelOps& o, float* in, float* out, int32_t*) { return o.swiglu_backward(in, in, in, 0, out, out); }},
      {"add: out is null", [](ModelOps& o, float* in, float*, int32_t*) { return o.add(in, in, 8, nullptr); }},
      {"accumulate: n must be positive, got -1",
       [](ModelOps& o, float* in, float* out, int32_t*) { return o.accumulate(in, -1, out); }},
      {"cross_entropy_forward: loss is null",
       [](ModelOps& o, float* in, float* out, int32_t* ids) {
         return o.cross_entropy_forward(in, ids, 4, 8, nullptr, out);
       }},
      {"cross_entropy_backward: grad_loss must be finite, got nan",
       [](ModelOps& o, float* in, float* out, int32_t* ids) {
         return o.cross_entropy_backward(in, ids, in, 4, 8, NAN, out);
       }},
      {"adamw_step: step counts from 1, got 0",
       [=](ModelOps& o, float* in, float* out, int32_t*) { return o.adamw_step(adam, 0, out, in, out, out, 8); }},
      {"adamw_step: beta2 must be in [0, 1), got 1",
       [=](ModelOps& o, float* in, float* out, int32_t*) { return o.adamw_step(bad_beta2, 1, out, in, out, out, 8); }},
      {"sum_of_squares: x is null",
       [](ModelOps& o, float*, float*, int32_t*) { return o.sum_of_squares(nullptr, 8).status(); }},
      // CUDA-only limits.
      {"attention_forward: head_dim 512 exceeds the CUDA kernels' limit of 256",
       [](ModelOps& o, float* in, float* out, int32_t*) {
         return o.attention_forward({1, 2, 1, 1, 512}, in, in, in, out, out);
       },
       false},
      {"attention_backward: head_dim 272 exceeds the CUDA kernels' limit of 256",
       [](ModelOps& o, float* in, float* out, int32_t*) {
         return o.attention_backward({1, 2, 1, 1, 272}, in, in, in, in, in, in, out, out, out);
       },
       false},
      {"kv_cache_attention_forward: head_dim 512 exceeds the CUDA kernels' limit of 256",
       [](ModelOps& o, float* in, float* out, int32_t*) {
         return o.kv_cache_attention_forward({1, 1, 0, 2, 1, 1, 512}, in, in, in, out);
       },
       false},
      {"embedding_backward: n 4294967296 exceeds the CUDA kernels' limit of 4294967295 tokens",
       [](ModelOps& o, float* in, float* out, int32_t* ids) {
         return o.embedding_backward(ids, int64_t{1} << 32, in, 256, 1, out);
       },
       false},
  };
}

TEST_F(CudaModelOpsTest, BadCallsAreRejectedWithTheCpuMessageAndWriteNothing) {
  constexpr size_t kFloats = 4096;
  const std::vector<float> in_host = uniform(kFloats, 100);
  const std::vector<float> sentinel(kFloats, 42.0f);
  const std::vector<int32_t> ids_host = {1, 2, 3, 0};
  std::vector<float> cpu_in = in_host, cpu_out = sentinel;
  std::vector<int32_t> cpu_ids = ids_host;
  DeviceFloats d_in(in_host), d_out(sentinel);
  DeviceInts d_ids(ids_host);
  for (const auto& bad : bad_calls()) {
    SCOPED_TRACE(bad.message);
    const absl::Status s = bad.call(gpu(), d_in.get(), d_out.get(), d_ids.get());
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_TRUE(contains(s.message(), bad.message)) << s;
    if (bad.cpu_rejects) {
      const absl::Status c = bad.call(cpu(), cpu_in.data(), cpu_out.data(), cpu_ids.data());
      EXPECT_EQ(std::string(s.message()), std::string(c.message())) << "the CPU says: " << c;
    }
    expect_bit_identical(d_out.download(), sentinel, "a rejected call wrote its output");
    expect_bit_identical(d_in.download(), in_host, "a rejected call wrote its input");
  }
}

#endif  // FP8_HAVE_CUDA

}  // namespace
}  // namespace fp8::ops_test
