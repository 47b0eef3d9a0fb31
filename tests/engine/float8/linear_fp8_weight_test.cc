// Float8Linear with a weight cast outside the layer (an Fp8Weight), as FSDP does: each rank
// casts its shard with the whole weight's scales (Fp8WeightScales, from the whole weight's
// amaxes) and all-gathers the codes. The layer must then produce exactly what it produces
// from the fp32 weight: the same output, grad_input and grad_weight bits and, under
// delayed scaling, the same history. Most tests here take the recipes whose weight is one
// tensorwise cast (an Fp8Tensor serving both GEMMs); Fp8WeightEveryRecipe the others. Also: which recipes take such a weight, the errors the
// others give, and rebinding a weight that moved between forward() and backward().
//
// CPU backend; tensors reach the layer only through Backend memory, as in the product.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "fp8/fp8.h"
#include "gtest/gtest.h"
#include "tests/engine/float8/cpu_buffers.h"
#include "worker/engine/float8/config.h"
#include "worker/engine/float8/linear.h"
#include "worker/engine/float8/weight_scales.h"

namespace fp8::engine {
namespace {

using Recipe = v1::Fp8Spec::Recipe;
using float8_test::backend;
using float8_test::Bytes;
using float8_test::Floats;

std::vector<float> normal(size_t n, float stddev, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Bitwise equality (EXPECT_EQ on floats would call NaN != NaN and -0 == +0).
::testing::AssertionResult same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << "sizes " << a.size() << " vs " << b.size();
  for (size_t i = 0; i < a.size(); ++i) {
    uint32_t x, y;
    std::memcpy(&x, &a[i], 4);
    std::memcpy(&y, &b[i], 4);
    if (x != y) return ::testing::AssertionFailure() << "first difference at " << i << ": " << a[i] << " vs " << b[i];
  }
  return ::testing::AssertionSuccess();
}

Float8LinearConfig recipe(Recipe r, int history = 16) {
  absl::StatusOr<Float8LinearConfig> c = recipe_config(r, history);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : Float8LinearConfig{};
}

struct Shape {
  int64_t m, k, n;  // tokens, in_features, out_features
  size_t mk() const { return static_cast<size_t>(m * k); }
  size_t mn() const { return static_cast<size_t>(m * n); }
  size_t nk() const { return static_cast<size_t>(n * k); }
};

std::unique_ptr<Float8Linear> make_layer(const Shape& s, const Float8LinearConfig& c, const LinearActivations& a = {}) {
  absl::StatusOr<std::unique_ptr<Float8Linear>> layer = Float8Linear::create(backend(), s.k, s.n, c, a);
  EXPECT_TRUE(layer.ok()) << layer.status();
  return layer.ok() ? std::move(*layer) : nullptr;
}

// What numerics() reports now for the layer's weight cast (a failure, and zeros, if none).
CastNumerics weight_numerics(Float8Linear& layer) {
  absl::StatusOr<std::vector<CastNumerics>> n = layer.numerics();
  EXPECT_TRUE(n.ok()) << n.status();
  if (n.ok()) {
    for (const CastNumerics& c : *n) {
      if (c.tensor == TensorKind::kWeight) return c;
    }
  }
  ADD_FAILURE() << "no weight cast reported";
  return {};
}

// A weight cast the way FSDP casts it, outside the layer: Fp8WeightScales with the whole
// weight as its one shard (the weight's amax, the scale the layer's recipe gives it, one
// tensorwise cast into [out, in] codes), and the codes transposed into [in, out]. The
// scale, inverse and amax are copied into buffers of the test's own, which tests then
// change. A layer that takes no fp8 weight gets a cast with the dynamic e4m3 scale, for the
// tests of its refusals.
struct CastWeight {
  explicit CastWeight(const Shape& s) : shape(s), codes(s.nk()), codes_t(s.nk()), scale(1), inv_scale(1), amax(1) {}
  Shape shape;
  Bytes codes, codes_t;
  Floats scale, inv_scale, amax;
  float host_scale = 0.0f, host_amax = 0.0f;
  Format format = Format::kE4M3;

  Fp8Tensor weight(bool with_transpose = true) const {
    Fp8Tensor w;
    w.codes = codes.data();
    w.codes_t = with_transpose ? codes_t.data() : nullptr;
    w.scale = scale.data();
    w.inv_scale = inv_scale.data();
    w.amax = amax.data();
    w.format = format;
    w.rows = shape.n;
    w.cols = shape.k;
    return w;
  }
};

absl::Status no_other_ranks(float*, int64_t) { return absl::OkStatus(); }

void cast_weight(Float8Linear& layer, const Shape& s, const float* w, CastWeight& out) {
  if (layer.info().needs.fp8_weight) {
    absl::StatusOr<std::unique_ptr<Fp8WeightScales>> scales =
        Fp8WeightScales::create(backend(), {{&layer, s.n, s.k}});
    ASSERT_TRUE(scales.ok()) << scales.status();
    ASSERT_OK((*scales)->refresh({w}, /*row_amaxes_current=*/false, no_other_ranks));
    const Fp8Tensor bound = (*scales)->bind(0).output;
    ASSERT_EQ(bound.rows, s.n);
    ASSERT_EQ(bound.cols, s.k);
    ASSERT_OK(backend().copy(out.scale.data(), bound.scale, sizeof(float)));
    ASSERT_OK(backend().copy(out.inv_scale.data(), bound.inv_scale, sizeof(float)));
    ASSERT_OK(backend().copy(out.amax.data(), bound.amax, sizeof(float)));
    ASSERT_OK((*scales)->cast_shard(0, w, out.codes.data(), nullptr));
    out.format = bound.format;
  } else {
    ASSERT_OK(backend().amax({w, DType::kFloat32, s.n, s.k}, Granularity::kTensorwise, out.amax.data()));
    ASSERT_OK(backend().compute_scales(out.amax.data(), 1, Format::kE4M3, false, out.scale.data(),
                                       out.inv_scale.data()));
    CastArgs c;
    c.input = {w, DType::kFloat32, s.n, s.k};
    c.format = Format::kE4M3;
    c.granularity = Granularity::kTensorwise;
    c.scale = out.scale.data();
    c.out = out.codes.data();
    ASSERT_OK(backend().cast(c));
  }
  out.host_amax = out.amax.download()[0];
  out.host_scale = out.scale.download()[0];
  EXPECT_EQ(out.inv_scale.download()[0], inverse_scale(out.host_scale));
  ASSERT_OK(backend().transpose_bytes(out.codes.data(), s.n, s.k, out.codes_t.data()));
}

// The weight scale FSDP's cast gives the layer's weight when its amax is `amax`.
float weight_scale_for(Float8Linear& layer, float amax) {
  const Shape s{16, layer.info().in_features, layer.info().out_features};
  std::vector<float> w(s.nk(), 0.0f);
  w[0] = amax;
  Floats tw(w);
  CastWeight cw(s);
  cast_weight(layer, s, tw.data(), cw);
  return cw.host_scale;
}

// Both layers report the same scale for every cast (numerics()).
void expect_same_cast_scales(Float8Linear& own, Float8Linear& cast) {
  absl::StatusOr<std::vector<CastNumerics>> n_own = own.numerics();
  absl::StatusOr<std::vector<CastNumerics>> n_cast = cast.numerics();
  ASSERT_TRUE(n_own.ok()) << n_own.status();
  ASSERT_TRUE(n_cast.ok()) << n_cast.status();
  ASSERT_EQ(n_cast->size(), n_own->size());
  for (size_t i = 0; i < n_own->size(); ++i) EXPECT_EQ((*n_cast)[i].scale, (*n_own)[i].scale) << i;
}

int delayed_index_of(const Float8Linear& layer, const std::string& name) {
  const std::vector<std::string> names = layer.delayed().names();
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == name) return static_cast<int>(i);
  }
  return -1;
}

