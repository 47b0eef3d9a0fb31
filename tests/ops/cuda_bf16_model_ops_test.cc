// The CUDA ModelOps with bf16 activations (DType::kBFloat16) against the CPU's bf16 path,
// op by op, on the shapes of cuda_model_ops_test.cc and on pointers at three alignments:
// 256 bytes (every vector path), 8 bytes (the 4-element accesses but not the 16-byte ones)
// and 2 bytes (element by element). Every op also runs twice: the same bits.
//
// Both sides compute in fp32 on the same widened inputs and round each stored bf16 once,
// so the tolerances are those of the fp32 comparison (cuda_model_ops_test.cc says why
// each is what it is), widened by rounding:
//  * bit-identical where the fp32 comparison is: embedding forward and backward (grad_table
//    is fp32, the widened rows added in the same order), add / accumulate, RoPE;
//  * elsewhere the fp32 tolerance plus one rounding: each GPU value must be the bf16
//    rounding of a value within the fp32 tolerance of the CPU's fp32 result on the same
//    widened inputs (expect_rounding_of_near), whose rounding is the CPU's bf16 path
//    (checked here too). Where two fp32 results within tolerance straddle a rounding
//    boundary they differ by one bf16 ulp, and nowhere else. fp32 outputs (inv_rms, lse,
//    the loss, grad_weight) keep the fp32 tolerances unchanged.
// The attention backward gets the CPU's forward outputs (out in bf16, lse), so that it is
// compared on identical inputs rather than through a forward output one ulp apart.
// Attention with head_dim 64 or 128 on 16-byte aligned pointers runs on the tensor cores
// (attention_tc_kernels.h): P and dS enter their products rounded to bf16, as in
// FlashAttention-2, so those cases are held to relative errors of bf16 products instead;
// on the SIMT kernels (one of the attention tests' parameters) every case takes the tight
// tolerances.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "fp8/model_ops.h"
#include "tests/ops/activation_calls.h"
#include "tests/ops/bf16_test_util.h"
#include "tests/ops/gradient_check.h"

#if defined(FP8_HAVE_CUDA)
#include "tests/ops/device_array.h"
#endif

namespace fp8::ops_test::bf16_ops {
namespace {

#if !defined(FP8_HAVE_CUDA)

TEST(CudaBf16ModelOps, NeedsACudaBuild) {
  GTEST_SKIP() << "this build has no CUDA (nvcc was not found at configure time)";
}

#else

constexpr DType kBf16 = DType::kBFloat16;

using DeviceBf16 = DeviceArray<uint16_t>;
using DeviceFloats = DeviceArray<float>;
using DeviceInts = DeviceArray<int32_t>;

// Offsets in elements into a 256-byte aligned allocation: 0, 4 (8 bytes of bf16) and 1.
constexpr size_t kOffsets[] = {0, 4, 1};

size_t sz(int64_t n) { return static_cast<size_t>(n); }
uint32_t bits(float x) { return std::bit_cast<uint32_t>(x); }

Bf16 bf16_uniform(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  return to_bf16(uniform(n, seed, lo, hi));
}

void expect_same_float_bits(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t mismatches = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (bits(got[i]) != bits(want[i]) && mismatches++ == 0) first = i;
  }
  EXPECT_EQ(mismatches, 0u) << what << ": " << mismatches << " of " << got.size() << " differ, first at " << first
                            << ": got " << got[first] << " want " << want[first];
}

// |got − want| <= ulps fp32 ulps of want (2^-23 |want| each), element by element.
void expect_float_within_ulps(const std::vector<float>& got, const std::vector<float>& want, int ulps,
                              const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    const double allowed = ulps * std::ldexp(std::abs(static_cast<double>(want[i])), -23);
    ASSERT_LE(std::abs(static_cast<double>(got[i]) - want[i]), allowed)
        << what << " at " << i << ": got " << got[i] << " want " << want[i];
  }
}

template <typename T>
std::vector<T> slice(const std::vector<T>& x, int64_t begin, int64_t len) {
  return std::vector<T>(x.begin() + begin, x.begin() + begin + len);
}

double max_abs(const std::vector<float>& x) {
  double m = 0.0;
  for (float v : x) m = std::max(m, std::abs(static_cast<double>(v)));
  return m;
}

// The CPU's bf16 path is its fp32 op on the widened inputs, rounded (bf16_activations_test
// pins it): checked again here, since the GPU is held to the fp32 result it rounds.
void expect_cpu_rounds(const Bf16& cpu_bf16, const std::vector<float>& cpu32, const std::string& what) {
  expect_same_bits(cpu_bf16, to_bf16(cpu32), what + ": the cpu's bf16 path is its rounded fp32 result");
}

