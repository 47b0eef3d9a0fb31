// AdamW over a ParameterSet (worker/engine/optim/adamw.h) and global grad-norm clipping.
// The expected values are torch.optim.AdamW's update worked out in double:
//   p ← p·(1 − lr·wd);  m ← β1·m + (1 − β1)·g;  v ← β2·v + (1 − β2)·g²
//   p ← p − lr · (m / (1 − β1^t)) / (sqrt(v / (1 − β2^t)) + eps)
#include "worker/engine/optim/adamw.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/ops/model_arith.h"
#include "worker/engine/model/parameters.h"
#include "worker/engine/tensor/device.h"

namespace fp8::engine {
namespace {

ModelOps& ops() { return cpu_model_ops(); }

Parameter* add(ParameterSet& set, const std::string& name, const std::vector<float>& value,
               const std::vector<float>& grad, bool weight_decay) {
  absl::StatusOr<Parameter*> p = set.add(Device::cpu(), name, {static_cast<int64_t>(value.size())},
                                         ParameterInit::kNormal, weight_decay);
  EXPECT_TRUE(p.ok()) << p.status();
  if (!p.ok()) return nullptr;
  EXPECT_TRUE((*p)->value.upload<float>(value).ok());
  EXPECT_TRUE((*p)->grad.upload<float>(grad).ok());
  return *p;
}

std::vector<float> values_of(const Tensor& t) {
  absl::StatusOr<std::vector<float>> v = t.download<float>();
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *v : std::vector<float>();
}

// fp32 arithmetic on fp32 hyperparameters (1 − 0.99f is 1e-6 away from 0.01): relative 2e-6.
void expect_close(float got, double want) { EXPECT_NEAR(got, want, 2e-6 * std::abs(want) + 1e-12) << want; }

AdamWHyperparams hyper(float beta2, float weight_decay) {
  AdamWHyperparams h;
  h.lr = 123.0f;  // create() ignores it: step() takes the rate
  h.beta1 = 0.9f;
  h.beta2 = beta2;
  h.eps = 1e-8f;
  h.weight_decay = weight_decay;
  return h;
}

TEST(EngineAdamW, MatchesTorchAdamWAndSkipsDecayWhereAsked) {
  ParameterSet set;
  // Two matrices-like parameters (decayed) and a norm gain (not decayed), with the same
  // values and gradients so that the decay is the only difference.
  Parameter* w = add(set, "w", {1.0f, 2.0f}, {0.5f, 0.0f}, /*weight_decay=*/true);
  Parameter* gain = add(set, "norm", {1.0f, 2.0f}, {0.5f, 0.0f}, /*weight_decay=*/false);
  ASSERT_NE(w, nullptr);
  ASSERT_NE(gain, nullptr);
  absl::StatusOr<AdamW> opt = AdamW::create(ops(), set, hyper(0.99f, 0.1f));
  ASSERT_TRUE(opt.ok()) << opt.status();
  EXPECT_EQ(opt->steps_taken(), 0);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(values_of(opt->first_moment(i)), std::vector<float>(2, 0.0f));
    EXPECT_EQ(values_of(opt->second_moment(i)), std::vector<float>(2, 0.0f));
  }

  // Step 1 at lr 0.1.
  ASSERT_TRUE(opt->step(0.1f).ok());
  EXPECT_EQ(opt->steps_taken(), 1);
  std::vector<float> wv = values_of(w->value), gv = values_of(gain->value);
  expect_close(wv[0], 0.890000002);  // decay 1 → 0.99, then 0.99 − 0.1 · 0.5 / (0.5 + 1e-8)
  expect_close(wv[1], 1.98);         // zero gradient: decay only
  expect_close(gv[0], 0.900000002);  // no decay
  EXPECT_EQ(gv[1], 2.0f);            // no decay, no gradient: untouched
  for (size_t i = 0; i < 2; ++i) {
    expect_close(values_of(opt->first_moment(i))[0], 0.05);
    expect_close(values_of(opt->second_moment(i))[0], 0.0025);
  }
  // The gradients are the caller's: step() leaves them alone.
  EXPECT_EQ(values_of(w->grad), (std::vector<float>{0.5f, 0.0f}));

