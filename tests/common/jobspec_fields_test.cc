// Every field of a job spec does what job.proto says. This table names, for each leaf field
// of JobSpec (proto/fp8/v1/job.proto), the tests that fail when the field stops acting, or,
// for the few that only label or describe a job, why nothing acts on them. The test walks
// JobSpec's descriptor, so a field added to job.proto fails it until it is added here with
// where it acts; and every test named must be declared under tests/.
//
// A test is named "Suite.Name" as TEST, TEST_F or TEST_P declares it (for a parameterized
// test the fixture's name, not its instantiation's: "SpecFieldEffects.ARun...", which
// ctest lists as "Fields/SpecFieldEffects.ARun.../model_dim"). Name a test that would fail
// if the field were ignored, not one that only loads or prints it.
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "fp8/v1/job.pb.h"
#include "gtest/gtest.h"

namespace fp8 {
namespace {

namespace fs = std::filesystem;
using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;

// Where a field acts: the tests that show it, or why nothing needs to.
struct Where {
  std::vector<std::string> tests;
  std::string informational;
};

Where tests(std::initializer_list<std::string> tests) { return Where{tests, ""}; }
Where informational(std::string why) { return Where{{}, std::move(why)}; }

// A tiny job trained with one field changed differs from the job as written
// (tests/engine/train/spec_field_effects_test.cc).
constexpr char kTraining[] = "SpecFieldEffects.ARunWithTheFieldChangedDiffersFromTheJobAsWritten";
// Each fp8.gemms field changes its operand in the layer and what its GEMM gets
// (tests/engine/float8/linear_test.cc).
constexpr char kLongForm[] = "Float8LinearLongForm.EveryFieldChangesItsOperandOfItsGemmAndNothingElse";
// fp8-train end to end: steps, reports, learning rates, checkpoints (tests/cli).
constexpr char kCli[] = "Fp8TrainCliTest.TrainsToTheLastStep";

const std::vector<std::pair<std::string, Where>>& field_table() {
  static const auto* table = new std::vector<std::pair<std::string, Where>>{
      // ---- identity and scheduling metadata
      {"name", tests({"LoadGood.RelativePathsAreResolvedAgainstTheJobFilesFolder",  // checkpoints/<name>
                      "CoordinatorMetrics.RunningJobShowsProgressSplitTrafficAndNumerics", kCli})},
      {"owner", tests({"CoordinatorTest.RolesAndOwnership", "CoordinatorTest.UsersStayInTheirOwnFolders"})},
      {"priority",
       tests({"CoordinatorTest.PriorityThenSubmissionOrder", "ControlPlaneTest.PriorityDecidesWhoRunsFirst"})},
      {"labels", tests({"CoordinatorMetrics.RunningJobShowsProgressSplitTrafficAndNumerics"})},
      {"description", informational("one line for people to read, kept in the job's spec; job.proto promises no "
                                    "behaviour for it")},

      // ---- model
      {"model.architecture", informational("names the model family, and llama is its only value: no job can choose "
                                           "another (an unknown number is refused, as for every enum)")},
      {"model.vocab_size", tests({kTraining})},
      {"model.dim", tests({kTraining})},
      {"model.n_layers", tests({kTraining})},
      {"model.n_heads", tests({kTraining})},
      {"model.n_kv_heads", tests({kTraining, "ModelShapes.LinearLayersWithGroupedQueryAttention"})},
      {"model.ffn_dim", tests({kTraining})},
      {"model.max_seq_len", tests({"LoadErrors.ASequenceLongerThanTheModelIsBuiltForIsRefused",
                                   "LlamaExportTest.EveryTensorIsTheCheckpointsParameterBitForBit"})},
      {"model.rope_theta", tests({kTraining})},
      {"model.norm_eps", tests({kTraining})},
      {"model.tie_embeddings", tests({kTraining, "LlamaModuleFilter.TiedOutputSharesTheEmbeddingTable"})},
      {"model.init_from", tests({"InitFromTest.StartsFromTheModelsParametersOnEveryRank"})},

      // ---- data
      {"data.path", tests({kTraining, "Fp8DataCliTest.Fp8TrainTrainsOnAPatternOfShardsWithAValidationShardOfItsOwn"})},
      {"data.tokenizer", tests({"Fp8DataCliTest.ASentencePieceTokenizerMakesShardsThatFp8TrainTrainsOn"})},
      {"data.seq_len", tests({kTraining})},
      {"data.val_fraction", tests({kTraining, "DataTest.ValidationIsTheTailStartingAtTheNearestLineStart"})},
      {"data.seed", tests({kTraining, "CheckpointProblems.ACheckpointOfAnotherDataOrderIsRefused"})},
      {"data.val_path",
       tests({kTraining, "Fp8DataCliTest.Fp8TrainTrainsOnAPatternOfShardsWithAValidationShardOfItsOwn"})},
      {"data.tokenizer_model", tests({"Fp8DataCliTest.ASentencePieceTokenizerMakesShardsThatFp8TrainTrainsOn"})},

      // ---- train
      {"train.steps", tests({kTraining, kCli})},
      {"train.batch_size", tests({kTraining})},
      {"train.grad_accum", tests({kTraining, "MemoryEstimateTest.IsWithinFifteenPercentOfTheMeasuredPeak"})},
      {"train.compute_dtype", tests({kTraining, "MixedPrecisionTest.HoldsLessMemoryThanFp32Activations"})},
      // Trains bit for bit alike in every mode (by design): it acts on memory.
      {"train.activation_checkpointing",
       tests({"PeakMemory.FallsByWhatTheBlocksNoLongerKeep"})},
      {"train.lr", tests({kTraining, kCli})},
      {"train.min_lr", tests({kTraining, kCli})},
      {"train.warmup_steps", tests({kTraining, kCli})},
      {"train.schedule", tests({kTraining})},
      {"train.weight_decay", tests({kTraining})},
      {"train.beta1", tests({kTraining})},
      {"train.beta2", tests({kTraining})},
      {"train.eps", tests({kTraining})},
      {"train.grad_clip", tests({kTraining})},
      {"train.seed", tests({kTraining})},
      {"train.log_every", tests({kTraining, kCli})},
      {"train.eval_every", tests({kTraining, kCli})},
      {"train.eval_batches", tests({kTraining})},
      {"train.progress_timeout_seconds", tests({"CoordinatorTest.AHungRankEndsItsAttempt"})},
      {"train.collective_timeout_seconds",
       tests({"FsdpTrainingTest.AStalledRankFailsItsPeersWithinTheJobsCollectiveTimeout",
              "CollectiveTimeoutTest.AConfiguredTimeoutHoldsFromTheFirstStep"})},

      // ---- fp8
      {"fp8.recipe", tests({kTraining, "CastNumericsReportTest.EveryReportStepCarriesEachCastOfEveryFp8Linear"})},
      {"fp8.amax_history_len", tests({kTraining})},
      {"fp8.power_of_2_scales", tests({kTraining})},
      // Acts only across ranks.
      {"fp8.all_gather_fp8", tests({"FsdpTrainingTest.Fp8AllGatherEqualsFp32AllGatherAndMovesOneBytePerElement"})},
      {"fp8.pad_inner_dim", tests({"LlamaModuleFilter.DimensionsNotMultiplesOf16StayHighPrecision",
                                   "BackendContract.ARaggedGemmEqualsItsZeroPaddedProductBitForBit",
                                   "LoadGood.OddSizesAreFineWithPadding"})},
      {"fp8.amax_init_from", tests({"AmaxWarmStartTest.AFirstAttemptGetsTheSourceJobsHistoriesUntilItHasItsOwn",
                                    "ControlPlaneTest.ADelayedJobWarmStartsFromAnEarlierJobsAmaxHistories"})},
      {"fp8.include", tests({kTraining, "LlamaModuleFilter.IncludeAndExcludeGlobs"})},
      {"fp8.exclude", tests({kTraining, "LlamaModuleFilter.OutputExcludedOthersFp8"})},
      {"fp8.gemms.output.input.dtype", tests({kLongForm})},
      {"fp8.gemms.output.input.granularity", tests({kLongForm})},
      {"fp8.gemms.output.input.scaling", tests({kLongForm})},
      {"fp8.gemms.output.weight.dtype", tests({kLongForm})},
      {"fp8.gemms.output.weight.granularity", tests({kLongForm})},
      {"fp8.gemms.output.weight.scaling", tests({kLongForm})},
      {"fp8.gemms.output.fast_accum", tests({kLongForm})},
      {"fp8.gemms.grad_input.grad_output.dtype", tests({kLongForm})},
      {"fp8.gemms.grad_input.grad_output.granularity", tests({kLongForm})},
      {"fp8.gemms.grad_input.grad_output.scaling", tests({kLongForm})},
      {"fp8.gemms.grad_input.weight.dtype", tests({kLongForm})},
      {"fp8.gemms.grad_input.weight.granularity", tests({kLongForm})},
      {"fp8.gemms.grad_input.weight.scaling", tests({kLongForm})},
      {"fp8.gemms.grad_input.fast_accum", tests({kLongForm})},
      {"fp8.gemms.grad_weight.grad_output.dtype", tests({kLongForm})},
      {"fp8.gemms.grad_weight.grad_output.granularity", tests({kLongForm})},
      {"fp8.gemms.grad_weight.grad_output.scaling", tests({kLongForm})},
      {"fp8.gemms.grad_weight.input.dtype", tests({kLongForm})},
      {"fp8.gemms.grad_weight.input.granularity", tests({kLongForm})},
      {"fp8.gemms.grad_weight.input.scaling", tests({kLongForm})},
      {"fp8.gemms.grad_weight.fast_accum", tests({kLongForm})},

      // ---- checkpoint
      {"checkpoint.dir", tests({"ResumeTest.StoppedAndResumedRunEqualsStraightRunBitForBit",
                                "CoordinatorTest.UsersStayInTheirOwnFolders", kCli})},
      {"checkpoint.every", tests({kTraining, kCli})},
      {"checkpoint.keep", tests({kTraining, kCli})},

      // ---- resources
      {"resources.world_size", tests({"CoordinatorTest.GangWaitsForEnoughWorkers"})},
      {"resources.device", tests({"CoordinatorTest.AJobRunsOnlyOnWorkersOfItsDevice",
                                  "CudaJobTest.OneRankJobOnAGpuWorkerRunsToSuccess"})},
      {"resources.cpus_per_rank", tests({"CoordinatorTest.AJobWaitsForAWorkerOfferingItsCpusPerRank"})},
      {"resources.memory_gb", tests({"CoordinatorTest.PlacementHonoursWhatWorkersOffer"})},

      // ---- fsdp: act only across ranks
      {"fsdp.param_dtype", tests({"FsdpBf16CommTest.HalvesTheHighPrecisionBytesAndFollowsTheFp32Loss",
                                  "FsdpBf16CommTest.EachFieldAloneChangesTheTrainingAndRepeatsBitForBit"})},
      {"fsdp.reduce_dtype", tests({"FsdpBf16CommTest.HalvesTheHighPrecisionBytesAndFollowsTheFp32Loss",
                                   "FsdpBf16CommTest.EachFieldAloneChangesTheTrainingAndRepeatsBitForBit"})},

      // ---- parallel
      {"parallel.tensor", tests({"MemoryEstimateTensorParallel.ARankHoldsItsShareOfTheSplitLinearsAndActivations",
                                 "LoadGood.TensorParallelJobGetsItsOwnDefaults",
                                 "LoadErrors.TensorParallelRefusalsNameTheFieldAndParallelTensor",
                                 "Recipes.MatchOneProcessOnTheSameBatches"})},
      {"parallel.sequence", tests({"TensorParallelTrainingTest.SequenceParallelismGathersTheNormedTokensAsFp8Codes",
                                   "Recipes.MatchOneProcessOnTheSameBatches",
                                   "LoadErrors.TensorParallelRefusalsNameTheFieldAndParallelTensor"})},

      // ---- restarts
      {"restarts.max_restarts", tests({"CoordinatorTest.FailedRankStopsTheGangAndRestarts"})},
      {"restarts.backoff_seconds", tests({"CoordinatorTest.ARestartWaitsOutTheJobsBackoff"})},
      {"restarts.on", tests({"CoordinatorTest.ADivergenceIsNotRestartedUnlessRestartsOnListsIt"})},
  };
  return *table;
}

// The leaf fields of `d` by path: scalars, enums, strings, and repeated fields and maps
// (whose entries are values, not sections); singular messages are walked into.
void collect_leaves(const Descriptor& d, const std::string& prefix, std::vector<std::string>& out) {
  for (int i = 0; i < d.field_count(); ++i) {
    const FieldDescriptor& f = *d.field(i);
    const std::string path = prefix.empty() ? std::string(f.name()) : absl::StrCat(prefix, ".", f.name());
    if (f.type() == FieldDescriptor::TYPE_MESSAGE && !f.is_repeated()) {
      collect_leaves(*f.message_type(), path, out);
    } else {
      out.push_back(path);
    }
  }
}

std::vector<std::string> job_spec_leaves() {
  std::vector<std::string> leaves;
  collect_leaves(*v1::JobSpec::descriptor(), "", leaves);
  return leaves;
}

// "Suite.Name" of every TEST, TEST_F, TEST_P (and typed test) declared in a source file
// under tests/.
std::set<std::string> declared_tests() {
  static const std::regex kDeclaration(
      R"(\b(?:TEST|TEST_F|TEST_P|TYPED_TEST|TYPED_TEST_P)\s*\(\s*(\w+)\s*,\s*(\w+)\s*\))");
  std::set<std::string> declared;
  for (const fs::directory_entry& e : fs::recursive_directory_iterator(fs::path(FP8_SOURCE_DIR) / "tests")) {
    const std::string ext = e.path().extension().string();
    if (!e.is_regular_file() || (ext != ".cc" && ext != ".h" && ext != ".cu")) continue;
    std::ifstream in(e.path(), std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    const std::string source = text.str();
    for (std::sregex_iterator m(source.begin(), source.end(), kDeclaration), end; m != end; ++m) {
      declared.insert(absl::StrCat((*m)[1].str(), ".", (*m)[2].str()));
    }
  }
  return declared;
}

TEST(JobSpecFields, TheWalkReachesEveryLeafAndOnlyLeaves) {
  const std::vector<std::string> leaves = job_spec_leaves();
  const std::set<std::string> set(leaves.begin(), leaves.end());
  for (const char* leaf : {"name", "labels", "model.dim", "data.path", "train.collective_timeout_seconds",
                           "fp8.include", "fp8.gemms.output.input.dtype", "fp8.gemms.grad_weight.fast_accum",
                           "checkpoint.keep", "resources.memory_gb", "restarts.on"}) {
    EXPECT_TRUE(set.contains(leaf)) << leaf;
  }
  for (const char* section : {"model", "fp8", "fp8.gemms", "fp8.gemms.output", "fp8.gemms.output.input", "restarts"}) {
    EXPECT_FALSE(set.contains(section)) << section << " is a section, not a leaf";
  }
  EXPECT_EQ(set.size(), leaves.size()) << "a path twice";
}

TEST(JobSpecFields, EveryFieldSaysWhereItActs) {
  std::set<std::string> listed;
  for (const auto& [field, where] : field_table()) listed.insert(field);
  for (const std::string& leaf : job_spec_leaves()) {
    EXPECT_TRUE(listed.contains(leaf))
        << "JobSpec field " << leaf << " says nowhere where it acts. Add to field_table() in "
        << "tests/common/jobspec_fields_test.cc {\"" << leaf << "\", tests({\"Suite.Name\"})}, naming a test that "
        << "fails when " << leaf << " stops doing what job.proto says (write one if none does), or, if it only "
        << "labels or describes the job, {\"" << leaf << "\", informational(\"why nothing acts on it\")}";
  }
}

TEST(JobSpecFields, EveryEntryIsAFieldOfJobSpecOnce) {
  const std::vector<std::string> leaves = job_spec_leaves();
  const std::set<std::string> known(leaves.begin(), leaves.end());
  std::map<std::string, int> times;
  for (const auto& [field, where] : field_table()) {
    ++times[field];
    EXPECT_TRUE(known.contains(field)) << "field_table() lists " << field
                                       << ", which is no leaf field of JobSpec (renamed or removed from job.proto? "
                                       << "a section rather than a field?); fields are: "
                                       << absl::StrJoin(leaves, ", ");
  }
  for (const auto& [field, n] : times) EXPECT_EQ(n, 1) << field << " is listed " << n << " times";
}

TEST(JobSpecFields, EveryTestNamedIsDeclaredUnderTests) {
  const std::set<std::string> declared = declared_tests();
  ASSERT_GT(declared.size(), 100u) << "found too few tests under " << FP8_SOURCE_DIR << "/tests";
  ASSERT_TRUE(declared.contains("JobSpecFields.EveryTestNamedIsDeclaredUnderTests")) << "this very test";
  for (const auto& [field, where] : field_table()) {
    SCOPED_TRACE(field);
    EXPECT_NE(where.tests.empty(), where.informational.empty())
        << field << ": name the tests that show it acting, or say why it is informational, not both";
    for (const std::string& test : where.tests) {
      EXPECT_TRUE(declared.contains(test))
          << field << " names " << test << ", which no TEST, TEST_F or TEST_P under tests/ declares (renamed? "
          << "write it as Suite.Name, the fixture's name for a parameterized test)";
    }
  }
}

}  // namespace
}  // namespace fp8