void expect_same_scaling_state(const Float8Linear& a, const Float8Linear& b) {
  ASSERT_EQ(a.delayed().count(), b.delayed().count());
  for (int i = 0; i < a.delayed().count(); ++i) {
    SCOPED_TRACE(a.delayed().names()[static_cast<size_t>(i)]);
    EXPECT_TRUE(same_bits(a.delayed().state(i)->history(), b.delayed().state(i)->history()));
    EXPECT_EQ(a.delayed().state(i)->next_scale(), b.delayed().state(i)->next_scale());
  }
  EXPECT_TRUE(same_bits(a.save_scaling_state().value(), b.save_scaling_state().value()));
}

// ---- the same bits as the layer's own cast ---------------------------------------------------

struct ParityCase {
  const char* name;
  Recipe recipe;
  Shape shape;
};

void PrintTo(const ParityCase& c, std::ostream* os) {
  *os << c.name << " " << c.shape.m << "x" << c.shape.k << "x" << c.shape.n;
}

class Fp8WeightParity : public ::testing::TestWithParam<ParityCase> {};

// Three optimizer steps of two micro-batches each, the weight changing between steps; one
// layer takes the fp32 weight, the other the weight cast outside (re-cast per micro-batch,
// as FSDP gathers it per micro-batch).
TEST_P(Fp8WeightParity, ForwardAndBackwardMatchTheFp32WeightBitForBit) {
  const Shape s = GetParam().shape;
  const Float8LinearConfig config = recipe(GetParam().recipe, /*history=*/4);
  std::unique_ptr<Float8Linear> own = make_layer(s, config);
  std::unique_ptr<Float8Linear> cast = make_layer(s, config);
  ASSERT_NE(own, nullptr);
  ASSERT_NE(cast, nullptr);
  ASSERT_TRUE(cast->info().needs.fp8_weight);
  const bool delayed = config.any_delayed();
  const int weight_slot = delayed ? delayed_index_of(*cast, "weight") : -1;
  if (delayed) {
    ASSERT_GE(weight_slot, 0) << "no delayed weight cast";
  }

  const std::vector<float> bias = normal(static_cast<size_t>(s.n), 0.1f, 7);
  Floats tb(bias);
  Floats gw_own(s.nk()), gw_cast(s.nk()), gb_own(static_cast<size_t>(s.n)), gb_cast(static_cast<size_t>(s.n));
  // The last cast weight stays alive for numerics() at the end, which reads its scale.
  std::unique_ptr<CastWeight> cw;
  for (uint32_t step = 0; step < 3; ++step) {
    SCOPED_TRACE(::testing::Message() << "step " << step);
    // The weight's magnitude moves from step to step, so a stale scale would show.
    Floats tw(normal(s.nk(), 0.05f * static_cast<float>(step + 1), 100 + step));
    gw_own.upload(std::vector<float>(s.nk(), 0.0f));
    gw_cast.upload(std::vector<float>(s.nk(), 0.0f));
    gb_own.upload(std::vector<float>(static_cast<size_t>(s.n), 0.0f));
    gb_cast.upload(std::vector<float>(static_cast<size_t>(s.n), 0.0f));
    if (delayed && step > 0) {
      // After a step, the weight is cast with the history's scale whatever its amax.
      const std::optional<float> history_scale = cast->delayed().state(weight_slot)->next_scale();
      ASSERT_TRUE(history_scale.has_value());
      EXPECT_EQ(weight_scale_for(*cast, 1.0f), *history_scale);
      EXPECT_EQ(weight_scale_for(*cast, 1e6f), *history_scale);
    }
    for (uint32_t micro = 0; micro < 2; ++micro) {
      SCOPED_TRACE(::testing::Message() << "micro-batch " << micro);
      const uint32_t seed = 1000 + 10 * step + micro;
      Floats tx(normal(s.mk(), 1.0f + static_cast<float>(micro), seed));
      Floats tg(normal(s.mn(), 1e-3f * static_cast<float>(step + 1), seed + 500));
      Floats out_own(s.mn()), out_cast(s.mn()), gx_own(s.mk()), gx_cast(s.mk());

      auto fresh = std::make_unique<CastWeight>(s);
      cast_weight(*cast, s, tw.data(), *fresh);
      if (::testing::Test::HasFatalFailure()) return;
      if (!delayed || step == 0) {
        // No history yet (or none at all): the dynamic scale of the amax.
        EXPECT_EQ(fresh->host_scale, scale_from_amax(fresh->host_amax, cast->info().needs.weight_output.format, false));
      }

      ASSERT_OK(own->forward(tx.data(), s.m, tw.data(), tb.data(), out_own.data()));
      ASSERT_OK(cast->forward(tx.data(), s.m, fresh->weight(), tb.data(), out_cast.data()));
      cw = std::move(fresh);  // the previous micro-batch's weight is no longer referenced
      EXPECT_TRUE(same_bits(out_cast.download(), out_own.download())) << "output";

      ASSERT_OK(own->backward(tg.data(), gx_own.data(), gw_own.data(), gb_own.data()));
      ASSERT_OK(cast->backward(tg.data(), gx_cast.data(), gw_cast.data(), gb_cast.data()));
      EXPECT_TRUE(same_bits(gx_cast.download(), gx_own.download())) << "grad_input";
      EXPECT_TRUE(same_bits(gw_cast.download(), gw_own.download())) << "grad_weight";
      EXPECT_TRUE(same_bits(gb_cast.download(), gb_own.download())) << "grad_bias";
    }
    if (delayed) {
      Floats amax_own(static_cast<size_t>(own->delayed().count()));
      Floats amax_cast(static_cast<size_t>(cast->delayed().count()));
      ASSERT_OK(own->delayed().write_step_amaxes(amax_own.data()));
      ASSERT_OK(cast->delayed().write_step_amaxes(amax_cast.data()));
      EXPECT_TRUE(same_bits(amax_cast.download(), amax_own.download())) << "step amaxes";
    }
    ASSERT_OK(own->finish_step());
    ASSERT_OK(cast->finish_step());
    expect_same_scaling_state(*cast, *own);
    if (delayed) {
      EXPECT_EQ(cast->delayed().state(weight_slot)->history().size(), step + 1);
      EXPECT_EQ(weight_scale_for(*cast, 123.0f), cast->delayed().state(weight_slot)->next_scale());
    }
  }

  // The numbers the product reports agree too.
  absl::StatusOr<std::vector<CastNumerics>> n_own = own->numerics();
  absl::StatusOr<std::vector<CastNumerics>> n_cast = cast->numerics();
  ASSERT_TRUE(n_own.ok()) << n_own.status();
  ASSERT_TRUE(n_cast.ok()) << n_cast.status();
  ASSERT_EQ(n_cast->size(), n_own->size());
  for (size_t i = 0; i < n_own->size(); ++i) {
    SCOPED_TRACE(tensor_kind_name((*n_own)[i].tensor));
    EXPECT_EQ((*n_cast)[i].tensor, (*n_own)[i].tensor);
    EXPECT_EQ((*n_cast)[i].amax, (*n_own)[i].amax);
    EXPECT_EQ((*n_cast)[i].scale, (*n_own)[i].scale);
    EXPECT_EQ((*n_cast)[i].range_use, (*n_own)[i].range_use);
  }
}