  // Step 2: new gradients.
  const std::vector<float> g2 = {-0.25f, 0.0f};
  ASSERT_TRUE(w->grad.upload<float>(g2).ok());
  ASSERT_TRUE(gain->grad.upload<float>(g2).ok());
  ASSERT_TRUE(opt->step(0.1f).ok());
  EXPECT_EQ(opt->steps_taken(), 2);
  wv = values_of(w->value);
  gv = values_of(gain->value);
  expect_close(wv[0], 0.8544300597479334);
  expect_close(wv[1], 1.9602);
  expect_close(gv[0], 0.8733300597679334);
  EXPECT_EQ(gv[1], 2.0f);
  expect_close(values_of(opt->first_moment(0))[0], 0.02);
  expect_close(values_of(opt->second_moment(0))[0], 0.0031);
}

// write_row_amaxes: every step then writes the rows' amaxes of the parameter's new value;
// a parameter it does not optimize, or rows that do not divide the parameter, are refused.
TEST(EngineAdamW, WritesTheRowAmaxesOfTheParametersAskedFor) {
  ParameterSet set, other;
  Parameter* w = add(set, "w", {1.0f, -2.0f, 0.5f, 3.0f, -0.25f, 0.0f}, {0.5f, 0.5f, -1.0f, 0.1f, 0.2f, 0.3f}, true);
  Parameter* elsewhere = add(other, "elsewhere", {1.0f}, {1.0f}, true);
  ASSERT_TRUE(w && elsewhere);
  absl::StatusOr<AdamW> opt = AdamW::create(ops(), set, hyper(0.99f, 0.1f));
  ASSERT_TRUE(opt.ok()) << opt.status();
  std::vector<float> amax = {-1.0f, -1.0f, -1.0f};
  absl::Status s = opt->write_row_amaxes(*elsewhere, {amax.data(), 1});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("elsewhere is not a parameter it optimizes"), std::string::npos) << s.message();
  s = opt->write_row_amaxes(*w, {amax.data(), 4});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("row amaxes of w need rows that divide its 6 values, got rows of 4"), std::string::npos)
      << s.message();
  ASSERT_TRUE(opt->step(0.1f).ok());
  EXPECT_EQ(amax, std::vector<float>(3, -1.0f)) << "refused: nothing written";

  ASSERT_TRUE(opt->write_row_amaxes(*w, {amax.data(), 2}).ok());
  ASSERT_TRUE(opt->step(0.1f).ok());
  const std::vector<float> value = values_of(w->value);
  for (size_t r = 0; r < 3; ++r) {
    EXPECT_EQ(amax[r], std::max(std::fabs(value[2 * r]), std::fabs(value[2 * r + 1]))) << "row " << r;
  }
}

TEST(EngineAdamW, TorchDefaultsOverThreeSteps) {
  ParameterSet set;
  Parameter* w = add(set, "w", {-0.3f}, {2.0f}, true);
  Parameter* gain = add(set, "norm", {-0.3f}, {2.0f}, false);
  ASSERT_NE(w, nullptr);
  ASSERT_NE(gain, nullptr);
  absl::StatusOr<AdamW> opt = AdamW::create(ops(), set, hyper(0.999f, 0.01f));
  ASSERT_TRUE(opt.ok());
  const std::vector<float> grads = {2.0f, 1.0f, -3.0f};
  const std::vector<double> want_w = {-0.30996999995, -0.319260799279154, -0.3184091052245122};
  const std::vector<double> want_gain = {-0.30999999995, -0.319321796279149, -0.3185020283044351};
  for (size_t t = 0; t < grads.size(); ++t) {
    const std::vector<float> g = {grads[t]};
    ASSERT_TRUE(w->grad.upload<float>(g).ok());
    ASSERT_TRUE(gain->grad.upload<float>(g).ok());
    ASSERT_TRUE(opt->step(0.01f).ok());
    expect_close(values_of(w->value)[0], want_w[t]);
    expect_close(values_of(gain->value)[0], want_gain[t]);
  }
}

