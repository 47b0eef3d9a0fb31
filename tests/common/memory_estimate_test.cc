// The memory estimate's tensor-parallel arithmetic (common/jobspec/memory_estimate.h),
// from the spec alone: a rank holds 1/parallel.tensor of each block's linears and of the
// heads' and feed-forward activations, the rest whole, and no FSDP buffers; with
// parallel.sequence also 1/parallel.tensor of the residual stream's tokens, and the
// gathers' buffers; and, without activation checkpointing, which of the linears'
// high-precision inputs each block keeps (those its backward reads). (How close the
// estimate comes to what training holds is tests/engine/train/memory_estimate_test.cc's.)
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

v1::JobSpec spec_of(int world, int tensor, const std::string& recipe, std::vector<std::string> more = {}) {
  std::vector<std::string> overrides = {"model.ffn_dim=192", "data.val_fraction=0", absl::StrCat("fp8.recipe=", recipe),
                                        absl::StrCat("resources.world_size=", world),
                                        absl::StrCat("parallel.tensor=", tensor)};
  overrides.insert(overrides.end(), more.begin(), more.end());
  absl::StatusOr<v1::JobSpec> spec = load_job_spec_string(kMinimalJob, "job.yaml", overrides);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : v1::JobSpec();
}

std::map<std::string, int64_t> parts_of(const v1::JobSpec& spec) {
  absl::StatusOr<MemoryEstimate> e = estimate_rank_memory(spec);
  EXPECT_TRUE(e.ok()) << e.status();
  if (!e.ok()) return {};
  std::map<std::string, int64_t> parts;
  for (const MemoryPart& p : e->parts) parts[p.name] = p.bytes;
  return parts;
}

