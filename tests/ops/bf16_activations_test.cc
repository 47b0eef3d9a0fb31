// bf16 activations (model_ops.h, "Activations") on the CPU ops.
//
// The contract, pinned op by op and bit for bit: a bf16 call equals rounding its inputs to
// bf16, running the fp32 op on the widened values, and rounding its activation outputs
// once; fp32 outputs (inv_rms, lse, the loss, parameter gradients) equal the fp32 op's to
// the bit. The CPU's bf16 path is literally that today (ops/bf16_staging.h); these tests
// keep any future fast path to it. Then: in-place calls, pointers only 2-byte aligned,
// sanity of bf16 results against fp32 on unrounded inputs, and the rejection of an
// activation type other than float32 / bfloat16.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "fp8/model_ops.h"
#include "tests/ops/activation_calls.h"
#include "tests/ops/bf16_test_util.h"
#include "tests/ops/gradient_check.h"

namespace fp8::ops_test {
namespace {

constexpr DType kBf16 = DType::kBFloat16;

ModelOps& ops() { return cpu_model_ops(); }

size_t sz(int64_t n) { return static_cast<size_t>(n); }

uint32_t bits(float x) { return std::bit_cast<uint32_t>(x); }

void expect_same_float_bits(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(bits(got[i]), bits(want[i])) << what << " at " << i << ": got " << got[i] << " want " << want[i];
  }
}

// bf16 inputs (fp32 draws rounded) and their exact fp32 values.
struct Bf16Input {
  Bf16Input(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f)
      : bf16(to_bf16(uniform(n, seed, lo, hi))), wide(widen(bf16)) {}
  Bf16 bf16;
  std::vector<float> wide;
};

// ---- the contract, op by op --------------------------------------------------------------------

TEST(Bf16Activations, EmbeddingIsTheFp32OpOnWidenedValues) {
  const int64_t vocab = 37, dim = 20, n = 50;
  std::vector<int32_t> tokens(sz(n));
  for (int64_t i = 0; i < n; ++i) tokens[sz(i)] = static_cast<int32_t>((i * 7) % vocab % 9);  // repeats
  const auto table = uniform(sz(vocab * dim), 1);
  std::vector<float> want(sz(n * dim));
  ASSERT_TRUE(ops().embedding_forward(tokens.data(), n, table.data(), vocab, dim, want.data()).ok());
  auto out = bf16_nans(sz(n * dim));
  ASSERT_TRUE(ops().embedding_forward(tokens.data(), n, table.data(), vocab, dim, out.data(), kBf16).ok());
  expect_same_bits(out, to_bf16(want), "forward");

  const Bf16Input grad_out(sz(n * dim), 2);
  const auto prior = uniform(sz(vocab * dim), 3);
  auto want_table = prior, got_table = prior;
  ASSERT_TRUE(ops().embedding_backward(tokens.data(), n, grad_out.wide.data(), vocab, dim, want_table.data()).ok());
  ASSERT_TRUE(
      ops().embedding_backward(tokens.data(), n, grad_out.bf16.data(), vocab, dim, got_table.data(), kBf16).ok());
  expect_same_float_bits(got_table, want_table, "grad_table (fp32, accumulated)");
}

TEST(Bf16Activations, RmsNormIsTheFp32OpOnWidenedValues) {
  for (const auto& [rows, dim] : {std::pair<int64_t, int64_t>{7, 33}, {64, 256}}) {
    SCOPED_TRACE(testing::Message() << "rows " << rows << " dim " << dim);
    const size_t n = sz(rows * dim);
    const Bf16Input x(n, 10, -2.0f, 2.0f), g(n, 11);
    const auto w = uniform(sz(dim), 12, 0.5f, 1.5f);
    std::vector<float> want(n), want_inv(sz(rows));
    ASSERT_TRUE(ops().rmsnorm_forward(x.wide.data(), w.data(), rows, dim, 1e-5f, want.data(), want_inv.data()).ok());
    auto out = bf16_nans(n);
    auto inv = nans(sz(rows));
    ASSERT_TRUE(ops().rmsnorm_forward(x.bf16.data(), w.data(), rows, dim, 1e-5f, out.data(), inv.data(), kBf16).ok());
    expect_same_bits(out, to_bf16(want), "out");
    expect_same_float_bits(inv, want_inv, "inv_rms");

    const auto prior = uniform(sz(dim), 13);
    std::vector<float> want_dx(n), want_dw = prior, got_dw = prior;
    ASSERT_TRUE(ops()
                    .rmsnorm_backward(x.wide.data(), w.data(), inv.data(), g.wide.data(), rows, dim, want_dx.data(),
                                      want_dw.data())
                    .ok());
    auto dx = bf16_nans(n);
    ASSERT_TRUE(ops()
                    .rmsnorm_backward(x.bf16.data(), w.data(), inv.data(), g.bf16.data(), rows, dim, dx.data(),
                                      got_dw.data(), kBf16)
                    .ok());
    expect_same_bits(dx, to_bf16(want_dx), "grad_x");
    expect_same_float_bits(got_dw, want_dw, "grad_weight (fp32, accumulated)");

    // Accumulating: the fp32 gradient added to the widened prior, rounded once.
    const Bf16Input prior_dx(n, 14, -2.0f, 2.0f);
    std::vector<float> want_sum(n);
    for (size_t i = 0; i < n; ++i) want_sum[i] = prior_dx.wide[i] + want_dx[i];
    auto sum = prior_dx.bf16;
    ASSERT_TRUE(ops()
                    .rmsnorm_backward(x.bf16.data(), w.data(), inv.data(), g.bf16.data(), rows, dim, sum.data(),
                                      got_dw.data(), kBf16, Store::kAccumulate)
                    .ok());
    expect_same_bits(sum, to_bf16(want_sum), "grad_x accumulated");
  }
}

TEST(Bf16Activations, RopeIsTheFp32OpOnWidenedValuesAlsoInPlace) {
  const RopeShape s{2, 9, 3, 16};
  const size_t n = sz(s.batch * s.seq * s.heads * s.head_dim);
  const Bf16Input x(n, 20, -3.0f, 3.0f);
  std::vector<float> want_fwd(n), want_bwd(n);
  ASSERT_TRUE(ops().rope_forward(s, 10000.0, x.wide.data(), want_fwd.data()).ok());
  ASSERT_TRUE(ops().rope_backward(s, 10000.0, x.wide.data(), want_bwd.data()).ok());
  auto out = bf16_nans(n);
  ASSERT_TRUE(ops().rope_forward(s, 10000.0, x.bf16.data(), out.data(), kBf16).ok());
  expect_same_bits(out, to_bf16(want_fwd), "forward");
  ASSERT_TRUE(ops().rope_backward(s, 10000.0, x.bf16.data(), out.data(), kBf16).ok());
  expect_same_bits(out, to_bf16(want_bwd), "backward");
  auto in_place = x.bf16;
  ASSERT_TRUE(ops().rope_forward(s, 10000.0, in_place.data(), in_place.data(), kBf16).ok());
  expect_same_bits(in_place, to_bf16(want_fwd), "forward in place");
  in_place = x.bf16;
  ASSERT_TRUE(ops().rope_backward(s, 10000.0, in_place.data(), in_place.data(), kBf16).ok());
  expect_same_bits(in_place, to_bf16(want_bwd), "backward in place");
}

TEST(Bf16Activations, AttentionIsTheFp32OpOnWidenedValues) {
  for (const AttentionShape& s : {AttentionShape{1, 70, 4, 2, 16}, AttentionShape{2, 13, 2, 2, 8}}) {
    SCOPED_TRACE(testing::Message() << "seq " << s.seq << " heads " << s.n_heads << "/" << s.n_kv_heads);
    const size_t qn = sz(s.batch * s.seq * s.n_heads * s.head_dim),
                 kvn = sz(s.batch * s.seq * s.n_kv_heads * s.head_dim);
    const size_t ln = sz(s.batch * s.n_heads * s.seq);
    const Bf16Input q(qn, 30, -2.0f, 2.0f), k(kvn, 31, -2.0f, 2.0f), v(kvn, 32), go(qn, 33);
    std::vector<float> want_out(qn), want_lse(ln);
    ASSERT_TRUE(
        ops().attention_forward(s, q.wide.data(), k.wide.data(), v.wide.data(), want_out.data(), want_lse.data()).ok());
    auto out = bf16_nans(qn);
    auto lse = nans(ln);
    ASSERT_TRUE(
        ops().attention_forward(s, q.bf16.data(), k.bf16.data(), v.bf16.data(), out.data(), lse.data(), kBf16).ok());
    expect_same_bits(out, to_bf16(want_out), "out");
    expect_same_float_bits(lse, want_lse, "lse");

    // The backward reads the bf16 out the forward stored.
    const auto out_wide = widen(out);
    std::vector<float> want_gq(qn), want_gk(kvn), want_gv(kvn);
    ASSERT_TRUE(ops()
                    .attention_backward(s, q.wide.data(), k.wide.data(), v.wide.data(), out_wide.data(), lse.data(),
                                        go.wide.data(), want_gq.data(), want_gk.data(), want_gv.data())
                    .ok());
    auto gq = bf16_nans(qn), gk = bf16_nans(kvn), gv = bf16_nans(kvn);
    ASSERT_TRUE(ops()
                    .attention_backward(s, q.bf16.data(), k.bf16.data(), v.bf16.data(), out.data(), lse.data(),
                                        go.bf16.data(), gq.data(), gk.data(), gv.data(), kBf16)
                    .ok());
    expect_same_bits(gq, to_bf16(want_gq), "grad_q");
    expect_same_bits(gk, to_bf16(want_gk), "grad_k");
    expect_same_bits(gv, to_bf16(want_gv), "grad_v");
  }
}

TEST(Bf16Activations, SwigluIsTheFp32OpOnWidenedValues) {
  const int64_t n = 70001;  // several chunks of the thread pool, and a ragged end
  const Bf16Input gate(sz(n), 40, -12.0f, 12.0f), up(sz(n), 41), go(sz(n), 42);
  std::vector<float> want(sz(n)), want_gg(sz(n)), want_gu(sz(n));
  ASSERT_TRUE(ops().swiglu_forward(gate.wide.data(), up.wide.data(), n, want.data()).ok());
  ASSERT_TRUE(
      ops().swiglu_backward(gate.wide.data(), up.wide.data(), go.wide.data(), n, want_gg.data(), want_gu.data()).ok());
  auto out = bf16_nans(sz(n)), gg = bf16_nans(sz(n)), gu = bf16_nans(sz(n));
  ASSERT_TRUE(ops().swiglu_forward(gate.bf16.data(), up.bf16.data(), n, out.data(), kBf16).ok());
  ASSERT_TRUE(
      ops().swiglu_backward(gate.bf16.data(), up.bf16.data(), go.bf16.data(), n, gg.data(), gu.data(), kBf16).ok());
  expect_same_bits(out, to_bf16(want), "out");
  expect_same_bits(gg, to_bf16(want_gg), "grad_gate");
  expect_same_bits(gu, to_bf16(want_gu), "grad_up");
}

// add: out may be a or b; accumulate: y = bf16(float(y) + float(x)), rounded once.
TEST(Bf16Activations, AddAndAccumulateAreTheFp32OpOnWidenedValuesAlsoInPlace) {
  const int64_t n = 40003;
  const Bf16Input a(sz(n), 50), b(sz(n), 51, -3.0f, 3.0f);
  std::vector<float> sum(sz(n));
  ASSERT_TRUE(ops().add(a.wide.data(), b.wide.data(), n, sum.data()).ok());
  const Bf16 want = to_bf16(sum);
  auto out = bf16_nans(sz(n));
  ASSERT_TRUE(ops().add(a.bf16.data(), b.bf16.data(), n, out.data(), kBf16).ok());
  expect_same_bits(out, want, "add");
  auto into_a = a.bf16;
  ASSERT_TRUE(ops().add(into_a.data(), b.bf16.data(), n, into_a.data(), kBf16).ok());
  expect_same_bits(into_a, want, "add into a");
  auto into_b = b.bf16;
  ASSERT_TRUE(ops().add(a.bf16.data(), into_b.data(), n, into_b.data(), kBf16).ok());
  expect_same_bits(into_b, want, "add into b");
  auto y = b.bf16;
  ASSERT_TRUE(ops().accumulate(a.bf16.data(), n, y.data(), kBf16).ok());
  expect_same_bits(y, want, "accumulate");                           // y + x is b + a, the same fp32 sum
  ASSERT_TRUE(ops().accumulate(y.data(), n, y.data(), kBf16).ok());  // y += y: doubling is exact
  for (size_t i = 0; i < y.size(); ++i) {
    ASSERT_EQ(bf16_to_float(y[i]), 2.0f * bf16_to_float(want[i])) << i;
  }
}

TEST(Bf16Activations, CrossEntropyIsTheFp32OpOnWidenedValues) {
  const int64_t rows = 40, vocab = 301;
  const Bf16Input logits(sz(rows * vocab), 60, -6.0f, 6.0f);
  std::vector<int32_t> targets(sz(rows));
  for (int64_t r = 0; r < rows; ++r) targets[sz(r)] = r % 6 == 1 ? kIgnoreTarget : static_cast<int32_t>(r * 13 % vocab);
  float want_loss = NAN, loss = NAN;
  std::vector<float> want_lse(sz(rows)), want_grad(sz(rows * vocab));
  ASSERT_TRUE(
      ops().cross_entropy_forward(logits.wide.data(), targets.data(), rows, vocab, &want_loss, want_lse.data()).ok());
  ASSERT_TRUE(ops()
                  .cross_entropy_backward(logits.wide.data(), targets.data(), want_lse.data(), rows, vocab, 0.5f,
                                          want_grad.data())
                  .ok());
  auto lse = nans(sz(rows));
  auto grad = bf16_nans(sz(rows * vocab));
  ASSERT_TRUE(
      ops().cross_entropy_forward(logits.bf16.data(), targets.data(), rows, vocab, &loss, lse.data(), kBf16).ok());
  ASSERT_TRUE(
      ops()
          .cross_entropy_backward(logits.bf16.data(), targets.data(), lse.data(), rows, vocab, 0.5f, grad.data(), kBf16)
          .ok());
  EXPECT_EQ(bits(loss), bits(want_loss)) << "loss " << loss << " want " << want_loss;
  expect_same_float_bits(lse, want_lse, "lse");
  expect_same_bits(grad, to_bf16(want_grad), "grad_logits");
}

// ---- alignment -------------------------------------------------------------------------------

// bf16 needs only its own 2-byte alignment: buffers one element into an allocation give
// the same bits.
TEST(Bf16Activations, TwoByteAlignedPointersGiveTheSameBits) {
  const int64_t rows = 5, dim = 12;
  const size_t n = sz(rows * dim);
  const Bf16Input x(n, 70);
  const auto w = uniform(sz(dim), 71, 0.5f, 1.5f);
  Bf16 aligned_out = bf16_nans(n);
  std::vector<float> inv(sz(rows));
  ASSERT_TRUE(
      ops().rmsnorm_forward(x.bf16.data(), w.data(), rows, dim, 1e-5f, aligned_out.data(), inv.data(), kBf16).ok());
  Bf16 shifted_x(n + 1), shifted_out = bf16_nans(n + 1);
  std::copy(x.bf16.begin(), x.bf16.end(), shifted_x.begin() + 1);
  ASSERT_TRUE(
      ops()
          .rmsnorm_forward(shifted_x.data() + 1, w.data(), rows, dim, 1e-5f, shifted_out.data() + 1, inv.data(), kBf16)
          .ok());
  expect_same_bits(Bf16(shifted_out.begin() + 1, shifted_out.end()), aligned_out, "rmsnorm out");
}

// ---- sanity against fp32 ---------------------------------------------------------------------

// On unit-scale inputs, bf16 activations (inputs rounded, outputs rounded) stay within a
// few bf16 ulps (2^-8 relative each) of the fp32 op on the unrounded inputs.
TEST(Bf16Activations, AttentionStaysNearFp32OnUnitScaleInputs) {
  const AttentionShape s{2, 96, 4, 2, 32};
  const size_t qn = sz(s.batch * s.seq * s.n_heads * s.head_dim), kvn = sz(s.batch * s.seq * s.n_kv_heads * s.head_dim);
  const size_t ln = sz(s.batch * s.n_heads * s.seq);
  const auto q = uniform(qn, 80), k = uniform(kvn, 81), v = uniform(kvn, 82), go = uniform(qn, 83);
  std::vector<float> out(qn), lse(ln), gq(qn), gk(kvn), gv(kvn);
  ASSERT_TRUE(ops().attention_forward(s, q.data(), k.data(), v.data(), out.data(), lse.data()).ok());
  ASSERT_TRUE(ops()
                  .attention_backward(s, q.data(), k.data(), v.data(), out.data(), lse.data(), go.data(), gq.data(),
                                      gk.data(), gv.data())
                  .ok());
  const Bf16 qb = to_bf16(q), kb = to_bf16(k), vb = to_bf16(v), gob = to_bf16(go);
  Bf16 outb(qn), gqb(qn), gkb(kvn), gvb(kvn);
  std::vector<float> lseb(ln);
  ASSERT_TRUE(ops().attention_forward(s, qb.data(), kb.data(), vb.data(), outb.data(), lseb.data(), kBf16).ok());
  ASSERT_TRUE(ops()
                  .attention_backward(s, qb.data(), kb.data(), vb.data(), outb.data(), lseb.data(), gob.data(),
                                      gqb.data(), gkb.data(), gvb.data(), kBf16)
                  .ok());
  // Relative to the tensor's largest magnitude: outputs near zero carry absolute error.
  auto rel = [](const std::vector<float>& got, const std::vector<float>& want) {
    double scale = 0.0, err = 0.0;
    for (size_t i = 0; i < want.size(); ++i) {
      scale = std::max(scale, std::abs(static_cast<double>(want[i])));
      err = std::max(err, std::abs(static_cast<double>(got[i]) - want[i]));
    }
    return err / scale;
  };
  EXPECT_LT(rel(widen(outb), out), 1e-2) << "out";
  EXPECT_LT(rel(lseb, lse), 1e-2) << "lse";
  EXPECT_LT(rel(widen(gqb), gq), 2e-2) << "grad_q";
  EXPECT_LT(rel(widen(gkb), gk), 2e-2) << "grad_k";
  EXPECT_LT(rel(widen(gvb), gv), 2e-2) << "grad_v";
}

TEST(Bf16Activations, LossAndItsGradientStayNearFp32) {
  const int64_t rows = 16, vocab = 1000;
  const auto logits = uniform(sz(rows * vocab), 90, -4.0f, 4.0f);
  std::vector<int32_t> targets(sz(rows));
  for (int64_t r = 0; r < rows; ++r) targets[sz(r)] = static_cast<int32_t>(r * 61 % vocab);
  float loss = NAN, loss_b = NAN;
  std::vector<float> lse(sz(rows)), lse_b(sz(rows)), grad(sz(rows * vocab));
  ASSERT_TRUE(ops().cross_entropy_forward(logits.data(), targets.data(), rows, vocab, &loss, lse.data()).ok());
  ASSERT_TRUE(
      ops().cross_entropy_backward(logits.data(), targets.data(), lse.data(), rows, vocab, 1.0f, grad.data()).ok());
  const Bf16 lb = to_bf16(logits);
  Bf16 grad_b(sz(rows * vocab));
  ASSERT_TRUE(ops().cross_entropy_forward(lb.data(), targets.data(), rows, vocab, &loss_b, lse_b.data(), kBf16).ok());
  ASSERT_TRUE(
      ops()
          .cross_entropy_backward(lb.data(), targets.data(), lse_b.data(), rows, vocab, 1.0f, grad_b.data(), kBf16)
          .ok());
  // Logits up to 4 move by up to 2^-7 each when rounded, in both directions: the mean
  // loss (about log 1000) moves far less (1e-5 relative here).
  EXPECT_NEAR(loss_b, loss, 1e-3 * loss);
  const auto gw = widen(grad_b);
  double scale = 0.0, err = 0.0;
  for (size_t i = 0; i < grad.size(); ++i) {
    scale = std::max(scale, std::abs(static_cast<double>(grad[i])));
    err = std::max(err, std::abs(static_cast<double>(gw[i]) - grad[i]));
  }
  EXPECT_LT(err / scale, 2e-2);
}

// ---- bad activation types ----------------------------------------------------------------------

TEST(Bf16Activations, AnotherActivationTypeIsRejectedAndNothingIsWritten) {
  const int32_t ids[] = {1, 2, 3, 0};
  std::vector<float> in = uniform(4096, 100, 0.5f, 1.0f);
  for (const auto& m : every_activation_call()) {
    for (DType t : {DType::kE4M3, DType::kE5M2}) {
      SCOPED_TRACE(testing::Message() << m.method << " with " << dtype_name(t));
      std::vector<float> out(4096, 42.0f), f32_out(4096, 42.0f);
      const auto in_before = in;
      const absl::Status s = m.call(ops(), t, in.data(), out.data(), f32_out.data(), ids);
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
      EXPECT_EQ(std::string(s.message()),
                std::string(m.method) + ": activations must be float32 or bfloat16, got " + dtype_name(t));
      for (size_t i = 0; i < out.size(); ++i) {
        ASSERT_EQ(out[i], 42.0f) << "a rejected call wrote its output";
        ASSERT_EQ(f32_out[i], 42.0f) << "a rejected call wrote an fp32 output";
      }
      ASSERT_EQ(in, in_before) << "a rejected call wrote its input";
    }
    // The same call with a valid type goes through, so the rejection above was the type's.
    std::vector<float> out(4096, 0.0f), f32_out(4096, 0.0f);
    EXPECT_TRUE(m.call(ops(), DType::kBFloat16, in.data(), out.data(), f32_out.data(), ids).ok()) << m.method;
    EXPECT_TRUE(m.call(ops(), DType::kFloat32, in.data(), out.data(), f32_out.data(), ids).ok()) << m.method;
  }
}

}  // namespace
}  // namespace fp8::ops_test