TEST(EngineAdamW, ResumesFromSavedMomentsAndStepCount) {
  // One optimizer takes two steps; another is rebuilt after the first from the first's
  // moments and step count (what a checkpoint restores) and takes the second: same bits.
  auto make = [](ParameterSet& set) { return add(set, "w", {0.5f, -1.5f, 3.0f}, {0.1f, -0.2f, 0.3f}, true); };
  ParameterSet a_set, b_set;
  Parameter* a = make(a_set);
  Parameter* b = make(b_set);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  absl::StatusOr<AdamW> a_opt = AdamW::create(ops(), a_set, hyper(0.999f, 0.01f));
  ASSERT_TRUE(a_opt.ok());
  ASSERT_TRUE(a_opt->step(0.05f).ok());
  const std::vector<float> after_one = values_of(a->value), m_one = values_of(a_opt->first_moment(0)),
                           v_one = values_of(a_opt->second_moment(0));

  ASSERT_TRUE(b->value.copy_from(a->value).ok());
  absl::StatusOr<AdamW> b_opt = AdamW::create(ops(), b_set, hyper(0.999f, 0.01f));
  ASSERT_TRUE(b_opt.ok());
  ASSERT_TRUE(b_opt->first_moment(0).copy_from(a_opt->first_moment(0)).ok());
  ASSERT_TRUE(b_opt->second_moment(0).copy_from(a_opt->second_moment(0)).ok());
  b_opt->set_steps_taken(1);

  const std::vector<float> g = {-0.4f, 0.05f, 0.0f};
  ASSERT_TRUE(a->grad.upload<float>(g).ok());
  ASSERT_TRUE(b->grad.upload<float>(g).ok());
  ASSERT_TRUE(a_opt->step(0.05f).ok());
  ASSERT_TRUE(b_opt->step(0.05f).ok());
  EXPECT_EQ(values_of(a->value), values_of(b->value));
  EXPECT_EQ(b_opt->steps_taken(), 2);

  // Without the step count the bias correction differs (step 1's instead of step 2's).
  ParameterSet c_set;
  Parameter* c = make(c_set);
  ASSERT_NE(c, nullptr);
  absl::StatusOr<AdamW> c_opt = AdamW::create(ops(), c_set, hyper(0.999f, 0.01f));
  ASSERT_TRUE(c_opt.ok());
  ASSERT_TRUE(c->value.upload<float>(after_one).ok());
  ASSERT_TRUE(c_opt->first_moment(0).upload<float>(m_one).ok());
  ASSERT_TRUE(c_opt->second_moment(0).upload<float>(v_one).ok());
  ASSERT_TRUE(c->grad.upload<float>(g).ok());
  ASSERT_TRUE(c_opt->step(0.05f).ok());
  const std::vector<float> cv = values_of(c->value), av = values_of(a->value);
  EXPECT_NE(cv, av);
  // (3.0 has gradient 0 at step 2: m̂ = β1·m / (1 − β1^t) differs by 1 − 0.9 vs 1 − 0.81.)
  EXPECT_GT(std::abs(cv[2] - av[2]), 1e-3);
}

// ---- gradient clipping: the norm's pieces, and the factor AdamW applies --------------------

TEST(EngineAdamWGradScale, AFactorStepsAsIfEveryGradientWereScaledFirst) {
  // Clipping rides on the update: step(lr, f) must leave the bits that scaling every
  // gradient by f (one fp32 multiply each, here on the host) and then step(lr) would, and
  // not touch the gradients themselves.
  auto make = [](ParameterSet& set) {
    return add(set, "w", {0.5f, -1.25f, 2.0f}, {0.3f, -1.7f, 2.9f}, true) != nullptr &&
           add(set, "g", {1.0f}, {-0.8f}, false) != nullptr;
  };
  for (float f : {0.5f, 1.0f / 13.0f, 1.0f, 0.0f}) {
    ParameterSet fused, scaled;
    ASSERT_TRUE(make(fused));
    ASSERT_TRUE(make(scaled));
    absl::StatusOr<AdamW> fused_opt = AdamW::create(ops(), fused, hyper(0.99f, 0.1f));
    absl::StatusOr<AdamW> scaled_opt = AdamW::create(ops(), scaled, hyper(0.99f, 0.1f));
    ASSERT_TRUE(fused_opt.ok() && scaled_opt.ok());
    for (int step = 0; step < 2; ++step) {
      const std::vector<float> grads_before = values_of(fused.all()[0].grad);
      ASSERT_TRUE(fused_opt->step(0.05f, f).ok());
      EXPECT_EQ(values_of(fused.all()[0].grad), grads_before) << f;
      for (Parameter& p : scaled.all()) {
        std::vector<float> g = values_of(p.grad);
        for (float& x : g) x *= f;
        ASSERT_TRUE(p.grad.upload<float>(g).ok());
      }
      ASSERT_TRUE(scaled_opt->step(0.05f).ok());
      for (size_t i = 0; i < 2; ++i) {
        SCOPED_TRACE(testing::Message() << "factor " << f << " step " << step << " parameter " << i);
        EXPECT_EQ(values_of(fused.all()[i].value), values_of(scaled.all()[i].value));
        EXPECT_EQ(values_of(fused_opt->first_moment(i)), values_of(scaled_opt->first_moment(i)));
        EXPECT_EQ(values_of(fused_opt->second_moment(i)), values_of(scaled_opt->second_moment(i)));
      }
      // The next step's gradients: the scaled set's were scaled in place.
      for (size_t i = 0; i < 2; ++i) {
        ASSERT_TRUE(scaled.all()[i].grad.upload<float>(values_of(fused.all()[i].grad)).ok());
      }
    }
  }
}