std::map<std::string, int64_t> parts_of(int world, int tensor, const std::string& recipe) {
  return parts_of(spec_of(world, tensor, recipe));
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

// Sequence parallelism at T = 2 (activations.h): M tokens a micro-batch, local = M / 2 of
// them on a rank between blocks. What changes against T = 2 alone, in fp32 bytes, given how
// many blocks hold norm statistics (inv_rms), normed shards (the norms' outputs before the
// gather) and residuals (mid) of their own.
int64_t sequence_parallel_change(int64_t stat_sets, int64_t shard_sets, int64_t mid_sets, bool for_backward) {
  const int64_t m = kRows * kSeq, local = m / 2, shrink = local - m;
  int64_t change = (kLayers + 1) * shrink * kDim * 4       // the residual stream on local tokens
                   + mid_sets * shrink * kDim * 4          // each block's mid too
                   + stat_sets * 2 * shrink * 4            // the norms' inv_rms
                   + shard_sets * 2 * local * kDim * 4     // the normed shards, before the gather
                   + shrink * 4 + local * kDim * 4         // the final norm's inv_rms and shard
                   + m * kDim * 4                          // the row-parallel layers' partial outputs
                   + (local + m) * kDim + 3 * 4;           // the fp8 gather's codes, one byte each; its scales
  if (for_backward) {
    change += shrink * kDim * 4                            // grad_hidden on local tokens
              + m * kDim * 4 + local * kDim * 4;           // grad_gathered, grad_norm_shard
  }
  return change;
}

TEST(MemoryEstimateSequenceParallel, TheResidualStreamShrinksAndTheGatherBuffersAreCounted) {
  using v1::TrainSpec;
  // Blocks holding norm statistics, normed shards and mid of their own: without
  // checkpointing every block its statistics and mid, and tensorwise's wq, wk, wv, w1 and w3
  // read fp8 copies of their inputs in backward, so one set of normed tensors serves all;
  // under selective the norms are shared and each block keeps its mid; under full one set.
  const struct {
    TrainSpec::ActivationCheckpointing mode;
    int64_t stat_sets, shard_sets, mid_sets;
  } modes[] = {{TrainSpec::NONE, kLayers, 1, kLayers},
               {TrainSpec::SELECTIVE, 1, 1, kLayers},
               {TrainSpec::FULL, 1, 1, 1}};
  for (const auto& [mode, stat_sets, shard_sets, mid_sets] : modes) {
    SCOPED_TRACE(TrainSpec::ActivationCheckpointing_Name(mode));
    v1::JobSpec alone = spec_of(2, 2, "tensorwise"), sequence = spec_of(2, 2, "tensorwise", {"parallel.sequence=true"});
    // Set here rather than loaded: the estimate must not lean on what validation allows.
    alone.mutable_train()->set_activation_checkpointing(mode);
    sequence.mutable_train()->set_activation_checkpointing(mode);
    const std::map<std::string, int64_t> a = parts_of(alone), b = parts_of(sequence);
    ASSERT_TRUE(a.contains("activations"));
    ASSERT_TRUE(b.contains("activations"));
    EXPECT_EQ(b.at("activations") - a.at("activations"),
              sequence_parallel_change(stat_sets, shard_sets, mid_sets, true));
    // The weights and their casts do not move: the column-parallel layers still read
    // every token.
    for (const char* part : {"parameters", "gradients", "optimizer", "fp8 casts"}) {
      EXPECT_EQ(b.at(part), a.at(part)) << part;
    }
  }
  // Recipe none: every block reads its inputs in backward and keeps them, without sequence
  // parallelism gathered, with it as shards, gathered again into one shared buffer.
  const std::map<std::string, int64_t> none_alone = parts_of(spec_of(2, 2, "none")),
                                       none_sequence = parts_of(spec_of(2, 2, "none", {"parallel.sequence=true"}));
  const int64_t m = kRows * kSeq;
  EXPECT_EQ(none_sequence.at("activations") - none_alone.at("activations"),
            sequence_parallel_change(kLayers, kLayers, kLayers, true) - (kLayers - 1) * 2 * m * kDim * 4);
  // An evaluation's forward: one set of block tensors, no backward scratch.
  const std::map<std::string, int64_t> a = parts_of(spec_of(2, 2, "none", {"data.val_fraction=0.1"})),
                                       b = parts_of(spec_of(2, 2, "none", {"data.val_fraction=0.1",
                                                                           "parallel.sequence=true"}));
  ASSERT_TRUE(a.contains("evaluation"));
  ASSERT_TRUE(b.contains("evaluation"));
  EXPECT_EQ(b.at("evaluation") - a.at("evaluation"), sequence_parallel_change(1, 1, 1, false));
}

// Without activation checkpointing a block keeps a linear's high-precision input only where
// the linear's backward reads it: where its grad_weight GEMM takes the input in high
// precision (Float8LinearNeeds::input_in_backward). Otherwise the blocks share one buffer
// of it. kMinimalJob with 3 blocks, so that "each its own" and "one shared" differ from
// "one block its own, the others one shared".
constexpr int64_t kBlocks = 3;

int64_t kept_input_activations(int world, int tensor, const std::string& recipe, std::vector<std::string> more = {}) {
  more.insert(more.end(), {absl::StrCat("model.n_layers=", kBlocks), "train.activation_checkpointing=none"});
  const std::map<std::string, int64_t> parts = parts_of(spec_of(world, tensor, recipe, more));
  return parts.contains("activations") ? parts.at("activations") : -1;
}

TEST(MemoryEstimateKeptInputs, BlocksKeepTheNormsOutputsAndSwiGLUsProductOnlyForHighPrecisionGradWeight) {
  const int64_t m = kRows * kSeq;
  // Per block: attn_in and ffn_in [M, dim], swiglu_out [M, ffn], fp32.
  const int64_t inputs = (2 * m * kDim + m * kFfn) * 4;
  const int64_t none = kept_input_activations(1, 1, "none");
  const int64_t tensorwise = kept_input_activations(1, 1, "tensorwise");
  ASSERT_GT(tensorwise, 0);
  // Every block its own against one set for all.
  EXPECT_EQ(none - tensorwise, (kBlocks - 1) * inputs);
  // rowwise's grad_weight GEMM reads fp8 copies too; rowwise_with_gw_hp's reads the input.
  EXPECT_EQ(kept_input_activations(1, 1, "rowwise"), tensorwise);
  EXPECT_EQ(kept_input_activations(1, 1, "rowwise_with_gw_hp"), none);
  // So does tensorwise with the long form keeping grad_weight's input in high precision.
  EXPECT_EQ(kept_input_activations(1, 1, "tensorwise", {"fp8.gemms={grad_weight: {input: {dtype: high_precision}}}"}),
            none);
  // A grad_weight GEMM that mixes an fp8 input with a high-precision gradient reads the
  // input's dequantized copy, not the input.
  EXPECT_EQ(
      kept_input_activations(1, 1, "tensorwise", {"fp8.gemms={grad_weight: {grad_output: {dtype: high_precision}}}"}),
      tensorwise);
}

TEST(MemoryEstimateKeptInputs, EachBlockKeepsWhatItsOwnLinearsRead) {
  const int64_t m = kRows * kSeq, normed = m * kDim * 4, swiglu = m * kFfn * 4;
  const int64_t tensorwise = kept_input_activations(1, 1, "tensorwise");
  ASSERT_GT(tensorwise, 0);
  // One block in high precision keeps its three; the other two share.
  EXPECT_EQ(kept_input_activations(1, 1, "tensorwise", {"fp8.exclude=[output, 'layers.1.*']"}) - tensorwise,
            2 * normed + swiglu);
  // One of wq, wk, wv suffices for attn_in; w2 in every block keeps every SwiGLU product.
  EXPECT_EQ(kept_input_activations(1, 1, "tensorwise", {"fp8.exclude=[output, layers.2.attention.wk]"}) - tensorwise,
            normed);
  EXPECT_EQ(kept_input_activations(1, 1, "tensorwise", {"fp8.exclude=[output, '*.w2']"}) - tensorwise,
            kBlocks * swiglu - swiglu);
  // wo reads attn_out, which every block keeps anyway.
  EXPECT_EQ(kept_input_activations(1, 1, "tensorwise", {"fp8.exclude=[output, '*.wo']"}), tensorwise);
  // A feed-forward width no fp8 GEMM takes (not a multiple of 16; set here, as validation
  // refuses it) keeps w1, w2 and w3 in high precision: every block keeps ffn_in and
  // swiglu_out, and shares attn_in. fp8.pad_inner_dim makes them fp8 again.
  const int64_t odd = 184;
  auto odd_width = [&](const std::string& recipe, bool pad) {
    v1::JobSpec spec = spec_of(1, 1, recipe, {absl::StrCat("model.n_layers=", kBlocks)});
    spec.mutable_model()->set_ffn_dim(odd);
    spec.mutable_fp8()->set_pad_inner_dim(pad);
    return parts_of(spec).at("activations");
  };
  EXPECT_EQ(odd_width("none", false) - odd_width("tensorwise", false), (kBlocks - 1) * normed);
  EXPECT_EQ(odd_width("tensorwise", false) - odd_width("tensorwise", true), (kBlocks - 1) * (normed + m * odd * 4));
}

TEST(MemoryEstimateKeptInputs, UnderSequenceParallelismBlocksKeepTheShardsAndShareTheGatheredInputs) {
  const int64_t m = kRows * kSeq, local = m / 2, ffn = kFfn / 2;
  const std::vector<std::string> sequence = {"parallel.sequence=true"};
  const int64_t none = kept_input_activations(2, 2, "none", sequence);
  const int64_t tensorwise = kept_input_activations(2, 2, "tensorwise", sequence);
  ASSERT_GT(tensorwise, 0);
  // Per block: attn_in_shard and ffn_in_shard [local, dim], swiglu_out [M, ffn / 2]. The
  // gathered attn_in and ffn_in are one buffer each either way: a block gathers its shard
  // again before its backward.
  EXPECT_EQ(none - tensorwise, (kBlocks - 1) * (2 * local * kDim + m * ffn) * 4);
  EXPECT_EQ(kept_input_activations(2, 2, "rowwise_with_gw_hp", sequence), none);
  EXPECT_EQ(kept_input_activations(2, 2, "rowwise", sequence), tensorwise);
}

TEST(MemoryEstimateKeptInputs, CheckpointingAndEvaluationDoNotDependOnTheRecipe) {
  for (const char* mode : {"selective", "full"}) {
    SCOPED_TRACE(mode);
    const std::vector<std::string> more = {absl::StrCat("train.activation_checkpointing=", mode),
                                           "data.val_fraction=0.1"};
    const std::map<std::string, int64_t> none = parts_of(spec_of(1, 1, "none", more)),
                                         tensorwise = parts_of(spec_of(1, 1, "tensorwise", more));
    ASSERT_TRUE(tensorwise.contains("evaluation"));
    EXPECT_EQ(none.at("activations"), tensorwise.at("activations"));
    EXPECT_EQ(none.at("evaluation"), tensorwise.at("evaluation"));
  }
  const std::map<std::string, int64_t> none = parts_of(spec_of(1, 1, "none", {"data.val_fraction=0.1"})),
                                       tensorwise = parts_of(spec_of(1, 1, "tensorwise", {"data.val_fraction=0.1"}));
  ASSERT_TRUE(tensorwise.contains("evaluation"));
  EXPECT_EQ(none.at("evaluation"), tensorwise.at("evaluation"));
}

TEST(MemoryEstimateSequenceParallel, TiedEmbeddingsDropTheOutputWeightAsWithoutIt) {
  v1::JobSpec untied = spec_of(2, 2, "tensorwise", {"parallel.sequence=true"});
  v1::JobSpec tied = untied;
  tied.mutable_model()->set_tie_embeddings(true);
  const std::map<std::string, int64_t> a = parts_of(untied), b = parts_of(tied);
  ASSERT_TRUE(b.contains("parameters"));
  EXPECT_EQ(a.at("parameters") - b.at("parameters"), kVocab * kDim * 4);
  EXPECT_EQ(b.at("activations"), a.at("activations"));
}

TEST(MemoryEstimateSequenceParallel, TheHeaderAndTheActivationsNameIt) {
  absl::StatusOr<MemoryEstimate> e = estimate_rank_memory(spec_of(2, 2, "tensorwise", {"parallel.sequence=true"}));
  ASSERT_TRUE(e.ok()) << e.status();
  const std::string text = format_memory_estimate(*e);
  EXPECT_EQ(text.rfind("memory per rank (estimate, 2 ranks, 2-way tensor-parallel and sequence-parallel): ", 0), 0u)
      << text;
  EXPECT_NE(text.find("sequence-parallel (1/2 of the tokens between blocks)"), std::string::npos) << text;
  // Without tensor parallelism there is nothing to split: the trainer ignores the flag
  // (validation refuses it), and so does the estimate.
  v1::JobSpec alone = spec_of(1, 1, "tensorwise");
  v1::JobSpec flagged = alone;
  flagged.mutable_parallel()->set_sequence(true);
  absl::StatusOr<MemoryEstimate> a = estimate_rank_memory(alone), b = estimate_rank_memory(flagged);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(b->total_bytes(), a->total_bytes());
  EXPECT_EQ(format_memory_estimate(*b), format_memory_estimate(*a));
}

TEST(MemoryEstimateTensorParallel, Bf16PartialOutputsAreSummedThroughAnFp32Scratch) {
  const std::map<std::string, int64_t> alone = parts_of(spec_of(2, 2, "none", {"train.compute_dtype=bf16"})),
                                       sequence = parts_of(spec_of(2, 2, "none", {"train.compute_dtype=bf16",
                                                                                  "parallel.sequence=true"}));
  ASSERT_TRUE(alone.contains("TP bf16 sums"));
  EXPECT_EQ(alone.at("TP bf16 sums"), kRows * kSeq * kDim * 4);
  EXPECT_FALSE(sequence.contains("TP bf16 sums"));  // reduce-scattered in bf16 instead
  EXPECT_FALSE(parts_of(spec_of(2, 2, "none")).contains("TP bf16 sums"));
}

}  // namespace
}  // namespace fp8::jobspec
