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
std::string brief(const CastConfig& c) {
  auto dtype = c.dtype() == CastConfig::E4M3 ? "e4m3" : c.dtype() == CastConfig::E5M2 ? "e5m2" : "hp";
  if (c.dtype() == CastConfig::HIGH_PRECISION) return dtype;
  std::string g = c.granularity() == CastConfig::TENSORWISE ? "tw" : c.granularity() == CastConfig::BLOCK ? "blk" : "ax";
  std::string s = c.scaling() == CastConfig::DYNAMIC ? "dyn" : "del";
  return std::string(dtype) + " " + g + " " + s;
}

std::vector<std::string> table(const v1::Float8Gemms& g) {
  std::vector<std::string> rows;
  for (const GemmRef& gemm : list_gemms(g)) {
    rows.push_back(brief(*gemm.lhs.cast) + " x " + brief(*gemm.rhs.cast) + (gemm.fast_accum ? " fast" : ""));
  }
  return rows;
}

v1::Fp8Spec with_recipe(v1::Fp8Spec::Recipe recipe) {
  v1::Fp8Spec fp8;
  fp8.set_recipe(recipe);
  return fp8;
}

TEST(Recipes, MatchTheReferenceTable) {
  using R = v1::Fp8Spec;
  EXPECT_EQ(table(effective_gemms(with_recipe(R::TENSORWISE))),
            (std::vector<std::string>{"e4m3 tw dyn x e4m3 tw dyn fast", "e5m2 tw dyn x e4m3 tw dyn",
                                      "e5m2 tw dyn x e4m3 tw dyn"}));
  EXPECT_EQ(table(effective_gemms(with_recipe(R::ROWWISE))),
            (std::vector<std::string>{"e4m3 ax dyn x e4m3 ax dyn fast", "e4m3 ax dyn x e4m3 ax dyn",
                                      "e4m3 ax dyn x e4m3 ax dyn"}));
  EXPECT_EQ(
      table(effective_gemms(with_recipe(R::ROWWISE_WITH_GW_HP))),
      (std::vector<std::string>{"e4m3 ax dyn x e4m3 ax dyn fast", "e4m3 ax dyn x e4m3 tw dyn", "hp x hp"}));
  EXPECT_EQ(table(effective_gemms(with_recipe(R::DELAYED))),
            (std::vector<std::string>{"e4m3 tw del x e4m3 tw del fast", "e5m2 tw del x e4m3 tw del",
                                      "e5m2 tw del x e4m3 tw del"}));
  // The tile follows the tensor: 1x128 for input and grad_output, 128x128 for the weight.
  EXPECT_EQ(table(effective_gemms(with_recipe(R::BLOCKWISE))),
            (std::vector<std::string>{"e4m3 blk dyn x e4m3 blk dyn fast", "e4m3 blk dyn x e4m3 blk dyn",
                                      "e4m3 blk dyn x e4m3 blk dyn"}));
  EXPECT_EQ(table(effective_gemms(with_recipe(R::NONE))),
            (std::vector<std::string>{"hp x hp", "hp x hp", "hp x hp"}));
  // Not written reads as the default recipe.
  EXPECT_EQ(table(effective_gemms(v1::Fp8Spec())), table(effective_gemms(with_recipe(R::TENSORWISE))));
}

TEST(Recipes, TheLongFormChangesOnlyWhatItWrites) {
  v1::Fp8Spec fp8 = with_recipe(v1::Fp8Spec::ROWWISE_WITH_GW_HP);
  fp8.mutable_gemms()->mutable_grad_weight()->mutable_input()->set_dtype(
      CastConfig::E4M3);  // from hp: tw dyn
  fp8.mutable_gemms()->mutable_grad_weight()->mutable_grad_output()->set_dtype(CastConfig::E5M2);
  fp8.mutable_gemms()->mutable_output()->mutable_weight()->set_dtype(CastConfig::HIGH_PRECISION);
  fp8.mutable_gemms()->mutable_grad_input()->set_fast_accum(true);
  EXPECT_EQ(table(effective_gemms(fp8)),
            (std::vector<std::string>{"e4m3 ax dyn x hp fast", "e4m3 ax dyn x e4m3 tw dyn fast",
                                      "e5m2 tw dyn x e4m3 tw dyn"}));
}