TEST_P(Fp8WeightParity, EvaluationForwardMatchesTheFp32Weight) {
  const Shape s = GetParam().shape;
  const Float8LinearConfig config = recipe(GetParam().recipe, /*history=*/4);
  std::unique_ptr<Float8Linear> layer = make_layer(s, config);
  ASSERT_NE(layer, nullptr);
  Floats tw(normal(s.nk(), 0.1f, 1)), tx(normal(s.mk(), 1.0f, 2)), tg(normal(s.mn(), 1e-3f, 3));
  Floats tb(normal(static_cast<size_t>(s.n), 0.1f, 4));
  Floats gw(s.nk()), out_f32(s.mn()), out_fp8(s.mn()), out_fp8_no_bias(s.mn()), out_f32_no_bias(s.mn());
  for (int step = 0; step < 2; ++step) {  // dynamic scales first, then (delayed) the history's
    SCOPED_TRACE(::testing::Message() << "step " << step);
    CastWeight cw(s);
    cast_weight(*layer, s, tw.data(), cw);
    if (::testing::Test::HasFatalFailure()) return;
    ASSERT_OK(layer->forward_no_grad(tx.data(), s.m, tw.data(), tb.data(), out_f32.data()));
    // An evaluation gather has no transposed copy: forward_no_grad does not need one.
    ASSERT_OK(layer->forward_no_grad(tx.data(), s.m, cw.weight(/*with_transpose=*/false), tb.data(), out_fp8.data()));
    EXPECT_TRUE(same_bits(out_fp8.download(), out_f32.download()));
    ASSERT_OK(layer->forward_no_grad(tx.data(), s.m, tw.data(), nullptr, out_f32_no_bias.data()));
    ASSERT_OK(layer->forward_no_grad(tx.data(), s.m, cw.weight(), nullptr, out_fp8_no_bias.data()));
    EXPECT_TRUE(same_bits(out_fp8_no_bias.download(), out_f32_no_bias.download()));
    // Nothing is left for a backward.
    EXPECT_EQ(layer->backward(tg.data(), nullptr, gw.data(), nullptr).code(), absl::StatusCode::kFailedPrecondition);
    // A training step, so that a delayed layer has a history for the second round.
    ASSERT_OK(layer->forward(tx.data(), s.m, tw.data(), tb.data(), out_f32.data()));
    ASSERT_OK(layer->backward(tg.data(), nullptr, gw.data(), nullptr));
    ASSERT_OK(layer->finish_step());
  }
}

TEST(Fp8WeightDelayed, EvaluationWithAnFp8WeightRecordsNoAmax) {
  const Shape s{32, 64, 48};
  std::unique_ptr<Float8Linear> layer = make_layer(s, recipe(v1::Fp8Spec::DELAYED, 4));
  ASSERT_NE(layer, nullptr);
  const int weight_slot = delayed_index_of(*layer, "weight");
  ASSERT_GE(weight_slot, 0);
  const std::vector<float> w = normal(s.nk(), 0.1f, 1);
  std::vector<float> huge = w;
  for (float& v : huge) v *= 1000.0f;
  Floats tw(w), th(huge), tx(normal(s.mk(), 1.0f, 2)), tg(normal(s.mn(), 1e-3f, 3));
  Floats out(s.mn()), gw(s.nk()), amax(1);
  ASSERT_OK(backend().amax({tw.data(), DType::kFloat32, s.n, s.k}, Granularity::kTensorwise, amax.data()));
  const float w_amax = amax.download()[0];

  // An evaluation pass with a much larger weight, then a training step with the real one:
  // the history holds the real weight's amax only.
  CastWeight real(s), big(s);
  cast_weight(*layer, s, tw.data(), real);
  cast_weight(*layer, s, th.data(), big);
  if (::testing::Test::HasFatalFailure()) return;
  ASSERT_OK(layer->forward_no_grad(tx.data(), s.m, big.weight(false), nullptr, out.data()));
  ASSERT_OK(layer->forward(tx.data(), s.m, real.weight(), nullptr, out.data()));
  ASSERT_OK(layer->backward(tg.data(), nullptr, gw.data(), nullptr));
  ASSERT_OK(layer->finish_step());
  EXPECT_EQ(layer->delayed().state(weight_slot)->history(), std::vector<float>{w_amax});
}

// The layer takes the tensor's scale as given and reads it where it is, through its next
// forward(): the output is the own cast's, and numerics() reports what the buffer holds
// when asked, not a copy taken by the forward.
TEST_P(Fp8WeightParity, TheScaleIsReadWhereTheTensorKeepsIt) {
  const Shape s = GetParam().shape;
  std::unique_ptr<Float8Linear> own = make_layer(s, recipe(GetParam().recipe, 4));
  std::unique_ptr<Float8Linear> cast = make_layer(s, recipe(GetParam().recipe, 4));
  ASSERT_NE(own, nullptr);
  ASSERT_NE(cast, nullptr);
  Floats tw(normal(s.nk(), 0.1f, 1)), tx(normal(s.mk(), 1.0f, 2)), tg(normal(s.mn(), 1e-3f, 3));
  Floats out_own(s.mn()), out_cast(s.mn()), gw_own(s.nk()), gw_cast(s.nk());
  CastWeight cw(s);
  cast_weight(*cast, s, tw.data(), cw);
  if (::testing::Test::HasFatalFailure()) return;
  ASSERT_OK(cast->forward(tx.data(), s.m, cw.weight(), nullptr, out_cast.data()));
  ASSERT_OK(cast->backward(tg.data(), nullptr, gw_cast.data(), nullptr));
  ASSERT_OK(own->forward(tx.data(), s.m, tw.data(), nullptr, out_own.data()));
  ASSERT_OK(own->backward(tg.data(), nullptr, gw_own.data(), nullptr));
  EXPECT_TRUE(same_bits(out_cast.download(), out_own.download()));
  EXPECT_TRUE(same_bits(gw_cast.download(), gw_own.download()));
  expect_same_cast_scales(*own, *cast);
  EXPECT_EQ(weight_numerics(*cast).scale, cw.host_scale);
  cw.scale.upload({0.5f});
  EXPECT_EQ(weight_numerics(*cast).scale, 0.5f);
}

// The amax is read where the tensor keeps it too, except that delayed scaling records it
// into its history when the forward runs.
TEST_P(Fp8WeightParity, TheAmaxIsReadWhereTheTensorKeepsItUnlessDelayedScalingRecordsIt) {
  const Shape s = GetParam().shape;
  const bool delayed = GetParam().recipe == v1::Fp8Spec::DELAYED;
  std::unique_ptr<Float8Linear> layer = make_layer(s, recipe(GetParam().recipe, 4));
  ASSERT_NE(layer, nullptr);
  Floats tw(normal(s.nk(), 0.1f, 1)), tx(normal(s.mk(), 1.0f, 2)), out(s.mn());
  CastWeight cw(s);
  cast_weight(*layer, s, tw.data(), cw);
  if (::testing::Test::HasFatalFailure()) return;
  ASSERT_OK(layer->forward(tx.data(), s.m, cw.weight(), nullptr, out.data()));
  EXPECT_EQ(weight_numerics(*layer).amax, cw.host_amax);
  cw.amax.upload({42.0f});
  EXPECT_EQ(weight_numerics(*layer).amax, delayed ? cw.host_amax : 42.0f);
}

