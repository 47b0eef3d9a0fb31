// Fp8WeightScales (worker/engine/float8/weight_scales.h) on its own, one rank, for the
// recipes whose weight is one tensorwise cast: the Fp8Weight it binds carries the whole weight's amax and the scale the layer's recipe
// gives it (the dynamic scale of that amax, or a delayed history's scale once it has one);
// the optimizer's row amaxes give the same amaxes as a pass over each shard; a cast shard
// holds the codes of one tensorwise cast with that scale. weight_scales_ranks_test.cc covers
// every recipe across ranks, FSDP's bit-for-bit tests (tests/engine/fsdp/) the training.
//
// CPU backend; tensors reach it only through Backend memory, as in the product.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
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

uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

std::unique_ptr<Float8Linear> make_layer(int64_t in, int64_t out, Recipe r) {
  absl::StatusOr<Float8LinearConfig> c = recipe_config(r, 4);
  EXPECT_TRUE(c.ok()) << c.status();
  if (!c.ok()) return nullptr;
  absl::StatusOr<std::unique_ptr<Float8Linear>> layer = Float8Linear::create(backend(), in, out, *c);
  EXPECT_TRUE(layer.ok()) << layer.status();
  return layer.ok() ? std::move(*layer) : nullptr;
}

// Two weights of different shapes and magnitudes, each one rank's whole shard.
struct Weights {
  explicit Weights(Recipe r) {
    const int64_t shapes[2][2] = {{6, 8}, {5, 12}};  // rows, row_elements
    std::mt19937 rng(7);
    for (int i = 0; i < 2; ++i) {
      const int64_t rows = shapes[i][0], cols = shapes[i][1];
      layers.push_back(make_layer(cols, rows, r));
      std::normal_distribution<float> dist(0.0f, i == 0 ? 0.5f : 40.0f);
      std::vector<float> v(static_cast<size_t>(rows * cols));
      for (float& x : v) x = dist(rng);
      values.push_back(std::make_unique<Floats>(v));
      shards.push_back({layers.back().get(), rows, cols});
    }
  }
  std::vector<const float*> shard_values() const {
    std::vector<const float*> out;
    for (const auto& v : values) out.push_back(v->data());
    return out;
  }

  std::vector<std::unique_ptr<Float8Linear>> layers;
  std::vector<std::unique_ptr<Floats>> values;
  std::vector<Fp8WeightScales::Shard> shards;
};

// One rank: the all-reduce leaves the amaxes as they are, and is called once.
Fp8WeightScales::AllReduceMax counting_identity(int& calls) {
  return [&calls](float*, int64_t) {
    ++calls;
    return absl::OkStatus();
  };
}

class WeightScalesTest : public ::testing::TestWithParam<Recipe> {};

