// The training FLOPs per token that MFU divides by: the rule in model_flops.h, worked by
// hand for a small model.
#include "common/jobspec/model_flops.h"

#include <gtest/gtest.h>

namespace fp8::jobspec {
namespace {

v1::JobSpec small_model() {
  v1::JobSpec spec;
  v1::ModelSpec* m = spec.mutable_model();
  m->set_dim(64);
  m->set_n_layers(2);
  m->set_n_heads(4);
  m->set_n_kv_heads(2);
  m->set_ffn_dim(192);
  m->set_vocab_size(300);  // padded to 320 rows, which count nothing
  m->set_max_seq_len(128);
  spec.mutable_data()->set_seq_len(128);
  return spec;
}

TEST(ModelFlops, SixPerLinearWeightPlusAttention) {
  // Per block: wq 64x64, wk and wv 64x32, wo 64x64, w1 and w3 64x192, w2 192x64.
  const double block = 64.0 * 64 + 2 * 64.0 * 32 + 64.0 * 64 + 3 * 64.0 * 192;
  const double output = 64.0 * 300;
  const double attention = 12.0 * 2 * 64 * 128;
  EXPECT_DOUBLE_EQ(training_flops_per_token(small_model()), 6 * (2 * block + output) + attention);
}

TEST(ModelFlops, LongerSequencesCostMoreAttentionOnly) {
  v1::JobSpec spec = small_model();
  const double at_128 = training_flops_per_token(spec);
  spec.mutable_data()->set_seq_len(64);
  EXPECT_DOUBLE_EQ(at_128 - training_flops_per_token(spec), 12.0 * 2 * 64 * 64);
}

TEST(ModelFlops, AnUnknownShapeCountsNothing) {
  v1::JobSpec spec = small_model();
  spec.mutable_model()->set_n_heads(5);  // does not divide dim
  EXPECT_EQ(training_flops_per_token(spec), 0);
}

}  // namespace
}  // namespace fp8::jobspec