class CudaBf16ModelOpsTest : public ::testing::Test {
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

// ---- embedding ---------------------------------------------------------------------------------

struct EmbeddingCase {
  int64_t vocab, dim, n;
  size_t offset;  // of the bf16 activations
};

const EmbeddingCase kEmbeddingCases[] = {
    {256, 64, 1000, 0}, {256, 64, 1000, 4}, {256, 64, 1000, 1},   {32000, 131, 517, 0},
    {7, 3, 5, 0},       {300, 4096, 40, 0}, {32000, 20, 2000, 4}, {1, 8, 3, 1},
};

TEST_F(CudaBf16ModelOpsTest, EmbeddingIsBitIdenticalBothWays) {
  for (const auto& c : kEmbeddingCases) {
    SCOPED_TRACE(testing::Message() << "vocab " << c.vocab << " dim " << c.dim << " n " << c.n << " offset "
                                    << c.offset);
    // A few ids take most positions, one more than 64 times (runs over several windows).
    auto ids = std::vector<int32_t>(sz(c.n));
    const auto draws = uniform(sz(c.n), 1, 0.0f, static_cast<float>(c.vocab));
    for (int64_t i = 0; i < c.n; ++i) {
      ids[sz(i)] = i % 3 == 0 ? static_cast<int32_t>((i / 3) % 4 % c.vocab)
                              : std::min(static_cast<int32_t>(draws[sz(i)]), static_cast<int32_t>(c.vocab - 1));
    }
    const auto table = uniform(sz(c.vocab * c.dim), 2);
    Bf16 want(sz(c.n * c.dim));
    ASSERT_TRUE(cpu().embedding_forward(ids.data(), c.n, table.data(), c.vocab, c.dim, want.data(), kBf16).ok());
    DeviceInts d_ids(ids);
    DeviceFloats d_table(table);
    for (int run = 0; run < 2; ++run) {
      DeviceBf16 d_out(bf16_nans(sz(c.n * c.dim)), c.offset);
      ASSERT_TRUE(gpu().embedding_forward(d_ids.get(), c.n, d_table.get(), c.vocab, c.dim, d_out.get(), kBf16).ok());
      expect_same_bits(d_out.download(), want, "out, run " + std::to_string(run));
    }

    const auto grad_out = bf16_uniform(sz(c.n * c.dim), 4);
    const auto prior = uniform(sz(c.vocab * c.dim), 5);  // the backward adds onto it
    auto want_table = prior;
    ASSERT_TRUE(
        cpu().embedding_backward(ids.data(), c.n, grad_out.data(), c.vocab, c.dim, want_table.data(), kBf16).ok());
    DeviceBf16 d_grad_out(grad_out, c.offset);
    for (int run = 0; run < 2; ++run) {
      DeviceFloats d_grad_table(prior);
      ASSERT_TRUE(
          gpu().embedding_backward(d_ids.get(), c.n, d_grad_out.get(), c.vocab, c.dim, d_grad_table.get(), kBf16).ok());
      expect_same_float_bits(d_grad_table.download(), want_table, "grad_table, run " + std::to_string(run));
    }
  }
}

// ---- RMSNorm -------------------------------------------------------------------------------------

struct RmsCase {
  int64_t rows, dim;
  size_t offset;
};

const RmsCase kRmsCases[] = {{1, 1, 0},      {3, 7, 0},    {257, 64, 0}, {257, 64, 4},  {257, 64, 1},
                             {100, 4096, 0}, {33, 130, 0}, {5, 9001, 0}, {1501, 36, 0}, {601, 256, 4}};

TEST_F(CudaBf16ModelOpsTest, RmsNormMatchesTheCpu) {
  for (const auto& c : kRmsCases) {
    SCOPED_TRACE(testing::Message() << "rows " << c.rows << " dim " << c.dim << " offset " << c.offset);
    const size_t n = sz(c.rows * c.dim);
    const auto x = bf16_uniform(n, 10, -2.0f, 2.0f), g = bf16_uniform(n, 11);
    const auto w = uniform(sz(c.dim), 12, 0.5f, 1.5f);
    Bf16 want(n);
    std::vector<float> inv(sz(c.rows)), want32(n), inv32(sz(c.rows));
    ASSERT_TRUE(cpu().rmsnorm_forward(x.data(), w.data(), c.rows, c.dim, 1e-5f, want.data(), inv.data(), kBf16).ok());
    const auto xw = widen(x), gw = widen(g);
    ASSERT_TRUE(cpu().rmsnorm_forward(xw.data(), w.data(), c.rows, c.dim, 1e-5f, want32.data(), inv32.data()).ok());
    expect_cpu_rounds(want, want32, "out");
    expect_same_float_bits(inv, inv32, "the cpu's inv_rms, bf16 and fp32 paths");
    DeviceBf16 d_x(x, c.offset), d_g(g, c.offset);
    DeviceFloats d_w(w);
    Bf16 first_out;
    std::vector<float> first_inv;
    for (int run = 0; run < 2; ++run) {
      DeviceBf16 d_out(bf16_nans(n), c.offset);
      DeviceFloats d_inv(nans(sz(c.rows)));
      ASSERT_TRUE(
          gpu().rmsnorm_forward(d_x.get(), d_w.get(), c.rows, c.dim, 1e-5f, d_out.get(), d_inv.get(), kBf16).ok());
      if (run == 0) {
        first_out = d_out.download();
        first_inv = d_inv.download();
        continue;
      }
      expect_same_bits(d_out.download(), first_out, "out, run twice");
      expect_same_float_bits(d_inv.download(), first_inv, "inv_rms, run twice");
    }
    expect_float_within_ulps(first_inv, inv, 4, "inv_rms");
    expect_rounding_of_near(first_out, want32, 4 * std::ldexp(1.0, -23), 0.0, "out");

    // Backward, from the CPU's inv_rms so that both sides see the same inputs.
    const auto prior = uniform(sz(c.dim), 15);
    Bf16 want_dx(n);
    auto want_dw = prior;
    ASSERT_TRUE(cpu()
                    .rmsnorm_backward(x.data(), w.data(), inv.data(), g.data(), c.rows, c.dim, want_dx.data(),
                                      want_dw.data(), kBf16)
                    .ok());
    std::vector<float> want_dx32(n), scratch_dw = prior;
    ASSERT_TRUE(cpu()
                    .rmsnorm_backward(xw.data(), w.data(), inv.data(), gw.data(), c.rows, c.dim, want_dx32.data(),
                                      scratch_dw.data())
                    .ok());
    expect_cpu_rounds(want_dx, want_dx32, "grad_x");
    std::vector<double> exact(prior.begin(), prior.end()), magnitude(sz(c.dim));
    for (int64_t r = 0; r < c.rows; ++r) {
      for (int64_t j = 0; j < c.dim; ++j) {
        const double term = static_cast<double>(gw[sz(r * c.dim + j)]) * xw[sz(r * c.dim + j)] * inv[sz(r)];
        exact[sz(j)] += term;
        magnitude[sz(j)] += std::abs(term);
      }
    }
    DeviceFloats d_inv(inv);
    Bf16 first_dx;
    std::vector<float> first_dw;
    for (int run = 0; run < 2; ++run) {
      DeviceBf16 d_dx(bf16_nans(n), c.offset);
      DeviceFloats d_dw(prior);
      ASSERT_TRUE(gpu()
                      .rmsnorm_backward(d_x.get(), d_w.get(), d_inv.get(), d_g.get(), c.rows, c.dim, d_dx.get(),
                                        d_dw.get(), kBf16)
                      .ok());
      if (run == 0) {
        first_dx = d_dx.download();
        first_dw = d_dw.download();
        continue;
      }
      expect_same_bits(d_dx.download(), first_dx, "grad_x, run twice");
      expect_same_float_bits(d_dw.download(), first_dw, "grad_weight, run twice");
    }
    for (int64_t r = 0; r < c.rows; ++r) {
      const auto want_row = slice(want_dx32, r * c.dim, c.dim);
      expect_rounding_of_near(slice(first_dx, r * c.dim, c.dim), want_row, 1e-6, std::max(1.0, max_abs(want_row)),
                              "grad_x row " + std::to_string(r));
    }
    for (int64_t j = 0; j < c.dim; ++j) {
      const double bound = std::abs(static_cast<double>(prior[sz(j)])) + magnitude[sz(j)];
      ASSERT_LE(std::abs(first_dw[sz(j)] - exact[sz(j)]), 2e-6 * bound) << "grad_weight " << j << " vs exact";
      ASSERT_LE(std::abs(first_dw[sz(j)] - want_dw[sz(j)]), 1e-4 * bound) << "grad_weight " << j << " vs cpu";
    }

    // Store::kAccumulate: the fp32 gradient added to the widened prior, rounded once.
    const Bf16 prior_dx = to_bf16(uniform(n, 16, -2.0f, 2.0f));
    const auto prior_wide = widen(prior_dx);
    std::vector<float> want_sum32(n);
    for (size_t i = 0; i < n; ++i) want_sum32[i] = prior_wide[i] + want_dx32[i];
    DeviceBf16 d_sum(prior_dx, c.offset);
    DeviceFloats d_dw(prior);
    ASSERT_TRUE(gpu()
                    .rmsnorm_backward(d_x.get(), d_w.get(), d_inv.get(), d_g.get(), c.rows, c.dim, d_sum.get(),
                                      d_dw.get(), kBf16, Store::kAccumulate)
                    .ok());
    const Bf16 sum = d_sum.download();
    for (int64_t r = 0; r < c.rows; ++r) {
      const auto want_row = slice(want_sum32, r * c.dim, c.dim);
      expect_rounding_of_near(slice(sum, r * c.dim, c.dim), want_row, 1e-6, std::max(1.0, max_abs(want_row)),
                              "accumulated grad_x row " + std::to_string(r));
    }

    // grad_x_row_amax: each row's amax of the bf16 grad_x as stored, grad_x as without it.
    DeviceBf16 d_again(prior_dx, c.offset);
    DeviceFloats d_dw2(prior), d_amax(nans(sz(c.rows)));
    ASSERT_TRUE(gpu()
                    .rmsnorm_backward(d_x.get(), d_w.get(), d_inv.get(), d_g.get(), c.rows, c.dim, d_again.get(),
                                      d_dw2.get(), kBf16, Store::kAccumulate, d_amax.get())
                    .ok());
    const Bf16 again = d_again.download();
    expect_same_bits(again, sum, "accumulated grad_x with grad_x_row_amax");
    const auto wide = widen(again);
    const auto amax = d_amax.download();
    ASSERT_EQ(amax, row_amaxes(wide, c.rows, c.dim));
  }
}

// ---- RoPE ------------------------------------------------------------------------------------------

struct RopeCase {
  RopeShape shape;
  double theta;
  size_t offset;
};

const RopeCase kRopeCases[] = {
    {{2, 17, 3, 16}, 10000.0, 0},   {{2, 17, 3, 16}, 10000.0, 4},  {{2, 17, 3, 16}, 10000.0, 1},
    {{1, 100, 4, 64}, 500000.0, 0}, {{3, 33, 2, 128}, 10000.0, 0}, {{1, 5, 1, 2}, 10000.0, 0},
    {{2, 7, 3, 6}, 10000.0, 4},
};


// row_amax is the rowwise amax of the bf16 output as stored, and asking for it leaves out
// and inv_rms as they are without it.
TEST_F(CudaBf16ModelOpsTest, RmsNormRowAmaxIsTheRowwiseAmaxOfItsRoundedOutput) {
  for (const auto& c : kRmsCases) {
    SCOPED_TRACE(testing::Message() << "rows " << c.rows << " dim " << c.dim << " offset " << c.offset);
    const size_t n = sz(c.rows * c.dim);
    const auto x = bf16_uniform(n, 16, -2.0f, 2.0f);
    const auto w = uniform(sz(c.dim), 17, -1.5f, 1.5f);
    DeviceBf16 d_x(x, c.offset), d_out(bf16_nans(n), c.offset), d_plain(bf16_nans(n), c.offset);
    DeviceFloats d_w(w), d_inv(nans(sz(c.rows))), d_plain_inv(nans(sz(c.rows))), d_amax(nans(sz(c.rows)));
    ASSERT_TRUE(gpu()
                    .rmsnorm_forward(d_x.get(), d_w.get(), c.rows, c.dim, 1e-5f, d_plain.get(), d_plain_inv.get(),
                                     kBf16)
                    .ok());
    ASSERT_TRUE(gpu()
                    .rmsnorm_forward(d_x.get(), d_w.get(), c.rows, c.dim, 1e-5f, d_out.get(), d_inv.get(), kBf16,
                                     d_amax.get())
                    .ok());
    const Bf16 out = d_out.download();
    expect_same_bits(out, d_plain.download(), "out with and without row_amax");
    expect_same_float_bits(d_inv.download(), d_plain_inv.download(), "inv_rms with and without row_amax");
    const auto wide = widen(out);
    const auto amax = d_amax.download();
    ASSERT_EQ(amax, row_amaxes(wide, c.rows, c.dim));
  }
}
TEST_F(CudaBf16ModelOpsTest, RopeIsBitIdenticalForwardBackwardAndInPlace) {
  for (const auto& c : kRopeCases) {
    const RopeShape& s = c.shape;
    SCOPED_TRACE(testing::Message() << "shape [" << s.batch << ", " << s.seq << ", " << s.heads << ", " << s.head_dim
                                    << "] offset " << c.offset);
    const size_t n = sz(s.batch * s.seq * s.heads * s.head_dim);
    const auto x = bf16_uniform(n, 20, -3.0f, 3.0f);
    Bf16 want_fwd(n), want_bwd(n);
    ASSERT_TRUE(cpu().rope_forward(s, c.theta, x.data(), want_fwd.data(), kBf16).ok());
    ASSERT_TRUE(cpu().rope_backward(s, c.theta, x.data(), want_bwd.data(), kBf16).ok());
    DeviceBf16 d_x(x, c.offset);
    for (int run = 0; run < 2; ++run) {
      DeviceBf16 d_out(bf16_nans(n), c.offset);
      ASSERT_TRUE(gpu().rope_forward(s, c.theta, d_x.get(), d_out.get(), kBf16).ok());
      expect_same_bits(d_out.download(), want_fwd, "forward, run " + std::to_string(run));
      ASSERT_TRUE(gpu().rope_backward(s, c.theta, d_x.get(), d_out.get(), kBf16).ok());
      expect_same_bits(d_out.download(), want_bwd, "backward, run " + std::to_string(run));
    }
    ASSERT_TRUE(gpu().rope_forward(s, c.theta, d_x.get(), d_x.get(), kBf16).ok());
    expect_same_bits(d_x.download(), want_fwd, "forward in place");
    d_x.upload(x);
    ASSERT_TRUE(gpu().rope_backward(s, c.theta, d_x.get(), d_x.get(), kBf16).ok());
    expect_same_bits(d_x.download(), want_bwd, "backward in place");
  }
}

// The backward with the rows' amaxes: the CPU's bf16 gradient bit for bit, in place too,
// and each row's amax of it as stored.
TEST_F(CudaBf16ModelOpsTest, RopeBackwardRowAmaxesAreTheRowwiseAmaxOfTheRoundedGradient) {
  for (const auto& c : kRopeCases) {
    const RopeShape& s = c.shape;
    SCOPED_TRACE(testing::Message() << "shape [" << s.batch << ", " << s.seq << ", " << s.heads << ", " << s.head_dim
                                    << "] offset " << c.offset);
    const int64_t rows = s.batch * s.seq, cols = s.heads * s.head_dim;
    const size_t n = sz(rows * cols);
    const auto g = bf16_uniform(n, 22, -3.0f, 3.0f);
    Bf16 want(n);
    ASSERT_TRUE(cpu().rope_backward(s, c.theta, g.data(), want.data(), kBf16).ok());
    const auto wide = widen(want);
    DeviceBf16 d_g(g, c.offset), d_out(bf16_nans(n), c.offset);
    DeviceFloats d_amax(nans(sz(rows)));
    for (const bool in_place : {false, true}) {
      auto* dst = in_place ? d_g.get() : d_out.get();
      ASSERT_TRUE(gpu().rope_backward(s, c.theta, d_g.get(), dst, kBf16, d_amax.get()).ok());
      expect_same_bits(in_place ? d_g.download() : d_out.download(), want, in_place ? "in place" : "out of place");
      const auto amax = d_amax.download();
      ASSERT_EQ(amax, row_amaxes(wide, rows, cols));
    }
  }
}

// ---- attention -----------------------------------------------------------------------------------------

struct AttentionCase {
  AttentionShape shape;  // batch, seq, n_heads, n_kv_heads, head_dim
  size_t offset;
};

const AttentionCase kAttentionCases[] = {
    {{1, 1, 1, 1, 16}, 0},   {{2, 37, 4, 4, 16}, 0},  {{2, 37, 4, 4, 16}, 4}, {{1, 130, 4, 2, 64}, 0},
    {{1, 130, 4, 2, 64}, 1}, {{2, 67, 8, 2, 128}, 0}, {{1, 45, 2, 2, 40}, 0}, {{1, 33, 2, 1, 256}, 0},
};

// ‖got − want‖ / ‖want‖ over bf16 values against an fp32 reference.
double relative_l2(const Bf16& got, const std::vector<float>& want) {
  double err = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = static_cast<double>(bf16_to_float(got[i])) - want[i];
    err += d * d;
    norm += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(err / std::max(norm, 1e-30));
}

// The attention tests run on every choice of kernels: the default (wgmma on sm_90, else
// mma.sync), mma.sync everywhere, and the SIMT kernels for every call (tight tolerances
// for every head_dim).
class CudaBf16AttentionTest : public CudaBf16ModelOpsTest,
                              public ::testing::WithParamInterface<CudaModelOpsOptions::Attention> {
 protected:
  void SetUp() override {
    CudaModelOpsOptions options;
    options.attention = GetParam();
    auto ops = make_cuda_model_ops(0, nullptr, options);
    if (!ops.ok()) GTEST_SKIP() << "no CUDA GPU, nothing to run the CUDA model ops on: " << ops.status().message();
    ops_ = std::move(*ops);
  }
  bool simt() const { return GetParam() == CudaModelOpsOptions::Attention::kSimt; }
};

INSTANTIATE_TEST_SUITE_P(Kernels, CudaBf16AttentionTest,
                         ::testing::Values(CudaModelOpsOptions::Attention::kTensorCores,
                                           CudaModelOpsOptions::Attention::kMma,
                                           CudaModelOpsOptions::Attention::kSimt),
                         [](const ::testing::TestParamInfo<CudaModelOpsOptions::Attention>& info) {
                           switch (info.param) {
                             case CudaModelOpsOptions::Attention::kMma:
                               return std::string("mma");
                             case CudaModelOpsOptions::Attention::kSimt:
                               return std::string("simt");
                             case CudaModelOpsOptions::Attention::kTensorCores:
                               break;
                           }
                           return std::string("tensor_cores");
                         });

// out_row_amax, from the tensor-core kernel's blocks (one per head, combined by atomicMax)
// or the SIMT kernels and an amax pass: out as without it, and each token's amax of it
// over all heads as stored. Twice, to see the zeroing of the buffer between calls.
TEST_P(CudaBf16AttentionTest, OutRowAmaxesAreTheRowwiseAmaxOfTheSameOut) {
  for (const auto& c : kAttentionCases) {
    const AttentionShape& s = c.shape;
    SCOPED_TRACE(testing::Message() << "batch " << s.batch << " seq " << s.seq << " heads " << s.n_heads << "/"
                                    << s.n_kv_heads << " head_dim " << s.head_dim << " offset " << c.offset);
    const int64_t rows = s.batch * s.seq, cols = s.n_heads * s.head_dim;
    const size_t qn = sz(rows * cols), kvn = sz(s.batch * s.seq * s.n_kv_heads * s.head_dim);
    const size_t ln = sz(s.batch * s.n_heads * s.seq);
    DeviceFloats d_lse(nans(ln)), d_amax(nans(sz(rows)));
    for (int run = 0; run < 2; ++run) {
      const uint32_t seed = 47 + 3 * static_cast<uint32_t>(run);
      const auto q = bf16_uniform(qn, seed, -2.0f, 2.0f), k = bf16_uniform(kvn, seed + 1, -2.0f, 2.0f);
      const auto v = bf16_uniform(kvn, seed + 2, -3.0f * static_cast<float>(1 - run), 1.0f);
      DeviceBf16 d_q(q, c.offset), d_k(k, c.offset), d_v(v, c.offset);
      DeviceBf16 d_plain(bf16_nans(qn), c.offset), d_out(bf16_nans(qn), c.offset);
      ASSERT_TRUE(gpu().attention_forward(s, d_q.get(), d_k.get(), d_v.get(), d_plain.get(), d_lse.get(), kBf16).ok());
      ASSERT_TRUE(
          gpu().attention_forward(s, d_q.get(), d_k.get(), d_v.get(), d_out.get(), d_lse.get(), kBf16, d_amax.get())
              .ok());
      const Bf16 out = d_out.download();
      expect_same_bits(out, d_plain.download(), "out with and without out_row_amax, run " + std::to_string(run));
      const auto wide = widen(out);
      const auto amax = d_amax.download();
      ASSERT_EQ(amax, row_amaxes(wide, rows, cols));
    }
  }
}

TEST_P(CudaBf16AttentionTest, MatchesTheCpuAndIsDeterministic) {
  for (const auto& c : kAttentionCases) {
    const AttentionShape& s = c.shape;
    const bool tensor_cores =
        (s.head_dim == 64 || s.head_dim == 128) && c.offset == 0 && !simt();
    SCOPED_TRACE(testing::Message() << "batch " << s.batch << " seq " << s.seq << " heads " << s.n_heads << "/"
                                    << s.n_kv_heads << " head_dim " << s.head_dim << " offset " << c.offset);
    const size_t qn = sz(s.batch * s.seq * s.n_heads * s.head_dim);
    const size_t kvn = sz(s.batch * s.seq * s.n_kv_heads * s.head_dim);
    const size_t ln = sz(s.batch * s.n_heads * s.seq);
    const auto q = bf16_uniform(qn, 40, -2.0f, 2.0f), k = bf16_uniform(kvn, 41, -2.0f, 2.0f);
    const auto v = bf16_uniform(kvn, 42), go = bf16_uniform(qn, 43);
    Bf16 out(qn), gq(qn), gk(kvn), gv(kvn);
    std::vector<float> lse(ln);
    ASSERT_TRUE(cpu().attention_forward(s, q.data(), k.data(), v.data(), out.data(), lse.data(), kBf16).ok());
    ASSERT_TRUE(cpu()
                    .attention_backward(s, q.data(), k.data(), v.data(), out.data(), lse.data(), go.data(), gq.data(),
                                        gk.data(), gv.data(), kBf16)
                    .ok());
    // The fp32 results the bf16 ones round: the backward from the bf16 out, widened.
    const auto qw = widen(q), kw = widen(k), vw = widen(v), gow = widen(go), outw = widen(out);
    std::vector<float> out32(qn), lse32(ln), gq32(qn), gk32(kvn), gv32(kvn);
    ASSERT_TRUE(cpu().attention_forward(s, qw.data(), kw.data(), vw.data(), out32.data(), lse32.data()).ok());
    ASSERT_TRUE(cpu()
                    .attention_backward(s, qw.data(), kw.data(), vw.data(), outw.data(), lse.data(), gow.data(),
                                        gq32.data(), gk32.data(), gv32.data())
                    .ok());
    expect_cpu_rounds(out, out32, "out");
    expect_cpu_rounds(gq, gq32, "grad_q");
    expect_cpu_rounds(gk, gk32, "grad_k");
    expect_cpu_rounds(gv, gv32, "grad_v");
    DeviceBf16 d_q(q, c.offset), d_k(k, c.offset), d_v(v, c.offset), d_go(go, c.offset);
    DeviceBf16 d_cpu_out(out, c.offset);
    DeviceFloats d_cpu_lse(lse);
    std::vector<Bf16> first;
    std::vector<float> first_lse;
    for (int run = 0; run < 2; ++run) {
      DeviceBf16 d_out(bf16_nans(qn), c.offset), d_gq(bf16_nans(qn), c.offset), d_gk(bf16_nans(kvn), c.offset),
          d_gv(bf16_nans(kvn), c.offset);
      DeviceFloats d_lse(nans(ln));
      ASSERT_TRUE(gpu().attention_forward(s, d_q.get(), d_k.get(), d_v.get(), d_out.get(), d_lse.get(), kBf16).ok());
      ASSERT_TRUE(gpu()
                      .attention_backward(s, d_q.get(), d_k.get(), d_v.get(), d_cpu_out.get(), d_cpu_lse.get(),
                                          d_go.get(), d_gq.get(), d_gk.get(), d_gv.get(), kBf16)
                      .ok());
      std::vector<Bf16> got = {d_out.download(), d_gq.download(), d_gk.download(), d_gv.download()};
      const std::vector<float> got_lse = d_lse.download();
      if (run == 1) {
        const char* names[] = {"out", "grad_q", "grad_k", "grad_v"};
        for (size_t i = 0; i < got.size(); ++i) expect_same_bits(got[i], first[i], std::string(names[i]) + " twice");
        expect_same_float_bits(got_lse, first_lse, "lse twice");
        continue;
      }
      if (tensor_cores) {
        // bf16 P (and dS) in the products: ~2^-9 relative per term, averaging out over a
        // row. Measured in CPU emulation of the kernels against an fp64 reference: out
        // 1.8e-3, grads 2-3e-3, lse 1e-4 relative (max abs 1.2e-3 at |lse| ~8).
        EXPECT_LT(relative_l2(got[0], out32), 1e-2) << "out (tensor cores)";
        EXPECT_LT(scaled_max_error(got_lse, to_double(lse)), 3e-3) << "lse (tensor cores)";
        EXPECT_LT(relative_l2(got[1], gq32), 1.5e-2) << "grad_q (tensor cores)";
        EXPECT_LT(relative_l2(got[2], gk32), 1.5e-2) << "grad_k (tensor cores)";
        EXPECT_LT(relative_l2(got[3], gv32), 1.5e-2) << "grad_v (tensor cores)";
      } else {
        expect_rounding_of_near(got[0], out32, 1e-5, std::max(1.0, max_abs(out32)), "out");
        EXPECT_LT(scaled_max_error(got_lse, to_double(lse)), 1e-5) << "lse";
        expect_rounding_of_near(got[1], gq32, 2e-5, std::max(1.0, max_abs(gq32)), "grad_q");
        expect_rounding_of_near(got[2], gk32, 2e-5, std::max(1.0, max_abs(gk32)), "grad_k");
        expect_rounding_of_near(got[3], gv32, 2e-5, std::max(1.0, max_abs(gv32)), "grad_v");
      }
      first = std::move(got);
      first_lse = got_lse;
    }
  }
}

// ---- SwiGLU and the residual ops ----------------------------------------------------------------------

const int64_t kElementwiseSizes[] = {1, 3, 7, 8, 9, 1000, 4097, (int64_t{1} << 20) + 3};

TEST_F(CudaBf16ModelOpsTest, SwigluMatchesTheCpu) {
  for (int64_t n : kElementwiseSizes) {
    for (size_t offset : kOffsets) {
      SCOPED_TRACE(testing::Message() << "n " << n << " offset " << offset);
      const auto gate = bf16_uniform(sz(n), 50, -12.0f, 12.0f), up = bf16_uniform(sz(n), 51);
      const auto go = bf16_uniform(sz(n), 52);
      Bf16 out(sz(n)), gg(sz(n)), gu(sz(n));
      ASSERT_TRUE(cpu().swiglu_forward(gate.data(), up.data(), n, out.data(), kBf16).ok());
      ASSERT_TRUE(cpu().swiglu_backward(gate.data(), up.data(), go.data(), n, gg.data(), gu.data(), kBf16).ok());
      const auto gate_w = widen(gate), up_w = widen(up), go_w = widen(go);
      std::vector<float> out32(sz(n)), gg32(sz(n)), gu32(sz(n));
      ASSERT_TRUE(cpu().swiglu_forward(gate_w.data(), up_w.data(), n, out32.data()).ok());
      ASSERT_TRUE(cpu().swiglu_backward(gate_w.data(), up_w.data(), go_w.data(), n, gg32.data(), gu32.data()).ok());
      expect_cpu_rounds(out, out32, "out");
      expect_cpu_rounds(gg, gg32, "grad_gate");
      expect_cpu_rounds(gu, gu32, "grad_up");
      DeviceBf16 d_gate(gate, offset), d_up(up, offset), d_go(go, offset);
      Bf16 first[3];
      for (int run = 0; run < 2; ++run) {
        DeviceBf16 d_out(bf16_nans(sz(n)), offset), d_gg(bf16_nans(sz(n)), offset), d_gu(bf16_nans(sz(n)), offset);
        ASSERT_TRUE(gpu().swiglu_forward(d_gate.get(), d_up.get(), n, d_out.get(), kBf16).ok());
        ASSERT_TRUE(gpu().swiglu_backward(d_gate.get(), d_up.get(), d_go.get(), n, d_gg.get(), d_gu.get(), kBf16).ok());
        const Bf16 got[3] = {d_out.download(), d_gg.download(), d_gu.download()};
        if (run == 1) {
          for (int i = 0; i < 3; ++i) expect_same_bits(got[i], first[i], "run twice, output " + std::to_string(i));
          continue;
        }
        expect_rounding_of_near(got[0], out32, 1e-6, 1.0, "out");
        expect_rounding_of_near(got[1], gg32, 4e-6, 1.0, "grad_gate");
        expect_rounding_of_near(got[2], gu32, 1e-6, 1.0, "grad_up");
        for (int i = 0; i < 3; ++i) first[i] = got[i];
      }
    }
  }
}


// The bf16 SwiGLU by rows (with row amaxes) stores the very bits of the flat kernel, and
// each row's amax of them.
TEST_F(CudaBf16ModelOpsTest, SwigluRowAmaxesAreTheRowwiseAmaxOfTheSameRoundedOutput) {
  struct Shape {
    int64_t rows, cols;
    size_t offset;
  };
  for (const Shape& s : {Shape{1, 1, 0}, Shape{3, 7, 0}, Shape{17, 256, 0}, Shape{17, 256, 1}, Shape{5, 9001, 0},
                         Shape{2049, 44, 0}}) {
    SCOPED_TRACE(testing::Message() << "rows " << s.rows << " cols " << s.cols << " offset " << s.offset);
    const size_t n = sz(s.rows * s.cols);
    const auto gate = bf16_uniform(n, 53, -12.0f, 12.0f), up = bf16_uniform(n, 54);
    DeviceBf16 d_gate(gate, s.offset), d_up(up, s.offset), d_flat(bf16_nans(n), s.offset),
        d_out(bf16_nans(n), s.offset);
    DeviceFloats d_amax(nans(sz(s.rows)));
    const auto total = static_cast<int64_t>(n);
    ASSERT_TRUE(gpu().swiglu_forward(d_gate.get(), d_up.get(), total, d_flat.get(), kBf16).ok());
    ASSERT_TRUE(
        gpu().swiglu_forward(d_gate.get(), d_up.get(), total, d_out.get(), kBf16, RowAmaxes{d_amax.get(), s.cols}).ok());
    const Bf16 out = d_out.download();
    expect_same_bits(out, d_flat.download(), "out by rows and flat");
    const auto wide = widen(out);
    const auto amax = d_amax.download();
    ASSERT_EQ(amax, row_amaxes(wide, s.rows, s.cols));
  }
}
// The bf16 SwiGLU backward by rows stores the flat kernel's bits, and the rows' amaxes of
// both gradients as stored.
TEST_F(CudaBf16ModelOpsTest, SwigluBackwardRowAmaxesAreTheRowwiseAmaxOfTheSameRoundedGradients) {
  struct Shape {
    int64_t rows, cols;
    size_t offset;
  };
  for (const Shape& s : {Shape{1, 1, 0}, Shape{3, 7, 0}, Shape{17, 256, 1}, Shape{5, 9001, 0}, Shape{2049, 44, 0}}) {
    SCOPED_TRACE(testing::Message() << "rows " << s.rows << " cols " << s.cols << " offset " << s.offset);
    const size_t n = sz(s.rows * s.cols);
    const auto total = static_cast<int64_t>(n);
    const auto gate = bf16_uniform(n, 55, -12.0f, 12.0f), up = bf16_uniform(n, 56), go = bf16_uniform(n, 57);
    DeviceBf16 d_gate(gate, s.offset), d_up(up, s.offset), d_go(go, s.offset);
    DeviceBf16 d_flat_gg(bf16_nans(n), s.offset), d_flat_gu(bf16_nans(n), s.offset);
    DeviceBf16 d_gg(bf16_nans(n), s.offset), d_gu(bf16_nans(n), s.offset);
    DeviceFloats d_gate_amax(nans(sz(s.rows))), d_up_amax(nans(sz(s.rows)));
    ASSERT_TRUE(
        gpu().swiglu_backward(d_gate.get(), d_up.get(), d_go.get(), total, d_flat_gg.get(), d_flat_gu.get(), kBf16).ok());
    ASSERT_TRUE(gpu()
                    .swiglu_backward(d_gate.get(), d_up.get(), d_go.get(), total, d_gg.get(), d_gu.get(), kBf16,
                                     RowAmaxes{d_gate_amax.get(), s.cols}, RowAmaxes{d_up_amax.get(), s.cols})
                    .ok());
    const Bf16 gg = d_gg.download(), gu = d_gu.download();
    expect_same_bits(gg, d_flat_gg.download(), "grad_gate by rows and flat");
    expect_same_bits(gu, d_flat_gu.download(), "grad_up by rows and flat");
    const auto wide_g = widen(gg), wide_u = widen(gu);
    const auto gate_amax = d_gate_amax.download(), up_amax = d_up_amax.download();
    for (int64_t r = 0; r < s.rows; ++r) {
      float want_g = 0.0f, want_u = 0.0f;
      for (int64_t j = 0; j < s.cols; ++j) {
        want_g = std::max(want_g, std::fabs(wide_g[sz(r * s.cols + j)]));
        want_u = std::max(want_u, std::fabs(wide_u[sz(r * s.cols + j)]));
      }
      ASSERT_EQ(gate_amax[sz(r)], want_g) << "grad_gate row " << r;
      ASSERT_EQ(up_amax[sz(r)], want_u) << "grad_up row " << r;
    }
  }
}

TEST_F(CudaBf16ModelOpsTest, AddAndAccumulateAreBitIdenticalAlsoInPlace) {
  for (int64_t n : kElementwiseSizes) {
    for (size_t offset : kOffsets) {
      SCOPED_TRACE(testing::Message() << "n " << n << " offset " << offset);
      const auto a = bf16_uniform(sz(n), 60), b = bf16_uniform(sz(n), 61, -3.0f, 3.0f);
      Bf16 sum(sz(n)), acc = b;
      ASSERT_TRUE(cpu().add(a.data(), b.data(), n, sum.data(), kBf16).ok());
      ASSERT_TRUE(cpu().accumulate(a.data(), n, acc.data(), kBf16).ok());
      DeviceBf16 d_a(a, offset), d_b(b, offset);
      for (int run = 0; run < 2; ++run) {
        DeviceBf16 d_out(bf16_nans(sz(n)), offset);
        ASSERT_TRUE(gpu().add(d_a.get(), d_b.get(), n, d_out.get(), kBf16).ok());
        expect_same_bits(d_out.download(), sum, "add, run " + std::to_string(run));
      }
      ASSERT_TRUE(gpu().add(d_a.get(), d_b.get(), n, d_a.get(), kBf16).ok());  // out == a
      expect_same_bits(d_a.download(), sum, "add into a");
      d_a.upload(a);
      ASSERT_TRUE(gpu().add(d_a.get(), d_b.get(), n, d_b.get(), kBf16).ok());  // out == b
      expect_same_bits(d_b.download(), sum, "add into b");
      d_b.upload(b);
      ASSERT_TRUE(gpu().accumulate(d_a.get(), n, d_b.get(), kBf16).ok());
      expect_same_bits(d_b.download(), acc, "accumulate");
    }
  }
}

// ---- loss --------------------------------------------------------------------------------------------

struct CrossEntropyCase {
  int64_t rows, vocab;
  size_t offset;
};

const CrossEntropyCase kCrossEntropyCases[] = {{1, 1, 0},     {7, 256, 0},    {300, 256, 0}, {300, 256, 4},
                                               {300, 256, 1}, {64, 32000, 0}, {33, 1001, 0}, {5, 3, 0}};

TEST_F(CudaBf16ModelOpsTest, CrossEntropyMatchesTheCpuAndIsDeterministic) {
  for (const auto& c : kCrossEntropyCases) {
    SCOPED_TRACE(testing::Message() << "rows " << c.rows << " vocab " << c.vocab << " offset " << c.offset);
    // One row in five ignored, a few targets repeated, two rows of large logits.
    auto wide = uniform(sz(c.rows * c.vocab), 70, -5.0f, 5.0f);
    for (int64_t r = 0; r < std::min<int64_t>(c.rows, 2); ++r) {
      for (int64_t j = 0; j < c.vocab; ++j) wide[sz(r * c.vocab + j)] += 80.0f;
    }
    const Bf16 logits = to_bf16(wide);
    std::vector<int32_t> targets(sz(c.rows));
    for (int64_t r = 0; r < c.rows; ++r) {
      targets[sz(r)] = r % 5 == 2 ? kIgnoreTarget : r % 7 == 3 ? 0 : static_cast<int32_t>((r * 37 + 11) % c.vocab);
    }
    const float grad_loss = 0.37f;
    float want_loss = NAN;
    std::vector<float> want_lse(sz(c.rows));
    Bf16 want_grad(logits.size());
    ASSERT_TRUE(
        cpu()
            .cross_entropy_forward(logits.data(), targets.data(), c.rows, c.vocab, &want_loss, want_lse.data(), kBf16)
            .ok());
    ASSERT_TRUE(cpu()
                    .cross_entropy_backward(logits.data(), targets.data(), want_lse.data(), c.rows, c.vocab, grad_loss,
                                            want_grad.data(), kBf16)
                    .ok());
    const auto logits_w = widen(logits);
    std::vector<float> want_grad32(logits.size());
    ASSERT_TRUE(cpu()
                    .cross_entropy_backward(logits_w.data(), targets.data(), want_lse.data(), c.rows, c.vocab,
                                            grad_loss, want_grad32.data())
                    .ok());
    expect_cpu_rounds(want_grad, want_grad32, "grad_logits");
    int64_t counted = 0;
    for (int32_t t : targets) counted += t != kIgnoreTarget ? 1 : 0;
    const double scale = counted == 0 ? 0.0 : static_cast<double>(grad_loss) / static_cast<double>(counted);

    DeviceBf16 d_logits(logits, c.offset);
    DeviceInts d_targets(targets);
    float first_loss = NAN;
    Bf16 first_grad;
    for (int run = 0; run < 2; ++run) {
      DeviceFloats d_loss(nans(1)), d_lse(nans(sz(c.rows)));
      DeviceBf16 d_grad(bf16_nans(logits.size()), c.offset);
      ASSERT_TRUE(
          gpu()
              .cross_entropy_forward(d_logits.get(), d_targets.get(), c.rows, c.vocab, d_loss.get(), d_lse.get(), kBf16)
              .ok());
      ASSERT_TRUE(gpu()
                      .cross_entropy_backward(d_logits.get(), d_targets.get(), d_lse.get(), c.rows, c.vocab, grad_loss,
                                              d_grad.get(), kBf16)
                      .ok());
      const float loss = d_loss.download()[0];
      const Bf16 grad = d_grad.download();
      if (run == 1) {
        EXPECT_EQ(bits(loss), bits(first_loss)) << "loss, run twice";
        expect_same_bits(grad, first_grad, "grad_logits, run twice");
        continue;
      }
      first_loss = loss;
      first_grad = grad;
      EXPECT_LE(std::abs(static_cast<double>(loss) - want_loss), 1e-6 * std::abs(static_cast<double>(want_loss)))
          << "gpu " << loss << " cpu " << want_loss;
      const auto lse = d_lse.download();
      for (int64_t r = 0; r < c.rows; ++r) {
        ASSERT_LE(std::abs(static_cast<double>(lse[sz(r)]) - want_lse[sz(r)]),
                  1e-6 * std::max(1.0, std::abs(static_cast<double>(want_lse[sz(r)]))))
            << "lse row " << r;
        const Bf16 g = slice(grad, r * c.vocab, c.vocab);
        if (targets[sz(r)] == kIgnoreTarget) {
          for (uint16_t x : g) ASSERT_EQ(x, 0u) << "ignored row " << r;
        } else {
          expect_rounding_of_near(g, slice(want_grad32, r * c.vocab, c.vocab), 1e-6, std::max(1e-30, scale),
                                  "grad row " + std::to_string(r));
        }
      }
    }
  }
}

// ---- bad activation types ------------------------------------------------------------------------------

TEST_F(CudaBf16ModelOpsTest, AnotherActivationTypeIsRejectedWithTheCpuMessageAndWritesNothing) {
  constexpr size_t kFloats = 4096;
  const std::vector<float> in_host = uniform(kFloats, 100, 0.5f, 1.0f);
  const std::vector<float> sentinel(kFloats, 42.0f);
  const std::vector<int32_t> ids_host = {1, 2, 3, 0};
  std::vector<float> cpu_in = in_host, cpu_out = sentinel, cpu_f32_out = sentinel;
  DeviceFloats d_in(in_host), d_out(sentinel), d_f32_out(sentinel);
  DeviceInts d_ids(ids_host);
  for (const auto& m : every_activation_call()) {
    SCOPED_TRACE(m.method);
    const absl::Status s = m.call(gpu(), DType::kE4M3, d_in.get(), d_out.get(), d_f32_out.get(), d_ids.get());
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    const absl::Status c =
        m.call(cpu(), DType::kE4M3, cpu_in.data(), cpu_out.data(), cpu_f32_out.data(), ids_host.data());
    EXPECT_EQ(std::string(s.message()), std::string(c.message()));
    EXPECT_EQ(std::string(s.message()),
              std::string(m.method) + ": activations must be float32 or bfloat16, got " + dtype_name(DType::kE4M3));
    expect_same_float_bits(d_out.download(), sentinel, "a rejected call wrote its output");
    expect_same_float_bits(d_f32_out.download(), sentinel, "a rejected call wrote an fp32 output");
    expect_same_float_bits(d_in.download(), in_host, "a rejected call wrote its input");
  }
}

#endif  // FP8_HAVE_CUDA

}  // namespace
}  // namespace fp8::ops_test::bf16_ops