TEST_P(WeightScalesTest, BindsTheWholeWeightsAmaxAndTheDynamicScaleOfIt) {
  Weights w(GetParam());
  absl::StatusOr<std::unique_ptr<Fp8WeightScales>> scales = Fp8WeightScales::create(backend(), w.shards);
  ASSERT_TRUE(scales.ok()) << scales.status();
  int calls = 0;
  ASSERT_OK((*scales)->refresh(w.shard_values(), /*row_amaxes_current=*/false, counting_identity(calls)));
  EXPECT_EQ(calls, 1);
  for (int64_t i = 0; i < (*scales)->size(); ++i) {
    SCOPED_TRACE(i);
    const Fp8WeightScales::Shard& s = w.shards[static_cast<size_t>(i)];
    const Fp8Tensor bound = (*scales)->bind(i).output;
    EXPECT_EQ(bound.rows, s.layer->info().out_features);
    EXPECT_EQ(bound.cols, s.layer->info().in_features);
    EXPECT_EQ(bound.format, s.layer->info().needs.weight_output.format);
    EXPECT_EQ(bound.granularity, Granularity::kTensorwise);
    EXPECT_EQ(bound.codes, nullptr);  // the caller's to point at what it gathers
    // No history yet under delayed scaling either: the dynamic scale of the amax.
    Floats amax(1), scale(1), inv_scale(1);
    ASSERT_OK(backend().amax({w.values[static_cast<size_t>(i)]->data(), DType::kFloat32, s.rows, s.row_elements},
                             Granularity::kTensorwise, amax.data()));
    ASSERT_OK(backend().compute_scales(amax.data(), 1, s.layer->info().needs.weight_output.format, /*pow2=*/false,
                                       scale.data(), inv_scale.data()));
    EXPECT_EQ(bits(Floats::download(bound.amax, 1)[0]), bits(amax.download()[0]));
    EXPECT_EQ(bits(Floats::download(bound.scale, 1)[0]), bits(scale.download()[0]));
    EXPECT_EQ(bits(Floats::download(bound.inv_scale, 1)[0]), bits(inv_scale.download()[0]));

    // The cast shard: one tensorwise, saturating cast with that scale.
    const auto n = static_cast<size_t>(s.rows * s.row_elements);
    Bytes codes(n), want(n);
    ASSERT_OK((*scales)->cast_shard(i, w.values[static_cast<size_t>(i)]->data(), codes.data(), nullptr));
    CastArgs c;
    c.input = {w.values[static_cast<size_t>(i)]->data(), DType::kFloat32, s.rows, s.row_elements};
    c.format = s.layer->info().needs.weight_output.format;
    c.granularity = Granularity::kTensorwise;
    c.scale = scale.data();
    c.saturate = true;
    c.out = want.data();
    ASSERT_OK(backend().cast(c));
    EXPECT_EQ(codes.download(), want.download());
    EXPECT_FALSE((*scales)->has_grad_input_codes(i));
  }
}