// The scale a weight's delayed history offers a cast made elsewhere: none without delayed
// scaling or before the history holds an amax, then the history's scale and its inverse.
TEST_P(Fp8WeightParity, DelayedWeightScaleIsTheHistorysOnceItHasOne) {
  const Shape s = GetParam().shape;
  std::unique_ptr<Float8Linear> layer = make_layer(s, recipe(GetParam().recipe, 4));
  ASSERT_NE(layer, nullptr);
  EXPECT_FALSE(layer->delayed().weight_scale().has_value());
  Floats tw(normal(s.nk(), 0.1f, 1)), tx(normal(s.mk(), 1.0f, 2)), tg(normal(s.mn(), 1e-3f, 3));
  Floats out(s.mn()), gw(s.nk());
  ASSERT_OK(layer->forward(tx.data(), s.m, tw.data(), nullptr, out.data()));
  ASSERT_OK(layer->backward(tg.data(), nullptr, gw.data(), nullptr));
  ASSERT_OK(layer->finish_step());
  const std::optional<Float8Linear::DelayedCasts::ScaleRef> scale = layer->delayed().weight_scale();
  if (GetParam().recipe != v1::Fp8Spec::DELAYED) {
    EXPECT_FALSE(scale.has_value());
    return;
  }
  ASSERT_TRUE(scale.has_value());
  const std::optional<float> history = layer->delayed().state(delayed_index_of(*layer, "weight"))->next_scale();
  ASSERT_TRUE(history.has_value());
  EXPECT_EQ(Floats::download(scale->scale, 1)[0], *history);
  EXPECT_EQ(Floats::download(scale->inv_scale, 1)[0], inverse_scale(*history));
}

// A weight cast outside the layer reaches it as codes only, so its saturation and
// underflow cannot be counted there: measuring reports it unmeasured, and measures the
// input and grad_output as usual, with the same counts as a layer casting its own weight.
TEST_P(Fp8WeightParity, MeasuringLeavesTheFp8WeightUnmeasured) {
  const Shape s = GetParam().shape;
  std::unique_ptr<Float8Linear> own = make_layer(s, recipe(GetParam().recipe, 4));
  std::unique_ptr<Float8Linear> cast = make_layer(s, recipe(GetParam().recipe, 4));
  ASSERT_NE(own, nullptr);
  ASSERT_NE(cast, nullptr);
  own->set_measuring(true);
  cast->set_measuring(true);
  Floats tw(normal(s.nk(), 0.1f, 1)), tx(normal(s.mk(), 1.0f, 2)), tg(normal(s.mn(), 1e-3f, 3));
  Floats out_own(s.mn()), out_cast(s.mn()), gw(s.nk());
  CastWeight cw(s);
  cast_weight(*cast, s, tw.data(), cw);
  if (::testing::Test::HasFatalFailure()) return;
  ASSERT_OK(own->forward(tx.data(), s.m, tw.data(), nullptr, out_own.data()));
  ASSERT_OK(cast->forward(tx.data(), s.m, cw.weight(), nullptr, out_cast.data()));
  EXPECT_TRUE(same_bits(out_cast.download(), out_own.download()));
  ASSERT_OK(own->backward(tg.data(), nullptr, gw.data(), nullptr));
  ASSERT_OK(cast->backward(tg.data(), nullptr, gw.data(), nullptr));
  absl::StatusOr<std::vector<CastNumerics>> n_own = own->numerics();
  absl::StatusOr<std::vector<CastNumerics>> n_cast = cast->numerics();
  ASSERT_TRUE(n_own.ok()) << n_own.status();
  ASSERT_TRUE(n_cast.ok()) << n_cast.status();
  ASSERT_EQ(n_cast->size(), n_own->size());
  for (size_t i = 0; i < n_own->size(); ++i) {
    const CastNumerics &o = (*n_own)[i], &c = (*n_cast)[i];
    SCOPED_TRACE(tensor_kind_name(c.tensor));
    EXPECT_TRUE(o.measured);
    if (c.tensor == TensorKind::kWeight) {
      EXPECT_FALSE(c.measured);
      EXPECT_EQ(c.saturated_ratio, 0.0f);
      EXPECT_EQ(c.underflow_ratio, 0.0f);
    } else {
      EXPECT_TRUE(c.measured);
      EXPECT_EQ(c.saturated, o.saturated);
      EXPECT_EQ(c.underflow, o.underflow);
      EXPECT_EQ(c.elements, o.elements);
    }
  }
}

// The bytes of `host` as bf16 activations (rounded to nearest even).
std::vector<uint8_t> bf16_bytes(const std::vector<float>& host) {
  std::vector<uint8_t> bytes(host.size() * sizeof(uint16_t));
  for (size_t i = 0; i < host.size(); ++i) {
    const uint16_t b = float_to_bf16(host[i]);
    std::memcpy(bytes.data() + i * sizeof b, &b, sizeof b);
  }
  return bytes;
}

// ForwardAndBackwardMatchTheFp32WeightBitForBit with bf16 activations (a bf16 model under
// FSDP): the casts of input and grad_output read bf16, output and grad_input are written in
// bf16, and the weight cast outside the layer must still give the layer's own bits.
TEST_P(Fp8WeightParity, Bf16ActivationsMatchTheFp32WeightBitForBit) {
  const Shape s = GetParam().shape;
  const Float8LinearConfig config = recipe(GetParam().recipe, /*history=*/4);
  const LinearActivations bf16{DType::kBFloat16, DType::kBFloat16};
  std::unique_ptr<Float8Linear> own = make_layer(s, config, bf16);
  std::unique_ptr<Float8Linear> cast = make_layer(s, config, bf16);
  ASSERT_NE(own, nullptr);
  ASSERT_NE(cast, nullptr);
  ASSERT_TRUE(cast->info().needs.fp8_weight);
  const size_t bf16_size = sizeof(uint16_t);
  Floats tb(normal(static_cast<size_t>(s.n), 0.1f, 7));
  for (uint32_t step = 0; step < 3; ++step) {
    SCOPED_TRACE(::testing::Message() << "step " << step);
    Floats tw(normal(s.nk(), 0.05f * static_cast<float>(step + 1), 100 + step));
    Floats gw_own(s.nk()), gw_cast(s.nk()), gb_own(static_cast<size_t>(s.n)), gb_cast(static_cast<size_t>(s.n));
    for (uint32_t micro = 0; micro < 2; ++micro) {
      SCOPED_TRACE(::testing::Message() << "micro-batch " << micro);
      const uint32_t seed = 1000 + 10 * step + micro;
      Bytes tx(bf16_bytes(normal(s.mk(), 1.0f + static_cast<float>(micro), seed)));
      Bytes tg(bf16_bytes(normal(s.mn(), 1e-3f * static_cast<float>(step + 1), seed + 500)));
      Bytes out_own(s.mn() * bf16_size), out_cast(s.mn() * bf16_size);
      Bytes gx_own(s.mk() * bf16_size), gx_cast(s.mk() * bf16_size);
      CastWeight cw(s);
      cast_weight(*cast, s, tw.data(), cw);
      if (::testing::Test::HasFatalFailure()) return;

      ASSERT_OK(own->forward(tx.data(), s.m, tw.data(), tb.data(), out_own.data()));
      ASSERT_OK(cast->forward(tx.data(), s.m, cw.weight(), tb.data(), out_cast.data()));
      EXPECT_EQ(out_cast.download(), out_own.download()) << "output";
      ASSERT_OK(own->backward(tg.data(), gx_own.data(), gw_own.data(), gb_own.data()));
      ASSERT_OK(cast->backward(tg.data(), gx_cast.data(), gw_cast.data(), gb_cast.data()));
      EXPECT_EQ(gx_cast.download(), gx_own.download()) << "grad_input";
      EXPECT_TRUE(same_bits(gw_cast.download(), gw_own.download())) << "grad_weight";
      EXPECT_TRUE(same_bits(gb_cast.download(), gb_own.download())) << "grad_bias";
    }
    ASSERT_OK(own->finish_step());
    ASSERT_OK(cast->finish_step());
    expect_same_scaling_state(*cast, *own);
  }

  // An evaluation forward with codes that have no transpose.
  Floats tw(normal(s.nk(), 0.1f, 1));
  Bytes tx(bf16_bytes(normal(s.mk(), 1.0f, 2))), out_own(s.mn() * bf16_size), out_cast(s.mn() * bf16_size);
  CastWeight cw(s);
  cast_weight(*cast, s, tw.data(), cw);
  if (::testing::Test::HasFatalFailure()) return;
  ASSERT_OK(own->forward_no_grad(tx.data(), s.m, tw.data(), tb.data(), out_own.data()));
  ASSERT_OK(cast->forward_no_grad(tx.data(), s.m, cw.weight(/*with_transpose=*/false), tb.data(), out_cast.data()));
  EXPECT_EQ(out_cast.download(), out_own.download()) << "evaluation output";
}

