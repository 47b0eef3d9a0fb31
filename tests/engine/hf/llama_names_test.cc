// The parameter list the export walks against the one LlamaModel builds, the Hugging Face
// names, and the RoPE row permutation of wq and wk.
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/engine/hf/llama_names.h"
#include "worker/engine/hf/rope_permutation.h"
#include "worker/engine/model/llama.h"
#include "worker/engine/tensor/device.h"

namespace fp8::hf {
namespace {

engine::LlamaConfig small_config(bool tied) {
  engine::LlamaConfig c;
  c.vocab_size = 257;
  c.dim = 32;
  c.n_layers = 3;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.ffn_dim = 48;
  c.max_seq_len = 16;
  c.tie_embeddings = tied;
  return c;
}

TEST(LlamaNamesTest, ShapesMatchTheModelAndEveryNameMaps) {
  for (bool tied : {false, true}) {
    const engine::LlamaConfig c = small_config(tied);
    v1::Fp8Spec fp8;
    fp8.set_recipe(v1::Fp8Spec::NONE);
    absl::StatusOr<std::unique_ptr<engine::LlamaModel>> model =
        engine::LlamaModel::create(engine::Device::cpu(), c, fp8, /*seed=*/1);
    ASSERT_TRUE(model.ok()) << model.status();
    const std::vector<ParameterShape> shapes = llama_parameter_shapes(c);
    const auto& params = (*model)->parameters().all();
    ASSERT_EQ(shapes.size(), params.size());
    std::set<std::string> hf_names;
    for (size_t i = 0; i < shapes.size(); ++i) {
      EXPECT_EQ(shapes[i].name, params[i].name);
      EXPECT_EQ(shapes[i].engine_shape(), params[i].value.shape()) << shapes[i].name;
      // Hugging Face's tensor is the engine's without the vocabulary's padding rows.
      EXPECT_EQ(shapes[i].shape[0], shapes[i].engine_rows - params[i].padding_rows) << shapes[i].name;
      const std::string hf = hf_tensor_name(shapes[i].name);
      EXPECT_FALSE(hf.empty()) << shapes[i].name;
      EXPECT_TRUE(hf_names.insert(hf).second) << hf;
    }
  }
  EXPECT_EQ(hf_tensor_name("layers.2.feed_forward.w1"), "model.layers.2.mlp.gate_proj.weight");
  EXPECT_EQ(hf_tensor_name("layers.2.feed_forward.w3"), "model.layers.2.mlp.up_proj.weight");
  EXPECT_EQ(hf_tensor_name("layers.2.feed_forward.w2"), "model.layers.2.mlp.down_proj.weight");
  EXPECT_EQ(hf_tensor_name("layers.10.attention_norm"), "model.layers.10.input_layernorm.weight");
  EXPECT_EQ(hf_tensor_name("layers.x.attention.wq"), "");
  EXPECT_EQ(hf_tensor_name("layers.1.attention.bias"), "");
  EXPECT_TRUE(is_rope_projection("layers.0.attention.wk"));
  EXPECT_FALSE(is_rope_projection("layers.0.attention.wv"));
}

TEST(RopePermutationTest, ReordersEachHeadsRowsAndInverts) {
  // Two heads of head_dim 4, two columns; row r of head h holds (10h + r, -(10h + r)).
  std::vector<float> w;
  for (int h = 0; h < 2; ++h) {
    for (int r = 0; r < 4; ++r) {
      w.push_back(static_cast<float>(10 * h + r));
      w.push_back(-static_cast<float>(10 * h + r));
    }
  }
  const std::vector<float> half = interleaved_to_half_rows(w, 2, 4, 2);
  // New row j < d/2 is old row 2j, new row d/2 + j is old 2j + 1: 0 2 1 3 per head.
  const std::vector<float> rows = {half[0], half[2], half[4], half[6], half[8], half[10], half[12], half[14]};
  EXPECT_EQ(rows, (std::vector<float>{0, 2, 1, 3, 10, 12, 11, 13}));
  EXPECT_EQ(half[3], -2.0f);
  EXPECT_EQ(half_to_interleaved_rows(half, 2, 4, 2), w);
}

}  // namespace
}  // namespace fp8::hf
