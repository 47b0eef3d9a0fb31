// The memory estimate's tensor-parallel arithmetic (common/jobspec/memory_estimate.h),
// from the spec alone: a rank holds 1/parallel.tensor of each block's linears and of the
// heads' and feed-forward activations, the rest whole, and no FSDP buffers. (How close
// the estimate comes to what training holds is tests/engine/train/memory_estimate_test.cc's.)
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/jobspec/loader.h"
#include "common/jobspec/memory_estimate.h"
#include "gtest/gtest.h"
#include "tests/common/jobspec_test_util.h"

namespace fp8::jobspec {
namespace {

using testing::kMinimalJob;

// kMinimalJob: dim 64, 2 layers, 4 heads of 16 (4 kv heads), max_seq_len 64, batch 4;
// ffn_dim 192 so that halves of it suit fp8 GEMMs; no evaluation.
constexpr int64_t kDim = 64, kLayers = 2, kHeads = 4, kFfn = 192, kVocab = 256, kRows = 4, kSeq = 64;

std::map<std::string, int64_t> parts_of(int world, int tensor, const std::string& recipe) {
  absl::StatusOr<v1::JobSpec> spec = load_job_spec_string(
      kMinimalJob, "job.yaml",
      {"model.ffn_dim=192", "data.val_fraction=0", absl::StrCat("fp8.recipe=", recipe),
       absl::StrCat("resources.world_size=", world), absl::StrCat("parallel.tensor=", tensor)});
  EXPECT_TRUE(spec.ok()) << spec.status();
  if (!spec.ok()) return {};
  absl::StatusOr<MemoryEstimate> e = estimate_rank_memory(*spec);
  EXPECT_TRUE(e.ok()) << e.status();
  if (!e.ok()) return {};
  std::map<std::string, int64_t> parts;
  for (const MemoryPart& p : e->parts) parts[p.name] = p.bytes;
  return parts;
}

// fp32 elements of the parameters a rank holds without FSDP.
int64_t parameter_elements(int64_t tensor) {
  const int64_t root = 2 * kVocab * kDim + kDim;  // embedding, output, final norm
  const int64_t linears = 4 * kDim * kDim + 3 * kFfn * kDim;
  return root + kLayers * (2 * kDim + linears / tensor);
}

// Bytes of the activations that follow the heads and the feed-forward columns, fp32, with
// every block's kept (no activation checkpointing): per block q, attention out, k, v,
// gate, up, SwiGLU's product and the attention's row statistics; once for the backward
// their gradients.
int64_t split_activation_bytes(int64_t tensor) {
  const int64_t m = kRows * kSeq, q = kDim / tensor, kv = kDim / tensor, ffn = kFfn / tensor;
  const int64_t heads = kHeads / tensor;
  const int64_t block = (2 * m * q + 2 * m * kv + 3 * m * ffn) * 4 + kRows * heads * kSeq * 4;
  const int64_t grads = (2 * m * q + 2 * m * kv + 3 * m * ffn) * 4;
  return kLayers * block + grads;
}

TEST(MemoryEstimateTensorParallel, ARankHoldsItsShareOfTheSplitLinearsAndActivations) {
  const std::map<std::string, int64_t> one = parts_of(1, 1, "none"), two = parts_of(2, 2, "none");
  ASSERT_FALSE(one.empty());
  ASSERT_FALSE(two.empty());
  EXPECT_EQ(one.at("parameters"), parameter_elements(1) * 4);
  EXPECT_EQ(two.at("parameters"), parameter_elements(2) * 4);
  EXPECT_EQ(two.at("gradients"), parameter_elements(2) * 4);
  EXPECT_EQ(two.at("optimizer"), 2 * parameter_elements(2) * 4);
  // Everything else (residual stream, norms, logits, the gradients of the residual) whole.
  EXPECT_EQ(one.at("activations") - two.at("activations"), split_activation_bytes(1) - split_activation_bytes(2));
  // world_size = parallel.tensor: one data-parallel group, nothing for FSDP.
  std::vector<std::string> names;
  for (const auto& [name, bytes] : two) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"activations", "gradients", "optimizer", "parameters"}));
  // The same two ranks as FSDP shard everything in halves and gather.
  const std::map<std::string, int64_t> fsdp = parts_of(2, 1, "none");
  EXPECT_TRUE(fsdp.contains("FSDP gathers"));
  EXPECT_EQ(fsdp.at("activations"), one.at("activations"));
}

TEST(MemoryEstimateTensorParallel, Fp8CastsOfTheSplitLinearsShrink) {
  const std::map<std::string, int64_t> one = parts_of(1, 1, "tensorwise"), two = parts_of(2, 2, "tensorwise");
  ASSERT_TRUE(one.contains("fp8 casts"));
  ASSERT_TRUE(two.contains("fp8 casts"));
  // Each linear's weight cast halves; inputs of wq, wk, wv, w1, w3 and gradients of wo
  // and w2 stay whole, so the whole shrinks by less than half.
  EXPECT_LT(two.at("fp8 casts"), one.at("fp8 casts"));
  EXPECT_GT(two.at("fp8 casts"), one.at("fp8 casts") / 2);
  EXPECT_FALSE(two.contains("FSDP fp8 scales"));
  EXPECT_EQ(two.at("parameters"), parts_of(2, 2, "none").at("parameters"));
}

TEST(MemoryEstimateTensorParallel, TheHeaderNamesTheSplitAndAnUnevenSplitHasNoEstimate) {
  absl::StatusOr<v1::JobSpec> spec = load_job_spec_string(
      kMinimalJob, "job.yaml", {"model.ffn_dim=192", "resources.world_size=2", "parallel.tensor=2"});
  ASSERT_TRUE(spec.ok()) << spec.status();
  absl::StatusOr<MemoryEstimate> e = estimate_rank_memory(*spec);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(format_memory_estimate(*e).rfind("memory per rank (estimate, 2 ranks, 2-way tensor-parallel): ", 0), 0u)
      << format_memory_estimate(*e);
  v1::JobSpec uneven = *spec;
  uneven.mutable_parallel()->set_tensor(3);
  uneven.mutable_resources()->set_world_size(3);
  EXPECT_EQ(estimate_rank_memory(uneven).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fp8::jobspec