std::vector<ParityCase> parity_cases() {
  std::vector<ParityCase> cases;
  for (const Shape& s : {Shape{32, 64, 48}, Shape{19, 33, 17}}) {
    cases.push_back({"tensorwise", v1::Fp8Spec::TENSORWISE, s});
    cases.push_back({"delayed", v1::Fp8Spec::DELAYED, s});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Recipes, Fp8WeightParity, ::testing::ValuesIn(parity_cases()),
                         [](const ::testing::TestParamInfo<ParityCase>& info) {
                           const Shape& s = info.param.shape;
                           return std::string(info.param.name) + "_" + std::to_string(s.m) + "x" +
                                  std::to_string(s.k) + "x" + std::to_string(s.n);
                         });

// ---- which layers take one ----------------------------------------------------------------------

TEST(Fp8WeightSupport, EveryFp8RecipeTakesAnFp8Weight) {
  const Shape s{32, 128, 256};
  struct Expected {
    Recipe recipe;
    bool takes;
    Granularity output, grad_input;
    bool shared;
  };
  constexpr auto kT = Granularity::kTensorwise;
  const std::vector<Expected> expected = {
      {v1::Fp8Spec::TENSORWISE, true, kT, kT, true},
      {v1::Fp8Spec::DELAYED, true, kT, kT, true},
      {v1::Fp8Spec::ROWWISE, true, Granularity::kRowwise, Granularity::kColumnwise, false},
      {v1::Fp8Spec::ROWWISE_WITH_GW_HP, true, Granularity::kRowwise, kT, false},
      {v1::Fp8Spec::BLOCKWISE, true, Granularity::kBlock128x128, Granularity::kBlock128x128, true},
      {v1::Fp8Spec::NONE, false, kT, kT, false}};
  for (const Expected& e : expected) {
    SCOPED_TRACE(v1::Fp8Spec::Recipe_Name(e.recipe));
    std::unique_ptr<Float8Linear> layer = make_layer(s, recipe(e.recipe));
    ASSERT_NE(layer, nullptr);
    const Float8LinearNeeds& needs = layer->info().needs;
    EXPECT_EQ(needs.fp8_weight, e.takes);
    if (!e.takes) continue;
    EXPECT_EQ(needs.weight_output.format, Format::kE4M3);
    EXPECT_EQ(needs.weight_grad_input.format, Format::kE4M3);
    EXPECT_EQ(needs.weight_output.granularity, e.output);
    EXPECT_EQ(needs.weight_grad_input.granularity, e.grad_input);
    EXPECT_EQ(needs.weight_codes_shared, e.shared);
  }
}

// A layer whose grad_input GEMM reads the weight in high precision (here: mixed, the long
// form keeping the weight's operand in high precision) cannot take one.
Float8LinearConfig grad_input_weight_high_precision() {
  Float8LinearConfig c = recipe(v1::Fp8Spec::TENSORWISE);
  c.grad_input.weight = CastConfig{};
  return c;
}

TEST(Fp8WeightSupport, LayersThatCannotTakeOneRefuseIt) {
  const Shape s{32, 64, 48};
  for (const Float8LinearConfig& config : {recipe(v1::Fp8Spec::NONE), grad_input_weight_high_precision()}) {
    std::unique_ptr<Float8Linear> layer = make_layer(s, config);
    ASSERT_NE(layer, nullptr);
    ASSERT_FALSE(layer->info().needs.fp8_weight);
    Floats tw(normal(s.nk(), 0.1f, 1)), tx(normal(s.mk(), 1.0f, 2)), tg(normal(s.mn(), 1e-3f, 3));
    const std::vector<float> sentinel(s.mn(), 12345.0f);
    Floats out(sentinel), gw(s.nk());
    // A well-formed Fp8Tensor, cast with a tensorwise e4m3 scale.
    CastWeight cw(s);
    cast_weight(*layer, s, tw.data(), cw);
    if (::testing::Test::HasFatalFailure()) return;
    EXPECT_EQ(layer->forward(tx.data(), s.m, cw.weight(), nullptr, out.data()).code(),
              absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(layer->forward_no_grad(tx.data(), s.m, cw.weight(), nullptr, out.data()).code(),
              absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(out.download(), sentinel) << "a refused forward wrote its output";
    // The refused forward left nothing to differentiate.
    EXPECT_EQ(layer->backward(tg.data(), nullptr, gw.data(), nullptr).code(), absl::StatusCode::kFailedPrecondition);
    // Nor can a forward with the fp32 weight be rebound to codes.
    ASSERT_OK(layer->forward(tx.data(), s.m, tw.data(), nullptr, out.data()));
    EXPECT_EQ(layer->rebind_weight(cw.weight()).code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(Fp8WeightSupport, AnIncompleteOrMisshapenFp8TensorIsInvalid) {
  const Shape s{32, 64, 48};
  std::unique_ptr<Float8Linear> layer = make_layer(s, recipe(v1::Fp8Spec::TENSORWISE));
  ASSERT_NE(layer, nullptr);
  Floats tw(normal(s.nk(), 0.1f, 1)), tx(normal(s.mk(), 1.0f, 2)), out(s.mn());
  CastWeight cw(s);
  cast_weight(*layer, s, tw.data(), cw);
  if (::testing::Test::HasFatalFailure()) return;
  for (int wrong = 0; wrong < 8; ++wrong) {
    SCOPED_TRACE(wrong);
    Fp8Tensor w = cw.weight();
    if (wrong == 0) w.codes = nullptr;
    if (wrong == 1) w.scale = nullptr;
    if (wrong == 2) w.inv_scale = nullptr;
    if (wrong == 3) w.amax = nullptr;
    if (wrong == 4) w.format = Format::kE5M2;
    if (wrong == 5) w.granularity = Granularity::kRowwise;
    if (wrong == 6) w.rows = s.n - 1;
    if (wrong == 7) w.cols = s.k + 16;
    EXPECT_EQ(layer->forward(tx.data(), s.m, w, nullptr, out.data()).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(layer->forward_no_grad(tx.data(), s.m, w, nullptr, out.data()).code(),
              absl::StatusCode::kInvalidArgument);
  }
  // A weight cast already has no use for the weight's row amaxes: handing them is a mistake.
  Floats row_amax(std::vector<float>(static_cast<size_t>(s.n), 1.0f));
  const absl::Status hinted = layer->forward(tx.data(), s.m, cw.weight(), nullptr, out.data(),
                                             {.weight_row_amax = row_amax.data()});
  EXPECT_EQ(hinted.code(), absl::StatusCode::kInvalidArgument) << hinted;
  EXPECT_NE(hinted.message().find("weight_row_amax"), std::string::npos) << hinted;
}

TEST(Fp8WeightSupport, TensorwiseWeightScaleIsTheDynamicScaleOfTheAmax) {
  std::unique_ptr<Float8Linear> tensorwise = make_layer({32, 64, 48}, recipe(v1::Fp8Spec::TENSORWISE));
  ASSERT_NE(tensorwise, nullptr);
  for (float amax : {0.0f, 1e-3f, 1.0f, 448.0f, 3e4f}) {
    EXPECT_EQ(weight_scale_for(*tensorwise, amax), scale_from_amax(amax, Format::kE4M3, false)) << amax;
  }
}

// ---- the weight moved between forward() and backward() ------------------------------------

// Every recipe: forward with one copy of the weight, then rebind to another copy at a new
// address and scribble over the first: backward must give what it gives without the move.
TEST(Fp8WeightRebind, BackwardAfterRebindingTheFp32WeightMatches) {
  const Shape s{32, 64, 48};
  for (Recipe r : {v1::Fp8Spec::TENSORWISE, v1::Fp8Spec::DELAYED, v1::Fp8Spec::ROWWISE,
                   v1::Fp8Spec::ROWWISE_WITH_GW_HP, v1::Fp8Spec::NONE}) {
    SCOPED_TRACE(v1::Fp8Spec::Recipe_Name(r));
    std::unique_ptr<Float8Linear> moved = make_layer(s, recipe(r));
    std::unique_ptr<Float8Linear> still = make_layer(s, recipe(r));
    ASSERT_NE(moved, nullptr);
    ASSERT_NE(still, nullptr);
    const std::vector<float> w = normal(s.nk(), 0.1f, 1);
    for (int step = 0; step < 2; ++step) {
      SCOPED_TRACE(::testing::Message() << "step " << step);
      Floats w_first(w), w_still(w), tx(normal(s.mk(), 1.0f, 2 + step)), tg(normal(s.mn(), 1e-3f, 5 + step));
      Floats out_m(s.mn()), out_s(s.mn()), gx_m(s.mk()), gx_s(s.mk()), gw_m(s.nk()), gw_s(s.nk());
      ASSERT_OK(moved->forward(tx.data(), s.m, w_first.data(), nullptr, out_m.data()));
      ASSERT_OK(still->forward(tx.data(), s.m, w_still.data(), nullptr, out_s.data()));
      auto w_second = std::make_unique<Floats>(w);
      ASSERT_NE(w_second->data(), w_first.data());
      ASSERT_OK(moved->rebind_weight(w_second->data()));
      w_first.upload(std::vector<float>(s.nk(), 7.0f));  // the old memory now holds something else
      ASSERT_OK(moved->backward(tg.data(), gx_m.data(), gw_m.data(), nullptr));
      ASSERT_OK(still->backward(tg.data(), gx_s.data(), gw_s.data(), nullptr));
      EXPECT_TRUE(same_bits(gx_m.download(), gx_s.download())) << "grad_input";
      EXPECT_TRUE(same_bits(gw_m.download(), gw_s.download())) << "grad_weight";
      ASSERT_OK(moved->finish_step());
      ASSERT_OK(still->finish_step());
      expect_same_scaling_state(*moved, *still);
    }
  }
}

// With bf16 activations a high-precision GEMM reads the weight as the bf16 copy the forward
// made, so a backward after the weight moved (and its old memory changed) needs nothing
// from either fp32 copy.
TEST(Fp8WeightRebind, BackwardAfterRebindingWithBf16ActivationsMatches) {
  const Shape s{32, 64, 48};
  const LinearActivations bf16{DType::kBFloat16, DType::kBFloat16};
  for (Recipe r : {v1::Fp8Spec::NONE, v1::Fp8Spec::ROWWISE_WITH_GW_HP}) {
    SCOPED_TRACE(v1::Fp8Spec::Recipe_Name(r));
    std::unique_ptr<Float8Linear> moved = make_layer(s, recipe(r), bf16);
    std::unique_ptr<Float8Linear> still = make_layer(s, recipe(r), bf16);
    ASSERT_NE(moved, nullptr);
    ASSERT_NE(still, nullptr);
    const std::vector<float> w = normal(s.nk(), 0.1f, 1);
    Floats w_first(w), w_still(w), gw_m(s.nk()), gw_s(s.nk());
    Bytes tx(bf16_bytes(normal(s.mk(), 1.0f, 2))), tg(bf16_bytes(normal(s.mn(), 1e-3f, 3)));
    Bytes out_m(s.mn() * sizeof(uint16_t)), out_s(s.mn() * sizeof(uint16_t));
    Bytes gx_m(s.mk() * sizeof(uint16_t)), gx_s(s.mk() * sizeof(uint16_t));
    ASSERT_OK(moved->forward(tx.data(), s.m, w_first.data(), nullptr, out_m.data()));
    ASSERT_OK(still->forward(tx.data(), s.m, w_still.data(), nullptr, out_s.data()));
    Floats w_second(w);
    ASSERT_OK(moved->rebind_weight(w_second.data()));
    w_first.upload(std::vector<float>(s.nk(), 7.0f));
    ASSERT_OK(moved->backward(tg.data(), gx_m.data(), gw_m.data(), nullptr));
    ASSERT_OK(still->backward(tg.data(), gx_s.data(), gw_s.data(), nullptr));
    EXPECT_EQ(gx_m.download(), gx_s.download()) << "grad_input";
    EXPECT_TRUE(same_bits(gw_m.download(), gw_s.download())) << "grad_weight";
  }
}

TEST(Fp8WeightRebind, RebindNeedsAForwardAndAWeight) {
  const Shape s{32, 64, 48};
  std::unique_ptr<Float8Linear> layer = make_layer(s, recipe(v1::Fp8Spec::TENSORWISE));
  ASSERT_NE(layer, nullptr);
  Floats tw(normal(s.nk(), 0.1f, 1)), tx(normal(s.mk(), 1.0f, 2)), out(s.mn());
  CastWeight cw(s);
  cast_weight(*layer, s, tw.data(), cw);
  if (::testing::Test::HasFatalFailure()) return;
  EXPECT_EQ(layer->rebind_weight(tw.data()).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(layer->rebind_weight(cw.weight()).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_OK(layer->forward(tx.data(), s.m, cw.weight(), nullptr, out.data()));
  EXPECT_EQ(layer->rebind_weight(static_cast<const float*>(nullptr)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(layer->rebind_weight(cw.weight(/*with_transpose=*/false)).code(), absl::StatusCode::kInvalidArgument);
  // The backward reads codes_t alone, but every scale must be there.
  Fp8Tensor no_scale = cw.weight();
  no_scale.scale = nullptr;
  EXPECT_EQ(layer->rebind_weight(no_scale).code(), absl::StatusCode::kInvalidArgument);
  // After an evaluation forward there is nothing to rebind.
  ASSERT_OK(layer->forward_no_grad(tx.data(), s.m, cw.weight(), nullptr, out.data()));
  EXPECT_EQ(layer->rebind_weight(cw.weight()).code(), absl::StatusCode::kFailedPrecondition);
}

// FSDP's own sequence: the forward gets the gathered codes without a transpose (they are
// freed after the forward), the backward gathers them again into new memory, transposes
// them and rebinds. The old memory is gone (here: zeroed) by then.
TEST(Fp8WeightRebind, BackwardAfterRebindingTheFp8WeightMatches) {
  const Shape s{32, 64, 48};
  for (Recipe r : {v1::Fp8Spec::TENSORWISE, v1::Fp8Spec::DELAYED}) {
    SCOPED_TRACE(v1::Fp8Spec::Recipe_Name(r));
    std::unique_ptr<Float8Linear> moved = make_layer(s, recipe(r, 4));
    std::unique_ptr<Float8Linear> still = make_layer(s, recipe(r, 4));
    ASSERT_NE(moved, nullptr);
    ASSERT_NE(still, nullptr);
    for (uint32_t step = 0; step < 3; ++step) {
      SCOPED_TRACE(::testing::Message() << "step " << step);
      Floats tw(normal(s.nk(), 0.05f * static_cast<float>(step + 1), 10 + step));
      Floats tx(normal(s.mk(), 1.0f, 20 + step)), tg(normal(s.mn(), 1e-3f, 30 + step));
      Floats out_m(s.mn()), out_s(s.mn()), gx_m(s.mk()), gx_s(s.mk()), gw_m(s.nk()), gw_s(s.nk());
      auto first = std::make_unique<CastWeight>(s);
      cast_weight(*moved, s, tw.data(), *first);
      if (::testing::Test::HasFatalFailure()) return;
      ASSERT_OK(moved->forward(tx.data(), s.m, first->weight(/*with_transpose=*/false), nullptr, out_m.data()));
      ASSERT_OK(still->forward(tx.data(), s.m, tw.data(), nullptr, out_s.data()));
      EXPECT_TRUE(same_bits(out_m.download(), out_s.download())) << "output";

      // The second gather: the same codes and scales in new memory, with the transpose.
      CastWeight second(s);
      ASSERT_OK(backend().copy(second.codes.data(), first->codes.data(), s.nk()));
      ASSERT_OK(backend().transpose_bytes(second.codes.data(), s.n, s.k, second.codes_t.data()));
      ASSERT_OK(backend().copy(second.scale.data(), first->scale.data(), sizeof(float)));
      ASSERT_OK(backend().copy(second.inv_scale.data(), first->inv_scale.data(), sizeof(float)));
      ASSERT_OK(backend().copy(second.amax.data(), first->amax.data(), sizeof(float)));
      ASSERT_OK(backend().fill_zero(first->codes.data(), s.nk()));
      ASSERT_OK(backend().fill_zero(first->codes_t.data(), s.nk()));
      first->scale.upload({0.0f});
      first->inv_scale.upload({0.0f});
      ASSERT_OK(moved->rebind_weight(second.weight()));
      first.reset();  // freed, as FSDP frees the forward's gather

      ASSERT_OK(moved->backward(tg.data(), gx_m.data(), gw_m.data(), nullptr));
      ASSERT_OK(still->backward(tg.data(), gx_s.data(), gw_s.data(), nullptr));
      EXPECT_TRUE(same_bits(gx_m.download(), gx_s.download())) << "grad_input";
      EXPECT_TRUE(same_bits(gw_m.download(), gw_s.download())) << "grad_weight";
      ASSERT_OK(moved->finish_step());
      ASSERT_OK(still->finish_step());
      expect_same_scaling_state(*moved, *still);
    }
  }
}

// backward() needs the transposed codes. A forward given codes without them (FSDP's
// forward-only gather) and no rebind_weight() before the backward is a caller error the
// layer must report, not paper over with transposed codes of some earlier weight.
void expect_backward_without_transposed_codes_refused(bool earlier_fp32_forward) {
  const Shape s{32, 64, 48};
  std::unique_ptr<Float8Linear> layer = make_layer(s, recipe(v1::Fp8Spec::TENSORWISE));
  ASSERT_NE(layer, nullptr);
  Floats old_w(normal(s.nk(), 0.5f, 9)), tw(normal(s.nk(), 0.1f, 1)), tx(normal(s.mk(), 1.0f, 2));
  Floats tg(normal(s.mn(), 1e-3f, 3)), out(s.mn()), gx(s.mk()), gw(s.nk());
  if (earlier_fp32_forward) {
    // Leaves the layer's own transposed codes of old_w behind.
    ASSERT_OK(layer->forward(tx.data(), s.m, old_w.data(), nullptr, out.data()));
    ASSERT_OK(layer->backward(tg.data(), gx.data(), gw.data(), nullptr));
    ASSERT_OK(layer->finish_step());
  }
  CastWeight cw(s);
  cast_weight(*layer, s, tw.data(), cw);
  if (::testing::Test::HasFatalFailure()) return;
  ASSERT_OK(layer->forward(tx.data(), s.m, cw.weight(/*with_transpose=*/false), nullptr, out.data()));
  const absl::Status st = layer->backward(tg.data(), gx.data(), gw.data(), nullptr);
  EXPECT_FALSE(st.ok()) << "backward() ran without the weight's transposed codes";
}

TEST(Fp8WeightRebind, BackwardWithoutTransposedCodesIsRefused) {
  expect_backward_without_transposed_codes_refused(/*earlier_fp32_forward=*/false);
}

// After the layer once cast a weight of its own, a forward with an Fp8Tensor lacking codes_t
// must not let the backward fall back to the layer's own (stale) transposed codes.
TEST(Fp8WeightRebind, BackwardWithoutTransposedCodesIsRefusedAfterAnFp32Forward) {
  expect_backward_without_transposed_codes_refused(/*earlier_fp32_forward=*/true);
}

// A layer may alternate between its own casts and codes cast elsewhere (a single-process
// evaluation, then FSDP training, or the reverse): each forward uses what it was given.
TEST(Fp8WeightRebind, SwitchingBetweenFp32AndFp8WeightsUsesTheLatest) {
  const Shape s{32, 64, 48};
  std::unique_ptr<Float8Linear> layer = make_layer(s, recipe(v1::Fp8Spec::TENSORWISE));
  std::unique_ptr<Float8Linear> plain = make_layer(s, recipe(v1::Fp8Spec::TENSORWISE));
  ASSERT_NE(layer, nullptr);
  ASSERT_NE(plain, nullptr);
  Floats w1(normal(s.nk(), 0.1f, 1)), w2(normal(s.nk(), 0.3f, 2)), tx(normal(s.mk(), 1.0f, 3));
  Floats tg(normal(s.mn(), 1e-3f, 4));
  CastWeight c1(s);
  cast_weight(*layer, s, w1.data(), c1);
  if (::testing::Test::HasFatalFailure()) return;
  // fp8 weight 1, then fp32 weight 2, then fp8 weight 1 again: each backward matches a
  // layer that only ever saw fp32 weights.
  struct Pass {
    bool fp8;
    const Floats* w;
  };
  for (const Pass& p : {Pass{true, &w1}, Pass{false, &w2}, Pass{true, &w1}, Pass{false, &w1}}) {
    SCOPED_TRACE(::testing::Message() << (p.fp8 ? "fp8" : "fp32") << " weight " << (p.w == &w1 ? 1 : 2));
    Floats out_a(s.mn()), out_b(s.mn()), gx_a(s.mk()), gx_b(s.mk()), gw_a(s.nk()), gw_b(s.nk());
    if (p.fp8) {
      ASSERT_OK(layer->forward(tx.data(), s.m, c1.weight(), nullptr, out_a.data()));
    } else {
      ASSERT_OK(layer->forward(tx.data(), s.m, p.w->data(), nullptr, out_a.data()));
    }
    ASSERT_OK(plain->forward(tx.data(), s.m, p.w->data(), nullptr, out_b.data()));
    EXPECT_TRUE(same_bits(out_a.download(), out_b.download())) << "output";
    ASSERT_OK(layer->backward(tg.data(), gx_a.data(), gw_a.data(), nullptr));
    ASSERT_OK(plain->backward(tg.data(), gx_b.data(), gw_b.data(), nullptr));
    EXPECT_TRUE(same_bits(gx_a.download(), gx_b.download())) << "grad_input";
    EXPECT_TRUE(same_bits(gw_a.download(), gw_b.download())) << "grad_weight";
    ASSERT_OK(layer->finish_step());
    ASSERT_OK(plain->finish_step());
  }
}

// ---- every recipe's Fp8Weight --------------------------------------------------------------------

// The rowwise recipes (a cast of the weight for each GEMM: rows and columns, or rows and one
// tensorwise scale) and blockwise (one block cast that both GEMMs read): a layer given the
// Fp8Weight that Fp8WeightScales casts (the whole weight as one shard, the grad_input
// codes transposed as FSDP transposes them after its gather) computes what it computes
// from the fp32 weight, bit for bit, over steps whose weight changes; the forward gets no
// grad_input codes, the backward rebinds with them, as under FSDP.
class Fp8WeightEveryRecipe : public ::testing::TestWithParam<Recipe> {};

TEST_P(Fp8WeightEveryRecipe, ForwardAndBackwardMatchTheFp32WeightBitForBit) {
  const Shape s{128, 128, 256};  // blocks contract over the tokens too
  const Float8LinearConfig config = recipe(GetParam());
  std::unique_ptr<Float8Linear> own = make_layer(s, config);
  std::unique_ptr<Float8Linear> cast = make_layer(s, config);
  ASSERT_NE(own, nullptr);
  ASSERT_NE(cast, nullptr);
  ASSERT_TRUE(cast->info().needs.fp8_weight);
  for (uint32_t step = 0; step < 3; ++step) {
    SCOPED_TRACE(::testing::Message() << "step " << step);
    Floats tw(normal(s.nk(), 0.05f * static_cast<float>(step + 1), 100 + step));
    Floats tx(normal(s.mk(), 1.0f, 200 + step)), tg(normal(s.mn(), 1e-3f, 300 + step));
    absl::StatusOr<std::unique_ptr<Fp8WeightScales>> scales = Fp8WeightScales::create(backend(), {{cast.get(), s.n, s.k}});
    ASSERT_TRUE(scales.ok()) << scales.status();
    ASSERT_OK((*scales)->refresh({tw.data()}, /*row_amaxes_current=*/false, no_other_ranks));
    const bool own_codes = (*scales)->has_grad_input_codes(0);
    EXPECT_EQ(own_codes, !cast->info().needs.weight_codes_shared);
    Bytes codes(s.nk()), grad_input_codes(s.nk()), codes_t(s.nk());
    ASSERT_OK((*scales)->cast_shard(0, tw.data(), codes.data(), grad_input_codes.data()));
    ASSERT_OK(backend().transpose_bytes((own_codes ? grad_input_codes : codes).data(), s.n, s.k, codes_t.data()));
    Fp8Weight w = (*scales)->bind(0);
    w.output.codes = codes.data();

    Floats out_own(s.mn()), out_cast(s.mn()), gx_own(s.mk()), gx_cast(s.mk());
    Floats gw_own(std::vector<float>(s.nk(), 0.0f)), gw_cast(std::vector<float>(s.nk(), 0.0f));
    ASSERT_OK(own->forward(tx.data(), s.m, tw.data(), nullptr, out_own.data()));
    ASSERT_OK(cast->forward(tx.data(), s.m, w, nullptr, out_cast.data()));
    EXPECT_TRUE(same_bits(out_cast.download(), out_own.download())) << "output";
    // Without its grad_input codes the backward refuses; rebound with them it runs.
    EXPECT_EQ(cast->backward(tg.data(), gx_cast.data(), gw_cast.data(), nullptr).code(),
              absl::StatusCode::kFailedPrecondition);
    w.grad_input.codes_t = codes_t.data();
    ASSERT_OK(cast->rebind_weight(w));
    ASSERT_OK(own->backward(tg.data(), gx_own.data(), gw_own.data(), nullptr));
    ASSERT_OK(cast->backward(tg.data(), gx_cast.data(), gw_cast.data(), nullptr));
    EXPECT_TRUE(same_bits(gx_cast.download(), gx_own.download())) << "grad_input";
    EXPECT_TRUE(same_bits(gw_cast.download(), gw_own.download())) << "grad_weight";
    ASSERT_OK(own->finish_step());
    ASSERT_OK(cast->finish_step());
  }
}

TEST_P(Fp8WeightEveryRecipe, AGradInputTensorCastOtherwiseIsInvalid) {
  const Shape s{128, 128, 256};  // blocks contract over the tokens too
  std::unique_ptr<Float8Linear> layer = make_layer(s, recipe(GetParam()));
  ASSERT_NE(layer, nullptr);
  Floats tw(normal(s.nk(), 0.1f, 1)), tx(normal(s.mk(), 1.0f, 2)), out(s.mn());
  absl::StatusOr<std::unique_ptr<Fp8WeightScales>> scales = Fp8WeightScales::create(backend(), {{layer.get(), s.n, s.k}});
  ASSERT_TRUE(scales.ok()) << scales.status();
  ASSERT_OK((*scales)->refresh({tw.data()}, /*row_amaxes_current=*/false, no_other_ranks));
  Bytes codes(s.nk()), grad_input_codes(s.nk());
  ASSERT_OK((*scales)->cast_shard(0, tw.data(), codes.data(), grad_input_codes.data()));
  Fp8Weight w = (*scales)->bind(0);
  w.output.codes = codes.data();
  ASSERT_OK(layer->forward_no_grad(tx.data(), s.m, w, nullptr, out.data()));
  for (int wrong = 0; wrong < 3; ++wrong) {
    SCOPED_TRACE(wrong);
    Fp8Weight bad = w;
    if (wrong == 0) bad.grad_input.granularity = Granularity::kBlock1x128;
    if (wrong == 1) std::swap(bad.grad_input.rows, bad.grad_input.cols);
    if (wrong == 2) bad.output.granularity = Granularity::kColumnwise;
    const absl::Status st = layer->forward_no_grad(tx.data(), s.m, bad, nullptr, out.data());
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  }
}

INSTANTIATE_TEST_SUITE_P(Recipes, Fp8WeightEveryRecipe,
                         ::testing::Values(v1::Fp8Spec::ROWWISE, v1::Fp8Spec::ROWWISE_WITH_GW_HP,
                                           v1::Fp8Spec::BLOCKWISE),
                         [](const ::testing::TestParamInfo<Recipe>& info) {
                           return v1::Fp8Spec::Recipe_Name(info.param);
                         });

}  // namespace
}  // namespace fp8::engine
