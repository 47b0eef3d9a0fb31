// The mma.sync attention kernels' own source (kernels/cuda/ops/attention_mma_device.cuh),
// and the wgmma kernels' (attention_wgmma_device.cuh, against the mma.sync ones) run on the CPU under an emulation of CUDA threads and of the tensor-core instructions
// (tests/ops/emulation/), against attention computed in double precision: what can be
// checked of those kernels on a machine without a GPU. The GPU test of the same kernels is
// fp8_cuda_model_ops_test_mma_attention (label gpu).
//
// Tolerances: the kernels round P and dS to bf16 as product operands (FlashAttention-2's
// precision) and write bf16, so results differ from the exact ones by ~1e-3 (relative L2;
// measured 1.7e-3 for out, 2-3e-3 for the gradients); a wrong index, layout, mask or
// scale shows as an error of order 1.
#include "emulation/cuda_emulation.h"
// The kernels, after the emulation (the include path finds the emulated instructions).
#include "cuda/ops/attention_mma_device.cuh"
#include "cuda/ops/attention_wgmma_device.cuh"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace fp8::cuda::attention_mma {
namespace {

constexpr double kTolerance = 1e-2;
constexpr double kLseTolerance = 5e-4;

struct Case {
  int batch, seq, heads, kv_heads, head_dim;
};

double value(uint16_t bits) { return static_cast<double>(bf16_to_float(bits)); }

double relative_l2(const std::vector<double>& want, const std::vector<double>& got) {
  double err = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    err += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  return std::sqrt(err / std::max(norm, 1e-300));
}

std::vector<double> widen(const std::vector<uint16_t>& bits) {
  std::vector<double> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) out[i] = value(bits[i]);
  return out;
}

class AttentionMmaEmulationTest : public ::testing::TestWithParam<Case> {};

