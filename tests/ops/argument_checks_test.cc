// Bad calls return InvalidArgument, the message naming the method and the problem, and
// write nothing.
#include <algorithm>
#include <cmath>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "fp8/model_ops.h"

namespace fp8 {
namespace {

struct BadCall {
  const char* expected_message;  // a substring of the status message
  std::function<absl::Status(ModelOps&)> call;
};

// Big enough for every call below; the contents are irrelevant to the checks.
float buf[4096];
float out[4096];
const int32_t tokens[] = {1, 2, 300, 3};
const int32_t targets[] = {0, -1, 7, 2};

std::vector<BadCall> bad_calls() {
  const AttentionShape attn{1, 4, 4, 2, 8};
  const RopeShape rope{1, 4, 2, 8};
  AdamWHyperparams adam;
  return {
      // embedding
      {"embedding_forward: token 300 at position 2 is outside the vocabulary of 256",
       [](ModelOps& o) { return o.embedding_forward(tokens, 4, buf, 256, 8, out); }},
      {"embedding_backward: token 300 at position 2 is outside the vocabulary of 256",
       [](ModelOps& o) { return o.embedding_backward(tokens, 4, buf, 256, 8, out); }},
      {"embedding_forward: tokens is null",
       [](ModelOps& o) { return o.embedding_forward(nullptr, 4, buf, 256, 8, out); }},
      {"embedding_forward: dim must be positive, got 0",
       [](ModelOps& o) { return o.embedding_forward(tokens, 4, buf, 256, 0, out); }},
      {"embedding_forward: shape [n=4, dim=4611686018427387904] is too large",
       [](ModelOps& o) { return o.embedding_forward(tokens, 4, buf, 256, int64_t{1} << 62, out); }},
      // RMSNorm
      {"rmsnorm_forward: rows must be positive, got -3",
       [](ModelOps& o) { return o.rmsnorm_forward(buf, buf, -3, 8, 1e-5f, out, out); }},
      {"rmsnorm_forward: eps must be positive and finite, got 0",
       [](ModelOps& o) { return o.rmsnorm_forward(buf, buf, 2, 8, 0.0f, out, out); }},
      {"rmsnorm_backward: grad_weight is null",
       [](ModelOps& o) { return o.rmsnorm_backward(buf, buf, buf, buf, 2, 8, out, nullptr); }},
      // RoPE
      {"rope_forward: head_dim must be even to rotate pairs, got 7",
       [](ModelOps& o) {
         return o.rope_forward({1, 4, 2, 7}, 10000.0, buf, out);
       }},
      {"rope_backward: theta must be positive and finite, got -1",
       [=](ModelOps& o) { return o.rope_backward(rope, -1.0, buf, out); }},
      {"rope_forward: seq must be positive, got 0",
       [](ModelOps& o) {
         return o.rope_forward({1, 0, 2, 8}, 10000.0, buf, out);
       }},
      // attention
      {"attention_forward: n_heads (4) is not a multiple of n_kv_heads (3)",
       [](ModelOps& o) {
         return o.attention_forward({1, 4, 4, 3, 8}, buf, buf, buf, out, out);
       }},
      {"attention_backward: n_kv_heads must be positive, got 0",
       [](ModelOps& o) {
         return o.attention_backward({1, 4, 4, 0, 8}, buf, buf, buf, buf, buf, buf, out, out, out);
       }},
      {"rope_forward: start must be zero or positive, got -1",
       [](ModelOps& o) { return o.rope_forward({1, 4, 2, 8, -1}, 10000.0, buf, out); }},
      {"rope_forward: positions up to start + seq = 1048574 + 4 exceed the limit of 1048576",
       [](ModelOps& o) { return o.rope_forward({1, 4, 2, 8, 1048574}, 10000.0, buf, out); }},
      {"kv_cache_attention_forward: the cache's 6 rows do not hold past + seq = 5 + 2 positions",
       [](ModelOps& o) { return o.kv_cache_attention_forward({1, 2, 5, 6, 4, 2, 8}, buf, buf, buf, out); }},
      {"kv_cache_attention_forward: past must be zero or positive, got -1",
       [](ModelOps& o) { return o.kv_cache_attention_forward({1, 2, -1, 6, 4, 2, 8}, buf, buf, buf, out); }},
      {"kv_cache_attention_forward: n_heads (4) is not a multiple of n_kv_heads (3)",
       [](ModelOps& o) { return o.kv_cache_attention_forward({1, 1, 0, 4, 4, 3, 8}, buf, buf, buf, out); }},
      {"kv_cache_attention_forward: v_cache is null",
       [](ModelOps& o) { return o.kv_cache_attention_forward({1, 1, 0, 4, 4, 2, 8}, buf, buf, nullptr, out); }},
      {"attention_forward: lse is null",
       [=](ModelOps& o) { return o.attention_forward(attn, buf, buf, buf, out, nullptr); }},
      {"attention_backward: grad_k is null",
       [=](ModelOps& o) { return o.attention_backward(attn, buf, buf, buf, buf, buf, buf, out, nullptr, out); }},
      // SwiGLU, residual
      {"swiglu_forward: up is null", [](ModelOps& o) { return o.swiglu_forward(buf, nullptr, 8, out); }},
      {"swiglu_backward: n must be positive, got 0",
       [](ModelOps& o) { return o.swiglu_backward(buf, buf, buf, 0, out, out); }},
      {"add: out is null", [](ModelOps& o) { return o.add(buf, buf, 8, nullptr); }},
      {"accumulate: n must be positive, got -1", [](ModelOps& o) { return o.accumulate(buf, -1, out); }},
      // loss
      {"cross_entropy_forward: target 7 at row 2 is outside the vocabulary of 5 (use -1 to ignore a row)",
       [](ModelOps& o) { return o.cross_entropy_forward(buf, targets, 4, 5, out, out); }},
      {"cross_entropy_backward: target 7 at row 2 is outside the vocabulary of 5",
       [](ModelOps& o) { return o.cross_entropy_backward(buf, targets, buf, 4, 5, 1.0f, out); }},
      {"cross_entropy_backward: grad_loss must be finite, got nan",
       [](ModelOps& o) { return o.cross_entropy_backward(buf, targets, buf, 4, 8, NAN, out); }},
      // optimizer
      {"adamw_step: step counts from 1, got 0",
       [=](ModelOps& o) { return o.adamw_step(adam, 0, out, buf, out, out, 8); }},
      {"adamw_step: grad_scale must be finite and >= 0, got inf",
       [=](ModelOps& o) {
         AdamWHyperparams h = adam;
         h.grad_scale = INFINITY;
         return o.adamw_step(h, 1, out, buf, out, out, 8);
       }},
      {"adamw_step: beta2 must be in [0, 1), got 1",
       [=](ModelOps& o) {
         AdamWHyperparams h = adam;
         h.beta2 = 1.0f;
         return o.adamw_step(h, 1, out, buf, out, out, 8);
       }},
      {"adamw_step: lr must be finite and >= 0, got nan",
       [=](ModelOps& o) {
         AdamWHyperparams h = adam;
         h.lr = NAN;
         return o.adamw_step(h, 1, out, buf, out, out, 8);
       }},
      {"adamw_step: v is null", [=](ModelOps& o) { return o.adamw_step(adam, 1, out, buf, out, nullptr, 8); }},
      {"sum_of_squares: x is null", [](ModelOps& o) { return o.sum_of_squares(nullptr, 8).status(); }},
  };
}

TEST(ModelOpsArguments, BadCallsAreRejectedWithAMessageNamingTheProblem) {
  for (const auto& bad : bad_calls()) {
    SCOPED_TRACE(bad.expected_message);
    std::fill(std::begin(out), std::end(out), 42.0f);
    const absl::Status s = bad.call(cpu_model_ops());
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(std::string(s.message()).find(bad.expected_message), std::string::npos) << s;
    for (float x : out) ASSERT_EQ(x, 42.0f) << "a rejected call wrote its output";
  }
}

// The CUDA attention kernels by the names fp8-train and the benchmarks take (parsed on
// every build, CUDA or not).
TEST(CudaAttentionKernelNames, ParseToTheirKernelsAndABadNameIsRefused) {
  EXPECT_EQ(*parse_cuda_attention_kernels(""), CudaModelOpsOptions::Attention::kTensorCores);
  EXPECT_EQ(*parse_cuda_attention_kernels("wgmma"), CudaModelOpsOptions::Attention::kTensorCores);
  EXPECT_EQ(*parse_cuda_attention_kernels("mma"), CudaModelOpsOptions::Attention::kMma);
  EXPECT_EQ(*parse_cuda_attention_kernels("simt"), CudaModelOpsOptions::Attention::kSimt);
  const absl::StatusOr<CudaModelOpsOptions::Attention> bad = parse_cuda_attention_kernels("Simt");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("'Simt'"), std::string_view::npos) << bad.status();
}

}  // namespace
}  // namespace fp8