TEST_P(WeightScalesTest, RowAmaxesGiveTheSameAmaxesAsAPassOverEachShard) {
  Weights w(GetParam());
  absl::StatusOr<std::unique_ptr<Fp8WeightScales>> from_rows = Fp8WeightScales::create(backend(), w.shards);
  absl::StatusOr<std::unique_ptr<Fp8WeightScales>> from_pass = Fp8WeightScales::create(backend(), w.shards);
  ASSERT_TRUE(from_rows.ok() && from_pass.ok());
  // What an optimizer writes as it updates the shards.
  absl::StatusOr<std::vector<float*>> outputs = (*from_rows)->row_amax_outputs();
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  ASSERT_EQ(outputs->size(), w.shards.size());
  for (size_t i = 0; i < w.shards.size(); ++i) {
    const Fp8WeightScales::Shard& s = w.shards[i];
    ASSERT_OK(backend().amax({w.values[i]->data(), DType::kFloat32, s.rows, s.row_elements}, Granularity::kRowwise,
                             (*outputs)[i]));
  }
  int calls = 0;
  ASSERT_OK((*from_rows)->refresh(w.shard_values(), /*row_amaxes_current=*/true, counting_identity(calls)));
  ASSERT_OK((*from_pass)->refresh(w.shard_values(), /*row_amaxes_current=*/false, counting_identity(calls)));
  for (int64_t i = 0; i < (*from_rows)->size(); ++i) {
    const Fp8Tensor a = (*from_rows)->bind(i).output, b = (*from_pass)->bind(i).output;
    EXPECT_EQ(bits(Floats::download(a.amax, 1)[0]), bits(Floats::download(b.amax, 1)[0])) << i;
    EXPECT_EQ(bits(Floats::download(a.scale, 1)[0]), bits(Floats::download(b.scale, 1)[0])) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Recipes, WeightScalesTest, ::testing::Values(v1::Fp8Spec::TENSORWISE, v1::Fp8Spec::DELAYED),
                         [](const ::testing::TestParamInfo<Recipe>& info) {
                           return info.param == v1::Fp8Spec::TENSORWISE ? "tensorwise" : "delayed";
                         });

// Under delayed scaling, once a layer's history has a scale, that is the weight's scale
// whatever this step's amax; the amax is still the whole weight's (the layer records it).
TEST(WeightScales, DelayedWeightsTakeTheirHistorysScale) {
  Weights w(v1::Fp8Spec::DELAYED);
  for (size_t i = 0; i < w.layers.size(); ++i) {  // one training step with each fp32 weight
    Float8Linear& layer = *w.layers[i];
    const int64_t tokens = 16;
    Floats x(std::vector<float>(static_cast<size_t>(tokens * layer.info().in_features), 0.25f));
    Floats g(std::vector<float>(static_cast<size_t>(tokens * layer.info().out_features), 1e-3f));
    Floats out(static_cast<size_t>(tokens * layer.info().out_features));
    Floats gw(static_cast<size_t>(layer.info().out_features * layer.info().in_features));
    ASSERT_OK(layer.forward(x.data(), tokens, w.values[i]->data(), nullptr, out.data()));
    ASSERT_OK(layer.backward(g.data(), nullptr, gw.data(), nullptr));
    ASSERT_OK(layer.finish_step());
  }
  // Weights ten times larger now: a dynamic scale would differ from the history's.
  std::vector<std::unique_ptr<Floats>> grown;
  std::vector<const float*> grown_values;
  for (size_t i = 0; i < w.values.size(); ++i) {
    std::vector<float> v = w.values[i]->download();
    for (float& x : v) x *= 10.0f;
    grown.push_back(std::make_unique<Floats>(v));
    grown_values.push_back(grown.back()->data());
  }
  absl::StatusOr<std::unique_ptr<Fp8WeightScales>> scales = Fp8WeightScales::create(backend(), w.shards);
  ASSERT_TRUE(scales.ok()) << scales.status();
  int calls = 0;
  ASSERT_OK((*scales)->refresh(grown_values, /*row_amaxes_current=*/false, counting_identity(calls)));
  for (int64_t i = 0; i < (*scales)->size(); ++i) {
    SCOPED_TRACE(i);
    Float8Linear& layer = *w.layers[static_cast<size_t>(i)];
    const std::vector<std::string> names = layer.delayed().names();
    const auto weight = std::find(names.begin(), names.end(), "weight");
    ASSERT_NE(weight, names.end());
    const std::optional<float> history =
        layer.delayed().state(static_cast<int>(weight - names.begin()))->next_scale();
    ASSERT_TRUE(history.has_value());
    const Fp8Tensor bound = (*scales)->bind(i).output;
    EXPECT_EQ(bits(Floats::download(bound.scale, 1)[0]), bits(*history));
    EXPECT_EQ(bits(Floats::download(bound.inv_scale, 1)[0]), bits(inverse_scale(*history)));
    const Fp8WeightScales::Shard& s = w.shards[static_cast<size_t>(i)];
    Floats amax(1);
    ASSERT_OK(backend().amax({grown_values[static_cast<size_t>(i)], DType::kFloat32, s.rows, s.row_elements},
                             Granularity::kTensorwise, amax.data()));
    EXPECT_EQ(bits(Floats::download(bound.amax, 1)[0]), bits(amax.download()[0]));
  }
}

TEST(WeightScales, NeedsWeightsWhoseLayersTakeAnFp8Weight) {
  EXPECT_EQ(Fp8WeightScales::create(backend(), {}).status().code(), absl::StatusCode::kInvalidArgument);
  std::unique_ptr<Float8Linear> none = make_layer(8, 8, v1::Fp8Spec::NONE);
  ASSERT_NE(none, nullptr);
  EXPECT_EQ(Fp8WeightScales::create(backend(), {{none.get(), 8, 8}}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  std::unique_ptr<Float8Linear> rowwise = make_layer(8, 8, v1::Fp8Spec::ROWWISE);
  ASSERT_NE(rowwise, nullptr);
  // A shard past the padded weight's rows.
  EXPECT_EQ(Fp8WeightScales::create(backend(), {{rowwise.get(), 8, 8, 4, 8}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Rows of another width than the layer's weight.
  EXPECT_EQ(Fp8WeightScales::create(backend(), {{rowwise.get(), 4, 16, 0, 8}}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fp8::engine
