// The recipes as per-operand casts (Fp8Spec.Recipe in proto/fp8/v1/job.proto), the long
// form over them, the model's layers and the layer filter.
#include <string>
#include <vector>

#include "common/jobspec/fp8_recipes.h"
#include "common/jobspec/model_shapes.h"
#include "common/jobspec/module_filter.h"
#include "gtest/gtest.h"

namespace fp8::jobspec {
namespace {

using v1::CastConfig;

// "e4m3 tw dyn" etc.: one operand in a form the table below can say briefly.
std::string Brief(const CastConfig& c) {
  auto dtype = c.dtype() == CastConfig::E4M3 ? "e4m3" : c.dtype() == CastConfig::E5M2 ? "e5m2" : "hp";
  if (c.dtype() == CastConfig::HIGH_PRECISION) return dtype;
  std::string g = c.granularity() == CastConfig::TENSORWISE ? "tw" : "ax";
  std::string s = c.scaling() == CastConfig::DYNAMIC ? "dyn" : "del";
  return std::string(dtype) + " " + g + " " + s;
}

std::vector<std::string> Table(const v1::Float8Gemms& g) {
  std::vector<std::string> rows;
  for (const GemmRef& gemm : ListGemms(g)) {
    rows.push_back(Brief(*gemm.lhs.cast) + " x " + Brief(*gemm.rhs.cast) + (gemm.fast_accum ? " fast" : ""));
  }
  return rows;
}

v1::Fp8Spec WithRecipe(v1::Fp8Spec::Recipe recipe) {
  v1::Fp8Spec fp8;
  fp8.set_recipe(recipe);
  return fp8;
}

TEST(Recipes, MatchTheReferenceTable) {
  using R = v1::Fp8Spec;
  EXPECT_EQ(Table(EffectiveGemms(WithRecipe(R::TENSORWISE))),
            (std::vector<std::string>{"e4m3 tw dyn x e4m3 tw dyn fast", "e5m2 tw dyn x e4m3 tw dyn",
                                      "e5m2 tw dyn x e4m3 tw dyn"}));
  EXPECT_EQ(Table(EffectiveGemms(WithRecipe(R::ROWWISE))),
            (std::vector<std::string>{"e4m3 ax dyn x e4m3 ax dyn fast", "e4m3 ax dyn x e4m3 ax dyn",
                                      "e4m3 ax dyn x e4m3 ax dyn"}));
  EXPECT_EQ(
      Table(EffectiveGemms(WithRecipe(R::ROWWISE_WITH_GW_HP))),
      (std::vector<std::string>{"e4m3 ax dyn x e4m3 ax dyn fast", "e4m3 ax dyn x e4m3 tw dyn", "hp x hp"}));
  EXPECT_EQ(Table(EffectiveGemms(WithRecipe(R::DELAYED))),
            (std::vector<std::string>{"e4m3 tw del x e4m3 tw del fast", "e5m2 tw del x e4m3 tw del",
                                      "e5m2 tw del x e4m3 tw del"}));
  EXPECT_EQ(Table(EffectiveGemms(WithRecipe(R::NONE))),
            (std::vector<std::string>{"hp x hp", "hp x hp", "hp x hp"}));
  // Not written reads as the default recipe.
  EXPECT_EQ(Table(EffectiveGemms(v1::Fp8Spec())), Table(EffectiveGemms(WithRecipe(R::TENSORWISE))));
}

TEST(Recipes, TheLongFormChangesOnlyWhatItWrites) {
  v1::Fp8Spec fp8 = WithRecipe(v1::Fp8Spec::ROWWISE_WITH_GW_HP);
  fp8.mutable_gemms()->mutable_grad_weight()->mutable_input()->set_dtype(
      CastConfig::E4M3);  // from hp: tw dyn
  fp8.mutable_gemms()->mutable_grad_weight()->mutable_grad_output()->set_dtype(CastConfig::E5M2);
  fp8.mutable_gemms()->mutable_output()->mutable_weight()->set_dtype(CastConfig::HIGH_PRECISION);
  fp8.mutable_gemms()->mutable_grad_input()->set_fast_accum(true);
  EXPECT_EQ(Table(EffectiveGemms(fp8)),
            (std::vector<std::string>{"e4m3 ax dyn x hp fast", "e4m3 ax dyn x e4m3 tw dyn fast",
                                      "e5m2 tw dyn x e4m3 tw dyn"}));
}

TEST(Recipes, OperandsTurnedFp8UnderDelayedAreDelayed) {
  v1::Fp8Spec fp8 = WithRecipe(v1::Fp8Spec::DELAYED);
  fp8.mutable_gemms()->mutable_output()->mutable_input()->set_dtype(CastConfig::E5M2);
  EXPECT_EQ(Table(EffectiveGemms(fp8))[0], "e5m2 tw del x e4m3 tw del fast");
}

TEST(Recipes, PowerOf2ScalesForRowwiseOnly) {
  EXPECT_TRUE(RecipeUsesPowerOf2Scales(v1::Fp8Spec::ROWWISE));
  EXPECT_TRUE(RecipeUsesPowerOf2Scales(v1::Fp8Spec::ROWWISE_WITH_GW_HP));
  EXPECT_FALSE(RecipeUsesPowerOf2Scales(v1::Fp8Spec::TENSORWISE));
  EXPECT_FALSE(RecipeUsesPowerOf2Scales(v1::Fp8Spec::DELAYED));
}

TEST(ModelShapes, LlamaFeedForwardWidth) {
  EXPECT_EQ(LlamaFfnDim(64), 176);
  EXPECT_EQ(LlamaFfnDim(20), 64);
  EXPECT_EQ(LlamaFfnDim(4096), 10928);
  EXPECT_EQ(LlamaFfnDim(1), 16);
}

TEST(ModelShapes, LinearLayersWithGroupedQueryAttention) {
  v1::ModelSpec m;
  m.set_dim(64);
  m.set_n_layers(2);
  m.set_n_heads(8);
  m.set_n_kv_heads(2);
  m.set_ffn_dim(176);
  m.set_vocab_size(256);
  std::vector<LinearLayer> layers = ListLinearLayers(m);
  ASSERT_EQ(layers.size(), 2u * 7 + 1);
  EXPECT_EQ(layers[1].name, "layers.0.attention.wk");
  EXPECT_EQ(layers[1].in_features, 64);
  EXPECT_EQ(layers[1].out_features, 16);  // 2 kv heads of head_dim 8
  EXPECT_EQ(layers[12].name, "layers.1.feed_forward.w2");
  EXPECT_EQ(layers[12].in_features, 176);
  EXPECT_EQ(layers.back().name, "output");
  EXPECT_EQ(layers.back().out_features, 256);

  m.set_n_kv_heads(3);  // does not divide n_heads: no shapes to list
  EXPECT_FALSE(ModelShapeIsKnown(m));
  EXPECT_TRUE(ListLinearLayers(m).empty());
}

TEST(ModuleFilter, Globs) {
  EXPECT_TRUE(GlobMatches("output", "output"));
  EXPECT_FALSE(GlobMatches("output", "outputs"));
  EXPECT_TRUE(GlobMatches("layers.*", "layers.3.attention.wq"));
  EXPECT_TRUE(GlobMatches("*.wo", "layers.3.attention.wo"));
  EXPECT_TRUE(GlobMatches("layers.*.wq", "layers.10.attention.wq"));
  EXPECT_TRUE(GlobMatches("layers.?.feed_forward.w?", "layers.1.feed_forward.w3"));
  EXPECT_FALSE(GlobMatches("layers.?.feed_forward.w?", "layers.12.feed_forward.w3"));
  EXPECT_TRUE(GlobMatches("*", ""));
  EXPECT_TRUE(GlobMatches("**a**", "bab"));
  EXPECT_FALSE(GlobMatches("", "a"));
  // Backtracking over many stars stays quick.
  EXPECT_FALSE(GlobMatches(std::string(50, '*') + "b", std::string(100, 'a')));
}

TEST(ModuleFilter, IncludeThenExclude) {
  v1::Fp8Spec fp8;
  fp8.set_recipe(v1::Fp8Spec::TENSORWISE);
  fp8.add_exclude("output");
  EXPECT_TRUE(IsFloat8Linear(fp8, "layers.0.attention.wq"));
  EXPECT_FALSE(IsFloat8Linear(fp8, "output"));
  fp8.add_include("*.feed_forward.*");
  EXPECT_FALSE(IsFloat8Linear(fp8, "layers.0.attention.wq"));
  EXPECT_TRUE(IsFloat8Linear(fp8, "layers.0.feed_forward.w2"));
  fp8.set_recipe(v1::Fp8Spec::NONE);
  EXPECT_FALSE(IsFloat8Linear(fp8, "layers.0.feed_forward.w2"));
}

}  // namespace
}  // namespace fp8::jobspec