TEST(EngineAdamWGradScale, ANonFiniteOrNegativeFactorIsRejected) {
  ParameterSet set;
  Parameter* a = add(set, "a", {1.0f}, {3.0f}, true);
  ASSERT_NE(a, nullptr);
  absl::StatusOr<AdamW> opt = AdamW::create(ops(), set, hyper(0.99f, 0.1f));
  ASSERT_TRUE(opt.ok());
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(), -0.5f}) {
    const absl::Status s = opt->step(0.05f, bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("grad_scale"), std::string::npos) << s;
    EXPECT_EQ(values_of(a->value), (std::vector<float>{1.0f})) << bad;
  }
}

// ---- the pieces clipping is made of: sum of squares, factor, scaling ----------------------

// The gradients' sum of squares as the trainer has it computed (queue_grad_norm, here into
// host memory: the CPU ops').
absl::StatusOr<double> grad_sum_of_squares(const ParameterSet& set) {
  double sum = 0;
  float clip = 0;
  if (absl::Status s = queue_grad_norm(ops(), set, 0.0, &sum, &clip); !s.ok()) return s;
  return sum;
}

TEST(EngineGradSumOfSquares, SumsEveryGradientInDouble) {
  ParameterSet empty;
  absl::StatusOr<double> none = grad_sum_of_squares(empty);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(*none, 0.0);

  ParameterSet set;
  Parameter* a = add(set, "a", {0.0f, 0.0f}, {3.0f, -4.0f}, true);
  Parameter* b = add(set, "b", {0.0f}, {12.0f}, false);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  absl::StatusOr<double> sum = grad_sum_of_squares(set);
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_EQ(*sum, 169.0);
  // It only reads: gradients and values are untouched.
  EXPECT_EQ(values_of(a->grad), (std::vector<float>{3.0f, -4.0f}));
  EXPECT_EQ(values_of(b->grad), (std::vector<float>{12.0f}));
  EXPECT_EQ(values_of(a->value), (std::vector<float>{0.0f, 0.0f}));
}

TEST(EngineGradSumOfSquares, SquaresPastTheFloatRangeStayFinite) {
  // 1e20² = 1e40 overflows fp32; accumulated in double it does not.
  ParameterSet set;
  const float big = 1e20f;
  ASSERT_NE(add(set, "a", {0.0f, 0.0f}, {big, -big}, true), nullptr);
  ASSERT_NE(add(set, "b", {0.0f}, {1.0f}, true), nullptr);
  absl::StatusOr<double> sum = grad_sum_of_squares(set);
  ASSERT_TRUE(sum.ok()) << sum.status();
  const double want = 2.0 * static_cast<double>(big) * static_cast<double>(big) + 1.0;
  EXPECT_TRUE(std::isfinite(*sum));
  EXPECT_DOUBLE_EQ(*sum, want);
  // And small squares are not lost next to big ones in a fp32 sum: 2^24 + 1.
  ParameterSet fine;
  ASSERT_NE(add(fine, "a", {0.0f}, {4096.0f}, true), nullptr);  // 4096² = 2^24
  ASSERT_NE(add(fine, "b", {0.0f}, {1.0f}, true), nullptr);
  sum = grad_sum_of_squares(fine);
  ASSERT_TRUE(sum.ok());
  EXPECT_EQ(*sum, 16777217.0);
}

TEST(EngineGradSumOfSquares, ManyElementsAcrossThreads) {
  // Enough elements that the CPU ops split the sum into chunks.
  ParameterSet set;
  std::vector<float> g(100003);
  double want = 0.0;
  for (size_t i = 0; i < g.size(); ++i) {
    g[i] = static_cast<float>(static_cast<int>(i % 7) - 3);  // small integers: every partial sum is exact
    want += static_cast<double>(g[i]) * g[i];
  }
  ASSERT_NE(add(set, "big", std::vector<float>(g.size(), 0.0f), g, true), nullptr);
  ASSERT_NE(add(set, "small", {0.0f, 0.0f}, {0.5f, 0.25f}, true), nullptr);
  absl::StatusOr<double> sum = grad_sum_of_squares(set);
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_EQ(*sum, want + 0.3125);
}