TEST(Recipes, OperandsTurnedFp8UnderDelayedAreDelayed) {
  v1::Fp8Spec fp8 = with_recipe(v1::Fp8Spec::DELAYED);
  fp8.mutable_gemms()->mutable_output()->mutable_input()->set_dtype(CastConfig::E5M2);
  EXPECT_EQ(table(effective_gemms(fp8))[0], "e5m2 tw del x e4m3 tw del fast");
}

TEST(Recipes, PowerOf2ScalesForRowwiseAndBlockwise) {
  EXPECT_TRUE(recipe_uses_power_of2_scales(v1::Fp8Spec::ROWWISE));
  EXPECT_TRUE(recipe_uses_power_of2_scales(v1::Fp8Spec::ROWWISE_WITH_GW_HP));
  EXPECT_TRUE(recipe_uses_power_of2_scales(v1::Fp8Spec::BLOCKWISE));  // as TransformerEngine's block scaling
  EXPECT_FALSE(recipe_uses_power_of2_scales(v1::Fp8Spec::TENSORWISE));
  EXPECT_FALSE(recipe_uses_power_of2_scales(v1::Fp8Spec::DELAYED));
}

TEST(ModelShapes, LlamaFeedForwardWidth) {
  EXPECT_EQ(llama_ffn_dim(64), 176);
  EXPECT_EQ(llama_ffn_dim(20), 64);
  EXPECT_EQ(llama_ffn_dim(4096), 10928);
  EXPECT_EQ(llama_ffn_dim(1), 16);
}

TEST(ModelShapes, LinearLayersWithGroupedQueryAttention) {
  v1::ModelSpec m;
  m.set_dim(64);
  m.set_n_layers(2);
  m.set_n_heads(8);
  m.set_n_kv_heads(2);
  m.set_ffn_dim(176);
  m.set_vocab_size(256);
  std::vector<LinearLayer> layers = list_linear_layers(m);
  ASSERT_EQ(layers.size(), 2u * 7 + 1);
  EXPECT_EQ(layers[1].name, "layers.0.attention.wk");
  EXPECT_EQ(layers[1].in_features, 64);
  EXPECT_EQ(layers[1].out_features, 16);  // 2 kv heads of head_dim 8
  EXPECT_EQ(layers[12].name, "layers.1.feed_forward.w2");
  EXPECT_EQ(layers[12].in_features, 176);
  EXPECT_EQ(layers.back().name, "output");
  EXPECT_EQ(layers.back().out_features, 256);

  m.set_n_kv_heads(3);  // does not divide n_heads: no shapes to list
  EXPECT_FALSE(model_shape_is_known(m));
  EXPECT_TRUE(list_linear_layers(m).empty());
}

TEST(ModuleFilter, Globs) {
  EXPECT_TRUE(glob_matches("output", "output"));
  EXPECT_FALSE(glob_matches("output", "outputs"));
  EXPECT_TRUE(glob_matches("layers.*", "layers.3.attention.wq"));
  EXPECT_TRUE(glob_matches("*.wo", "layers.3.attention.wo"));
  EXPECT_TRUE(glob_matches("layers.*.wq", "layers.10.attention.wq"));
  EXPECT_TRUE(glob_matches("layers.?.feed_forward.w?", "layers.1.feed_forward.w3"));
  EXPECT_FALSE(glob_matches("layers.?.feed_forward.w?", "layers.12.feed_forward.w3"));
  EXPECT_TRUE(glob_matches("*", ""));
  EXPECT_TRUE(glob_matches("**a**", "bab"));
  EXPECT_FALSE(glob_matches("", "a"));
  // Backtracking over many stars stays quick.
  EXPECT_FALSE(glob_matches(std::string(50, '*') + "b", std::string(100, 'a')));
}

TEST(ModuleFilter, IncludeThenExclude) {
  v1::Fp8Spec fp8;
  fp8.set_recipe(v1::Fp8Spec::TENSORWISE);
  fp8.add_exclude("output");
  EXPECT_TRUE(is_float8_linear(fp8, "layers.0.attention.wq"));
  EXPECT_FALSE(is_float8_linear(fp8, "output"));
  fp8.add_include("*.feed_forward.*");
  EXPECT_FALSE(is_float8_linear(fp8, "layers.0.attention.wq"));
  EXPECT_TRUE(is_float8_linear(fp8, "layers.0.feed_forward.w2"));
  fp8.set_recipe(v1::Fp8Spec::NONE);
  EXPECT_FALSE(is_float8_linear(fp8, "layers.0.feed_forward.w2"));
}

}  // namespace
}  // namespace fp8::jobspec