template <int D>
void run_case(const Case& c) {
  const int B = c.batch, T = c.seq, H = c.heads, KV = c.kv_heads, G = H / KV;
  std::mt19937 rng(static_cast<uint32_t>(T * 131 + H));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto make = [&](size_t n, float sd) {
    std::vector<uint16_t> v(n);
    for (auto& x : v) x = float_to_bf16(normal(rng) * sd);
    return v;
  };
  const size_t qn = size_t(B) * T * H * D, kvn = size_t(B) * T * KV * D, ln = size_t(B) * H * T;
  const auto q = make(qn, 2.0f), k = make(kvn, 1.0f), v = make(kvn, 1.0f), grad_out = make(qn, 1.0f);
  auto qi = [&](int b, int t, int h, int d) { return ((size_t(b) * T + t) * H + h) * D + d; };
  auto ki = [&](int b, int t, int h, int d) { return ((size_t(b) * T + t) * KV + h) * D + d; };
  const double scale = 1.0 / std::sqrt(double(D));

  // The reference, in double.
  std::vector<double> out(qn), lse(ln), gq(qn), gk(kvn), gv(kvn);
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < H; ++h) {
      const int kh = h / G;
      for (int i = 0; i < T; ++i) {
        std::vector<double> p(i + 1), dp(i + 1);
        double mx = -1e300;
        for (int j = 0; j <= i; ++j) {
          double s = 0;
          for (int d = 0; d < D; ++d) s += value(q[qi(b, i, h, d)]) * value(k[ki(b, j, kh, d)]);
          p[j] = s * scale;
          mx = std::max(mx, p[j]);
        }
        double sum = 0;
        for (int j = 0; j <= i; ++j) sum += (p[j] = std::exp(p[j] - mx));
        for (int j = 0; j <= i; ++j) p[j] /= sum;
        lse[(size_t(b) * H + h) * T + i] = mx + std::log(sum);
        double delta = 0;
        for (int d = 0; d < D; ++d) {
          double o = 0;
          for (int j = 0; j <= i; ++j) o += p[j] * value(v[ki(b, j, kh, d)]);
          out[qi(b, i, h, d)] = o;
          delta += value(grad_out[qi(b, i, h, d)]) * o;
        }
        for (int j = 0; j <= i; ++j) {
          double x = 0;
          for (int d = 0; d < D; ++d) x += value(grad_out[qi(b, i, h, d)]) * value(v[ki(b, j, kh, d)]);
          const double ds = p[j] * (x - delta);
          for (int d = 0; d < D; ++d) {
            gq[qi(b, i, h, d)] += scale * ds * value(k[ki(b, j, kh, d)]);
            gk[ki(b, j, kh, d)] += scale * ds * value(q[qi(b, i, h, d)]);
            gv[ki(b, j, kh, d)] += p[j] * value(grad_out[qi(b, i, h, d)]);
          }
        }
      }
    }
  }

  // The kernels, as the launchers call them.
  auto geometry = [&](int64_t heads) {
    Geometry g{};
    g.n_heads = H;
    g.group = G;
    g.ld_q = int64_t(H) * D;
    g.ld_kv = int64_t(KV) * D;
    g.heads = heads;
    g.seq = T;
    g.tiles = (T + kTile - 1) / kTile;
    g.scale = static_cast<float>(scale);
    return g;
  };
  std::vector<uint16_t> o(qn, 0xffff), dq(qn, 0xffff), dk(kvn, 0xffff), dv(kvn, 0xffff);
  std::vector<float> l(ln, NAN), delta(ln);
  const Geometry per_head = geometry(int64_t(B) * H), per_kv_head = geometry(int64_t(B) * KV);
  std::vector<float> row_amax(size_t(B) * T, 0.0f);  // zeros, as the launcher leaves them
  emulation::launch(unsigned(per_head.tiles * per_head.heads), kThreads, kForwardBytes<D>,
                    attention_forward_mma_kernel<D>, per_head, q.data(), k.data(), v.data(), o.data(), l.data(),
                    row_amax.data());
  {
    // The wgmma forward (emulated as this project reads wgmma's descriptors and fragments)
    // makes the mma.sync forward's out, lse and row amaxes bit for bit: the same products
    // in the same order, the same softmax.
    std::vector<uint16_t> o_wgmma(qn, 0xffff);
    std::vector<float> l_wgmma(ln, NAN), row_amax_wgmma(size_t(B) * T, 0.0f);
    emulation::launch(unsigned(per_head.tiles * per_head.heads), kThreads, attention_wgmma::kForwardBytes<D>,
                      attention_wgmma::attention_forward_wgmma_kernel<D>, per_head, q.data(), k.data(), v.data(),
                      o_wgmma.data(), l_wgmma.data(), row_amax_wgmma.data(), wgmma::MnMajorOffsets{});
    EXPECT_EQ(o_wgmma, o) << "wgmma forward's out";
    EXPECT_EQ(std::memcmp(l_wgmma.data(), l.data(), ln * sizeof(float)), 0) << "wgmma forward's lse";
    EXPECT_EQ(row_amax_wgmma, row_amax) << "wgmma forward's row amaxes";
  }
  // Each token's amax of out over every head, as stored, from the blocks of all its heads.
  for (size_t row = 0; row < row_amax.size(); ++row) {
    float want = 0.0f;
    for (size_t i = row * H * D; i < (row + 1) * H * D; ++i) want = std::max(want, std::fabs(bf16_to_float(o[i])));
    ASSERT_EQ(row_amax[row], want) << "row amax of token " << row;
  }
  // delta = grad_out · out per row, from the kernel's bf16 out (attention_kernels.cu's pass).
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < H; ++h) {
      for (int i = 0; i < T; ++i) {
        double x = 0;
        for (int d = 0; d < D; ++d) x += value(grad_out[qi(b, i, h, d)]) * value(o[qi(b, i, h, d)]);
        delta[(size_t(b) * H + h) * T + i] = static_cast<float>(x);
      }
    }
  }
  emulation::launch(unsigned(per_kv_head.tiles * per_kv_head.heads), kThreads, kGradKvBytes<D>,
                    attention_grad_kv_mma_kernel<D>, per_kv_head, q.data(), k.data(), v.data(), l.data(),
                    delta.data(), grad_out.data(), dk.data(), dv.data());
  emulation::launch(unsigned(per_head.tiles * per_head.heads), kThreads, kGradQBytes<D>,
                    attention_grad_q_mma_kernel<D>, per_head, q.data(), k.data(), v.data(), l.data(), delta.data(),
                    grad_out.data(), dq.data());

  {
    // The wgmma backward kernels make the mma.sync ones' gradients bit for bit.
    std::vector<uint16_t> dq_wgmma(qn, 0xffff), dk_wgmma(kvn, 0xffff), dv_wgmma(kvn, 0xffff);
    emulation::launch(unsigned(per_kv_head.tiles * per_kv_head.heads), kThreads, attention_wgmma::kGradKvBytes<D>,
                      attention_wgmma::attention_grad_kv_wgmma_kernel<D>, per_kv_head, q.data(), k.data(), v.data(),
                      l.data(), delta.data(), grad_out.data(), dk_wgmma.data(), dv_wgmma.data(),
                      wgmma::MnMajorOffsets{});
    emulation::launch(unsigned(per_head.tiles * per_head.heads), kThreads, attention_wgmma::kGradQBytes<D>,
                      attention_wgmma::attention_grad_q_wgmma_kernel<D>, per_head, q.data(), k.data(), v.data(),
                      l.data(), delta.data(), grad_out.data(), dq_wgmma.data(), wgmma::MnMajorOffsets{});
    EXPECT_EQ(dq_wgmma, dq) << "wgmma grad_q";
    EXPECT_EQ(dk_wgmma, dk) << "wgmma grad_k";
    EXPECT_EQ(dv_wgmma, dv) << "wgmma grad_v";
  }
  EXPECT_LE(relative_l2(out, widen(o)), kTolerance) << "out";
  EXPECT_LE(relative_l2(lse, std::vector<double>(l.begin(), l.end())), kLseTolerance) << "lse";
  EXPECT_LE(relative_l2(gq, widen(dq)), kTolerance) << "grad_q";
  EXPECT_LE(relative_l2(gk, widen(dk)), kTolerance) << "grad_k";
  EXPECT_LE(relative_l2(gv, widen(dv)), kTolerance) << "grad_v";
  std::printf("batch %d seq %d heads %d/%d head_dim %d: relative L2 error out %.2e, lse %.2e, grad_q %.2e, "
              "grad_k %.2e, grad_v %.2e\n",
              B, T, H, KV, D, relative_l2(out, widen(o)), relative_l2(lse, std::vector<double>(l.begin(), l.end())),
              relative_l2(gq, widen(dq)), relative_l2(gk, widen(dk)), relative_l2(gv, widen(dv)));
}

// Partial tiles, one and three tiles, GQA groups of 2 and 4, both head_dims.
TEST_P(AttentionMmaEmulationTest, MatchesExactAttentionToBf16Rounding) {
  const Case& c = GetParam();
  if (c.head_dim == 64) {
    run_case<64>(c);
  } else {
    run_case<128>(c);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionMmaEmulationTest,
                         ::testing::Values(Case{2, 37, 4, 2, 64}, Case{1, 130, 4, 1, 64}, Case{2, 100, 2, 2, 128}),
                         [](const ::testing::TestParamInfo<Case>& p) {
                           const Case& c = p.param;
                           return "seq" + std::to_string(c.seq) + "_heads" + std::to_string(c.heads) + "x" +
                                  std::to_string(c.kv_heads) + "_d" + std::to_string(c.head_dim);
                         });

}  // namespace
}  // namespace fp8::cuda::attention_mma