TEST(EngineGradSumOfSquares, NonFiniteGradientsGiveANonFiniteSum) {
  ParameterSet set;
  Parameter* a = add(set, "a", {0.0f, 0.0f}, {1.0f, std::numeric_limits<float>::quiet_NaN()}, true);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(add(set, "b", {0.0f}, {2.0f}, true), nullptr);
  absl::StatusOr<double> sum = grad_sum_of_squares(set);
  ASSERT_TRUE(sum.ok());
  EXPECT_TRUE(std::isnan(*sum));
  ASSERT_TRUE(a->grad.upload<float>(std::vector<float>{1.0f, -std::numeric_limits<float>::infinity()}).ok());
  sum = grad_sum_of_squares(set);
  ASSERT_TRUE(sum.ok());
  EXPECT_TRUE(std::isinf(*sum));
  EXPECT_GT(*sum, 0.0);
}

// The factor AdamW scales gradients by, from their sum of squares (what queue_grad_norm
// and queue_clip_scale write on every device): 1 at or below max_norm, and when only
// measuring; max_norm / norm above it, in double then rounded once; NaN for a non-finite
// sum, which makes AdamW skip the update.
float clip_scale(double norm, double max_norm) { return ops::clip_scale_from_sum_of_squares(norm * norm, max_norm); }

TEST(EngineClipScale, OneAtOrBelowMax) {
  EXPECT_EQ(clip_scale(13.0, 13.0), 1.0f);  // at max: not above it
  EXPECT_EQ(clip_scale(13.0, 26.0), 1.0f);
  EXPECT_EQ(clip_scale(0.0, 1.0), 1.0f);
  EXPECT_EQ(clip_scale(1e-30, 1.0), 1.0f);
  EXPECT_EQ(clip_scale(13.0, std::numeric_limits<double>::infinity()), 1.0f);
}

TEST(EngineClipScale, OneWhenOnlyMeasuring) {
  for (double max_norm : {0.0, -0.0, -1.0, -std::numeric_limits<double>::infinity(),
                          std::numeric_limits<double>::quiet_NaN()}) {
    EXPECT_EQ(clip_scale(13.0, max_norm), 1.0f) << max_norm;
    EXPECT_EQ(clip_scale(1e30, max_norm), 1.0f) << max_norm;
  }
}

TEST(EngineClipScale, NaNForANonFiniteSum) {
  for (double sum : {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    EXPECT_TRUE(std::isnan(ops::clip_scale_from_sum_of_squares(sum, 1.0))) << sum;
    EXPECT_TRUE(std::isnan(ops::clip_scale_from_sum_of_squares(sum, 0.0))) << sum;
  }
}

TEST(EngineClipScale, MaxOverNormAboveMax) {
  EXPECT_EQ(clip_scale(13.0, 6.5), 0.5f);
  EXPECT_EQ(clip_scale(13.0, 1.0), static_cast<float>(1.0 / 13.0));
  EXPECT_EQ(clip_scale(2.0, 1.0), 0.5f);
  EXPECT_EQ(clip_scale(1e6, 1.0), static_cast<float>(1e-6));
  // Computed in double, then rounded once.
  EXPECT_EQ(clip_scale(3.0, 1.0), static_cast<float>(1.0 / 3.0));
  const float just_above = clip_scale(1.0 + 1e-9, 1.0);
  EXPECT_LE(just_above, 1.0f);
  EXPECT_GT(just_above, 0.999f);
}

TEST(EngineParameterSet, AddFindZeroGrads) {
  ParameterSet set;
  Parameter* a = add(set, "a", {1.0f, 2.0f}, {3.0f, 4.0f}, true);
  ASSERT_NE(a, nullptr);
  // Pointers stay valid as parameters are added.
  for (int i = 0; i < 100; ++i) ASSERT_NE(add(set, absl::StrCat("p", i), {0.0f}, {1.0f}, true), nullptr);
  EXPECT_EQ(set.find("a"), a);
  EXPECT_EQ(values_of(a->value), (std::vector<float>{1.0f, 2.0f}));
  EXPECT_EQ(set.find("missing"), nullptr);
  EXPECT_EQ(set.element_count(), 102);
  absl::StatusOr<Parameter*> again = set.add(Device::cpu(), "a", {1}, ParameterInit::kOnes, false);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(set.zero_grads().ok());
  for (const Parameter& p : set.all()) {
    for (float x : values_of(p.grad)) ASSERT_EQ(x, 0.0f) << p.name;
  }
  EXPECT_EQ(values_of(a->value), (std::vector<float>{1.0f, 2.0f}));  // values untouched
}

}  // namespace
}  // namespace fp8::engine
