// Bad job files: each error is one line, `file:line:col: field.path: what`, in file order.
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "common/jobspec/loader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/jobspec_test_util.h"

namespace fp8::jobspec {
namespace {

using ::testing::HasSubstr;
using testing::kMinimalJob;
using testing::split_lines;
using testing::testdata;

struct BadFile {
  const char* file;  // under testdata/bad/
  // The whole error, line by line, after the path of the folder: "name.yaml:3:5: ...".
  std::vector<std::string> lines;
};

void PrintTo(const BadFile& b, std::ostream* os) { *os << b.file; }

class LoadBadFile : public ::testing::TestWithParam<BadFile> {};

TEST_P(LoadBadFile, ReportsEveryProblemOnItsLine) {
  const BadFile& bad = GetParam();
  std::string folder = testdata("bad") + "/";
  absl::StatusOr<v1::JobSpec> loaded = load_job_spec_file(folder + bad.file);
  ASSERT_FALSE(loaded.ok()) << bad.file << " loaded";
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
  std::vector<std::string> lines = split_lines(loaded.status().message());
  ASSERT_EQ(lines.size(), bad.lines.size()) << loaded.status().message();
  for (size_t i = 0; i < lines.size(); ++i) {
    EXPECT_EQ(lines[i], folder + bad.lines[i]);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Table, LoadBadFile,
    ::testing::Values(
        BadFile{"unknown_key.yaml",
                {"unknown_key.yaml:5:3: model.n_head: unknown field (did you mean 'n_heads'?)"}},
        BadFile{"wrong_type.yaml", {"wrong_type.yaml:10:10: train.steps: expected an integer, got 'lots'"}},
        BadFile{"quoted_number.yaml",
                {"quoted_number.yaml:10:10: train.steps: expected an integer, got the quoted text '100'; "
                 "write it without quotes"}},
        BadFile{"negative_steps.yaml", {"negative_steps.yaml:10:3: train.steps: must be > 0, got -5"}},
        BadFile{"heads_do_not_divide_dim.yaml",
                {"heads_do_not_divide_dim.yaml:5:3: model.n_heads: 6 does not divide model.dim (64)"}},
        BadFile{"odd_head_dim.yaml",
                {"odd_head_dim.yaml:5:3: model.n_heads: gives an odd head_dim, model.dim / model.n_heads = "
                 "48 / 16 = 3; RoPE rotates pairs of channels, so head_dim must be even"}},
        BadFile{
            "unknown_recipe.yaml",
            {"unknown_recipe.yaml:14:11: fp8.recipe: unknown value 'fastest'; expected one of tensorwise, "
             "rowwise, rowwise_with_gw_hp, delayed, none, blockwise"}},
        // No fp8 section: the fp8 default (tensorwise) meets a model of dim 20, so the error
        // points at model.dim, where the bad sizes come from.
        BadFile{
            "fp8_layer_of_dim_20.yaml",
            {"fp8_layer_of_dim_20.yaml:3:3: fp8: 14 fp8 layers, such as layers.0.attention.wq (20 -> 20), "
             "layers.0.feed_forward.w1 (20 -> 64), layers.0.feed_forward.w2 (64 -> 20), have dimensions "
             "(in_features -> out_features) that are not all multiples of 16, as fp8 GEMMs need; set "
             "fp8.pad_inner_dim: true (CPU only), or keep such layers in high precision with fp8.exclude"}},
        BadFile{
            "pad_inner_dim_on_cuda.yaml",
            {"pad_inner_dim_on_cuda.yaml:15:3: fp8.pad_inner_dim: is not available on cuda: cuBLASLt's fp8 GEMMs "
             "take only dimensions that are multiples of 16 and nothing pads them there; leave it out and keep "
             "such layers in high precision with fp8.exclude"}},
        BadFile{"blockwise_dims_not_128.yaml",
                {"blockwise_dims_not_128.yaml:16:1: fp8: recipe blockwise needs every fp8 layer's in_features and "
                 "out_features to be multiples of 128 (the block-scaled GEMMs contract over them in 128-wide "
                 "blocks), but 7 fp8 layers, such as layers.0.attention.wq (64 -> 64), layers.0.feed_forward.w1 "
                 "(64 -> 192), layers.0.feed_forward.w2 (192 -> 64), have dimensions (in_features -> out_features) "
                 "that are not; make model.dim, model.ffn_dim and the heads' widths multiples of 128, keep such "
                 "layers in high precision with fp8.exclude, or choose another recipe"}},
        BadFile{"blockwise_tokens_not_128.yaml",
                {"blockwise_tokens_not_128.yaml:14:3: train.batch_size: a micro-batch holds 2 x 96 = 192 tokens, "
                 "not a multiple of 128, which the block-scaled grad_weight GEMM of recipe blockwise contracts over "
                 "in 128-wide blocks; change train.batch_size, train.grad_accum or data.seq_len"}},
        BadFile{"blockwise_delayed_and_half_block.yaml",
                {"blockwise_delayed_and_half_block.yaml:20:7: fp8.gemms.output.input: delayed scaling keeps one "
                 "amax history per tensor, so it needs tensorwise granularity",
                 "blockwise_delayed_and_half_block.yaml:23:7: fp8.gemms.grad_weight.input: must be fp8 with "
                 "granularity block too: fp8.gemms.grad_weight.grad_output is block-scaled, and a block-scaled "
                 "GEMM needs block scales on both operands"}},
        BadFile{"amax_init_from_without_delayed.yaml",
                {"amax_init_from_without_delayed.yaml:16:3: fp8.amax_init_from: only delayed scaling keeps amax "
                 "histories to start from; set fp8.recipe: delayed or leave this out"}},
        BadFile{"amax_init_from_not_a_job_id.yaml",
                {"amax_init_from_not_a_job_id.yaml:16:3: fp8.amax_init_from: expected a job id such as job-12, "
                 "got 'yesterdays-run'"}},
        BadFile{
            "exclude_matches_nothing.yaml",
            {"exclude_matches_nothing.yaml:14:13: fp8.exclude[0]: 'outptu' matches no linear layer (did you "
             "mean 'output'?); layers are named like layers.0.attention.wq, layers.0.feed_forward.w1, "
             "output"}},
        BadFile{
            "long_form_without_recipe.yaml",
            {"long_form_without_recipe.yaml:15:3: fp8.gemms: has no effect with fp8.recipe none; name the "
             "recipe these changes apply to"}},
        BadFile{
            "e5m2_times_e5m2.yaml",
            {"e5m2_times_e5m2.yaml:15:5: fp8.gemms.grad_input: e5m2 x e5m2 has no fp8 GEMM kernel; make one "
             "operand e4m3"}},
        BadFile{
            "all_gather_fp8_with_a_high_precision_weight.yaml",
            {"all_gather_fp8_with_a_high_precision_weight.yaml:15:3: fp8.all_gather_fp8: needs both GEMMs that "
             "read the weight (output and grad_input) to run in fp8 (set it to false for these gemms)"}},
        // Tensor parallelism (parallel.tensor): its range, the mesh, even splits, and what
        // it does not support yet.
        BadFile{"tensor_parallel_out_of_range.yaml",
                {"tensor_parallel_out_of_range.yaml:15:3: parallel.tensor: must be at most 64, got 65"}},
        BadFile{"tensor_parallel_world_size_not_a_multiple.yaml",
                {"tensor_parallel_world_size_not_a_multiple.yaml:15:3: resources.world_size: 3 is not a multiple "
                 "of parallel.tensor (2), the ranks of one tensor-parallel group; set it to parallel.tensor times "
                 "the data-parallel groups"}},
        BadFile{"tensor_parallel_uneven_split.yaml",
                {"tensor_parallel_uneven_split.yaml:6:3: model.n_heads: 6 is not divisible by parallel.tensor (4); "
                 "each tensor-parallel rank holds an equal share of the heads",
                 "tensor_parallel_uneven_split.yaml:7:3: model.n_kv_heads: 3 is not divisible by parallel.tensor "
                 "(4); each tensor-parallel rank holds an equal share of the key/value heads",
                 "tensor_parallel_uneven_split.yaml:8:3: model.ffn_dim: 202 is not divisible by parallel.tensor (4); "
                 "each tensor-parallel rank holds an equal share of the feed-forward columns"}},
        BadFile{"tensor_parallel_all_gather_fp8.yaml",
                {"tensor_parallel_all_gather_fp8.yaml:15:3: fp8.all_gather_fp8: has nothing to gather with "
                 "resources.world_size equal to parallel.tensor (2): there is no FSDP, each rank holds its share of "
                 "every weight whole; leave it out or set it to false"}},
        BadFile{"tensor_parallel_blockwise_shares.yaml",
                {"tensor_parallel_blockwise_shares.yaml:21:3: parallel.tensor: 2 gives each tensor-parallel rank a "
                 "share of model.n_kv_heads x head_dim (2 x 64 / 2 = 64) and of model.ffn_dim (384 / 2 = 192) that "
                 "are not multiples of 128, as recipe blockwise's block-scaled GEMMs need (they contract in "
                 "128-wide blocks); choose another parallel.tensor or model size, keep such layers in high "
                 "precision with fp8.exclude, or choose another recipe"}},
        BadFile{"tensor_parallel_shares_not_16.yaml",
                {"tensor_parallel_shares_not_16.yaml:17:3: parallel.tensor: 2 gives each tensor-parallel rank a "
                 "share of model.ffn_dim (176 / 2 = 88) that is not a multiple of 16, as fp8 GEMMs need; choose "
                 "another parallel.tensor or model size, set fp8.pad_inner_dim: true (CPU only), or keep such "
                 "layers in high precision with fp8.exclude"}},
        BadFile{"yaml_syntax_error.yaml",
                {"yaml_syntax_error.yaml:9:6: YAML syntax error: end of sequence flow not found"}},
        BadFile{"empty.yaml",
                {"empty.yaml:1:1: empty job spec; a job spec needs at least name, model, data and train"}},
        BadFile{
            "only_comment.yaml",
            {"only_comment.yaml:1:1: empty job spec; a job spec needs at least name, model, data and train"}},
        BadFile{"list_for_map.yaml",
                {"list_for_map.yaml:2:8: model: expected a mapping of fields, got a list"}},
        BadFile{
            "top_level_list.yaml",
            {"top_level_list.yaml:1:1: expected a mapping of sections at the top (name:, model:, ...), got a "
             "list; a job spec needs at least name, model, data and train"}},
        BadFile{"two_documents.yaml",
                {"two_documents.yaml:14:1: holds 2 YAML documents; a job spec is one (remove the '---' "
                 "separators)"}},
        BadFile{"duplicate_key.yaml",
                {"duplicate_key.yaml:13:3: train.lr: written twice (first on line 12)"}},
        // A required field left out: the line of its section.
        BadFile{"missing_lr.yaml", {"missing_lr.yaml:9:1: train.lr: is required"}},
        // Whole sections left out: no line to point at.
        BadFile{
            "missing_sections.yaml",
            {"missing_sections.yaml: model: required section is missing (it needs dim, n_layers, n_heads and "
             "max_seq_len)",
             "missing_sections.yaml: data: required section is missing (it needs path)",
             "missing_sections.yaml: train: required section is missing (it needs steps, batch_size and "
             "lr)"}},
        BadFile{
            "several_errors.yaml",
            {"several_errors.yaml:1:1: name: must be a DNS label (lower-case letters, digits and '-', "
             "starting "
             "and ending with a letter or digit, at most 63 characters), got 'Several_Errors'",
             "several_errors.yaml:4:3: model.n_layers: must be > 0, got 0",
             "several_errors.yaml:5:3: model.n_heads: 6 does not divide model.dim (64)",
             "several_errors.yaml:7:3: model.colour: unknown field; model has architecture, vocab_size, dim, "
             "n_layers, n_heads, n_kv_heads, ffn_dim, max_seq_len, rope_theta, norm_eps, tie_embeddings, init_from",
             "several_errors.yaml:10:3: data.val_fraction: must be in [0, 0.5], got 0.7",
             "several_errors.yaml:14:3: train.grad_accum: 4 does not divide train.batch_size (6)",
             "several_errors.yaml:16:3: train.warmup_steps: 500 exceeds train.steps (100)",
             "several_errors.yaml:18:11: resources.device: unknown value 'tpu'; expected one of cpu, cuda "
             "(did you mean 'cpu'?)"}}),
    [](const ::testing::TestParamInfo<BadFile>& info) {
      std::string name = info.param.file;
      return name.substr(0, name.find('.'));
    });

// Smaller cases, written inline: one changed line of the minimal job each.
std::string load_error(const std::string& yaml) {
  absl::StatusOr<v1::JobSpec> loaded = load_job_spec_string(yaml, "job.yaml");
  return loaded.ok() ? "(loaded)" : std::string(loaded.status().message());
}

std::string minimal_with(const std::string& from, const std::string& to) {
  std::string job = kMinimalJob;
  size_t at = job.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return job.replace(at, from.size(), to);
}

TEST(LoadErrors, CrossFieldProblemsPointAtAFieldThatWasWritten) {
  // eval_every needs held-out data, which the val_fraction written above forbids.
  std::string job =
      minimal_with("  path: corpus.txt\n", "  path: corpus.txt\n  val_fraction: 0\n") + "  eval_every: 10\n";
  EXPECT_EQ(load_error(job),
            "job.yaml:14:3: train.eval_every: evaluation needs held-out data, but data.val_fraction is 0 and there "
            "is no data.val_path");
  // data.seq_len is left to its default (model.max_seq_len, 20); a micro-batch of 3 x 20
  // tokens does not suit the fp8 grad_weight GEMM, and train.batch_size is where it shows.
  job = minimal_with("  max_seq_len: 64\n", "  max_seq_len: 20\n");
  job.replace(job.find("batch_size: 4"), 13, "batch_size: 3");
  EXPECT_EQ(
      load_error(job),
      "job.yaml:11:3: train.batch_size: a micro-batch holds 3 x 20 = 60 tokens, not a multiple of 16, which "
      "the fp8 grad_weight GEMM contracts over; change train.batch_size, train.grad_accum or data.seq_len, "
      "or set fp8.pad_inner_dim: true (CPU only)");
}

// data.val_path is validation data of its own: with it, val_fraction defaults to 0 and
// evaluation needs nothing more; both at once is refused.
TEST(LoadErrors, ValPathAndValFractionAreOneOrTheOther) {
  std::string job = minimal_with("  path: corpus.txt\n", "  path: corpus.txt\n  val_path: val.txt\n") +
                    "  eval_every: 10\n";
  absl::StatusOr<v1::JobSpec> loaded = load_job_spec_string(job, "job.yaml");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->data().val_fraction(), 0);
  job = minimal_with("  path: corpus.txt\n", "  path: corpus.txt\n  val_path: val.txt\n  val_fraction: 0.1\n");
  EXPECT_THAT(load_error(job), HasSubstr("data.val_fraction: give data.val_path or data.val_fraction, not both"));
  job = minimal_with("  path: corpus.txt\n", "  path: corpus.txt\n  val_path: ''\n");
  EXPECT_THAT(load_error(job), HasSubstr("data.val_path: must not be empty"));
}

// model.max_seq_len is as long as a sequence gets (the RoPE table's positions): a longer
// data.seq_len is refused, one as long loads, and left out seq_len is max_seq_len.
TEST(LoadErrors, ASequenceLongerThanTheModelIsBuiltForIsRefused) {
  EXPECT_EQ(load_error(minimal_with("  path: corpus.txt\n", "  path: corpus.txt\n  seq_len: 80\n")),
            "job.yaml:9:3: data.seq_len: 80 exceeds model.max_seq_len (64)");
  absl::StatusOr<v1::JobSpec> loaded =
      load_job_spec_string(minimal_with("  path: corpus.txt\n", "  path: corpus.txt\n  seq_len: 64\n"), "job.yaml");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  loaded = load_job_spec_string(minimal_with("  max_seq_len: 64\n", "  max_seq_len: 128\n"), "job.yaml");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->data().seq_len(), 128);
}

TEST(LoadErrors, ARequiredFieldLeftOutPointsAtItsSection) {
  EXPECT_EQ(load_error(minimal_with("  n_layers: 2\n", "")), "job.yaml:2:1: model.n_layers: is required");
}

TEST(LoadErrors, TypeErrorsDoNotEchoAsMissingFields) {
  EXPECT_EQ(load_error(minimal_with("  dim: 64\n", "  dim: wide\n")),
            "job.yaml:3:8: model.dim: expected an integer, got 'wide'");
  EXPECT_EQ(load_error(minimal_with("  dim: 64\n", "  dim:\n")),
            "job.yaml:3:3: model.dim: expected an integer, got nothing");
}

TEST(LoadErrors, ScalarSpellingsAreStrict) {
  EXPECT_THAT(load_error(minimal_with("  steps: 100\n", "  steps: 1e3\n")),
              HasSubstr("train.steps: expected an integer, got '1e3'"));
  EXPECT_THAT(load_error(minimal_with("  steps: 100\n", "  steps: 99999999999999999999\n")),
              HasSubstr("train.steps: '99999999999999999999' is out of range"));
  EXPECT_THAT(
      load_error(minimal_with("  n_layers: 2\n", "  n_layers: 4294967296\n")),
      HasSubstr("job.yaml:4:13: model.n_layers: 4294967296 is out of range [-2147483648, 2147483647]"));
  EXPECT_THAT(load_error(minimal_with("  lr: 1e-3\n", "  lr: .inf\n")),
              HasSubstr("train.lr: expected a number"));
  EXPECT_THAT(load_error(minimal_with("  lr: 1e-3\n", "  lr: nan\n")),
              HasSubstr("train.lr: expected a finite number, got 'nan'"));
  EXPECT_THAT(load_error(kMinimalJob + std::string("  seed: -1\n")),
              HasSubstr("train.seed: expected a non-negative integer, got '-1'"));
  EXPECT_THAT(load_error(minimal_with("  max_seq_len: 64\n", "  max_seq_len: 64\n  tie_embeddings: yes\n")),
              HasSubstr("model.tie_embeddings: expected true or false, got 'yes'"));
  EXPECT_THAT(load_error(minimal_with("name: t\n", "name: {first: t}\n")),
              HasSubstr("job.yaml:1:7: name: expected a string, got a mapping"));
}

TEST(LoadErrors, ListsAndMapsAreCheckedToo) {
  EXPECT_THAT(load_error(kMinimalJob + std::string("fp8:\n  exclude: output\n")),
              HasSubstr("job.yaml:14:12: fp8.exclude: expected a list, got 'output'"));
  EXPECT_THAT(load_error(kMinimalJob + std::string("fp8:\n  exclude:\n")),
              HasSubstr("fp8.exclude: expected a list, got nothing (write [] for an empty list)"));
  EXPECT_THAT(load_error(kMinimalJob + std::string("fp8:\n  include: [[a]]\n")),
              HasSubstr("fp8.include[0]: expected a string, got a list"));
  EXPECT_THAT(load_error("labels: [a]\n" + std::string(kMinimalJob)),
              HasSubstr("job.yaml:1:9: labels: expected a mapping, got a list"));
  EXPECT_THAT(load_error("labels: {'bad key!': x}\n" + std::string(kMinimalJob)),
              HasSubstr("job.yaml:1:10: labels.bad key!: label keys are letters, digits"));
}

// The tensor-parallel checks that need no file of their own: the other rowwise recipe, a
// defaulted field pointing at parallel.tensor, the bottom of the range, and what a cuda
// job is told to do about its shares.
TEST(LoadErrors, TensorParallelRefusalsNameTheFieldAndParallelTensor) {
  const std::string tp = "resources: {world_size: 2}\nparallel: {tensor: 2}\n";
  const std::string job = minimal_with("  n_heads: 4\n", "  n_heads: 4\n  ffn_dim: 192\n") + tp;
  ASSERT_EQ(load_error(job), "(loaded)");
  // Every recipe: the rowwise ones' column-parallel weights are cast with whole-weight scales.
  EXPECT_EQ(load_error(job + "fp8: {recipe: rowwise_with_gw_hp}\n"), "(loaded)");
  // A 2 x 2 mesh, FSDP gathering in fp8 beside tensor parallelism whatever the weights'
  // scales: per tensor, row, column or block.
  const std::string mesh = minimal_with("  n_heads: 4\n", "  n_heads: 4\n  ffn_dim: 192\n") +
                           "resources: {world_size: 4}\nparallel: {tensor: 2}\n";
  EXPECT_EQ(load_error(mesh + "fp8: {all_gather_fp8: true}\n"), "(loaded)");
  EXPECT_EQ(load_error(mesh + "fp8: {recipe: rowwise, all_gather_fp8: true}\n"), "(loaded)");
  // n_kv_heads defaults to n_heads (2 here): its problem points at parallel.tensor.
  EXPECT_EQ(load_error(minimal_with("  n_heads: 4\n", "  n_heads: 2\n  ffn_dim: 192\n") +
                       "resources: {world_size: 4}\nparallel: {tensor: 4}\nfp8: {recipe: none}\n"),
            "job.yaml:5:3: model.n_heads: 2 is not divisible by parallel.tensor (4); each tensor-parallel rank "
            "holds an equal share of the heads\n"
            "job.yaml:15:12: model.n_kv_heads: 2 is not divisible by parallel.tensor (4); each tensor-parallel rank "
            "holds an equal share of the key/value heads");
  EXPECT_EQ(load_error(kMinimalJob + std::string("parallel: {tensor: 0}\n")),
            "job.yaml:13:12: parallel.tensor: must be > 0, got 0");
  EXPECT_EQ(load_error(kMinimalJob + std::string("resources: {world_size: 2, device: cuda}\nparallel: {tensor: 2}\n")),
            "job.yaml:14:12: parallel.tensor: 2 gives each tensor-parallel rank a share of model.ffn_dim (176 / 2 = "
            "88) that is not a multiple of 16, as fp8 GEMMs need; choose another parallel.tensor or model size, or "
            "keep such layers in high precision with fp8.exclude");
  // Shares of layers fp8.exclude keeps in high precision need nothing.
  EXPECT_EQ(load_error(kMinimalJob + tp + "fp8: {exclude: [output, '*.feed_forward.*']}\n"), "(loaded)");
  // An explicit false is what the default is.
  EXPECT_EQ(load_error(job + "fp8: {all_gather_fp8: false}\n"), "(loaded)");
  // Sequence parallelism: beside tensor parallelism, each rank an equal share of the tokens.
  EXPECT_EQ(load_error(kMinimalJob + std::string("parallel: {sequence: true}\n")),
            "job.yaml:13:12: parallel.sequence: needs tensor parallelism: set parallel.tensor > 1 (the ranks that "
            "share the tokens)");
  const std::string sequence = minimal_with("  n_heads: 4\n", "  n_heads: 4\n  ffn_dim: 192\n") +
                               "resources: {world_size: 2}\nparallel: {tensor: 2, sequence: true}\n";
  EXPECT_EQ(load_error(sequence), "(loaded)");

}

TEST(LoadErrors, UnknownTopLevelKeyListsTheSections) {
  EXPECT_EQ(load_error(kMinimalJob + std::string("trian: {}\n")),
            "job.yaml:13:1: trian: unknown field (did you mean 'train'?)");
  EXPECT_THAT(
      load_error(kMinimalJob + std::string("zzz: 1\n")),
      HasSubstr("zzz: unknown field; a job spec has name, owner, priority, labels, description, model"));
}

TEST(LoadErrors, HostileKeysAreQuotedSafely) {
  std::string message = load_error(kMinimalJob + std::string("\"\\x01\\e[31m\": 1\n"));
  EXPECT_THAT(message, HasSubstr("unknown field"));
  for (char c : message) EXPECT_TRUE(c == '\n' || (c >= 0x20 && c < 0x7f)) << static_cast<int>(c);
}

TEST(LoadErrors, OversizedInputIsRefusedUnread) {
  std::string huge(2 << 20, '#');
  EXPECT_THAT(load_error(huge), HasSubstr("a job spec is at most 1048576"));
}

}  // namespace
}  // namespace fp8::jobspec
