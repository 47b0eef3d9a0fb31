// Valid job files load, with every default the schema documents filled in.
#include <filesystem>
#include <fstream>

#include "common/jobspec/loader.h"
#include "common/jobspec/paths.h"
#include "gtest/gtest.h"
#include "tests/common/jobspec_test_util.h"

namespace fp8::jobspec {
namespace {

using testing::example_job;
using testing::kMinimalJob;
using testing::testdata;

TEST(LoadGood, MinimalFileGetsEveryDefault) {
  absl::StatusOr<v1::JobSpec> loaded = load_job_spec_file(testdata("good/minimal.yaml"));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const v1::JobSpec& s = *loaded;

  EXPECT_EQ(s.name(), "minimal");
  EXPECT_FALSE(s.has_owner());
  EXPECT_EQ(s.priority(), 0);

  EXPECT_EQ(s.model().architecture(), v1::ModelSpec::LLAMA);
  EXPECT_EQ(s.model().vocab_size(), 256);
  EXPECT_EQ(s.model().n_kv_heads(), 4);  // = n_heads
  EXPECT_EQ(s.model().ffn_dim(), 176);   // 2/3 * 4 * 64 = 170, rounded up to 16
  EXPECT_EQ(s.model().rope_theta(), 10000);
  EXPECT_DOUBLE_EQ(s.model().norm_eps(), 1e-5);
  EXPECT_TRUE(s.model().has_tie_embeddings());
  EXPECT_FALSE(s.model().tie_embeddings());

  EXPECT_EQ(s.data().tokenizer(), v1::DataSpec::BYTES);
  EXPECT_EQ(s.data().seq_len(), 64);  // = model.max_seq_len
  EXPECT_DOUBLE_EQ(s.data().val_fraction(), 0.05);
  EXPECT_TRUE(s.data().has_seed());

  EXPECT_EQ(s.train().grad_accum(), 1);
  EXPECT_EQ(s.train().compute_dtype(), v1::TrainSpec::FP32);
  EXPECT_DOUBLE_EQ(s.train().min_lr(), 1e-4);  // lr / 10
  EXPECT_EQ(s.train().warmup_steps(), 0);
  EXPECT_EQ(s.train().schedule(), v1::TrainSpec::COSINE);
  EXPECT_DOUBLE_EQ(s.train().weight_decay(), 0.1);
  EXPECT_DOUBLE_EQ(s.train().beta1(), 0.9);
  EXPECT_DOUBLE_EQ(s.train().beta2(), 0.95);
  EXPECT_DOUBLE_EQ(s.train().eps(), 1e-8);
  EXPECT_DOUBLE_EQ(s.train().grad_clip(), 1.0);
  EXPECT_EQ(s.train().log_every(), 10);
  EXPECT_EQ(s.train().eval_every(), 0);
  EXPECT_EQ(s.train().eval_batches(), 8);
  EXPECT_EQ(s.train().progress_timeout_seconds(), 0);    // derived from the job's pace
  EXPECT_EQ(s.train().collective_timeout_seconds(), 0);  // the same

  EXPECT_EQ(s.fp8().recipe(), v1::Fp8Spec::TENSORWISE);
  EXPECT_EQ(s.fp8().amax_history_len(), 16);
  EXPECT_FALSE(s.fp8().power_of_2_scales());
  EXPECT_TRUE(s.fp8().all_gather_fp8());
  EXPECT_FALSE(s.fp8().pad_inner_dim());
  EXPECT_TRUE(s.fp8().include().empty());
  ASSERT_EQ(s.fp8().exclude_size(), 1);
  EXPECT_EQ(s.fp8().exclude(0), "output");
  EXPECT_FALSE(s.fp8().has_gemms());

  EXPECT_EQ(s.checkpoint().every(), 0);
  EXPECT_EQ(s.checkpoint().keep(), 3);
  EXPECT_EQ(s.resources().world_size(), 1);
  EXPECT_EQ(s.resources().device(), v1::ResourceSpec::CPU);
  EXPECT_EQ(s.resources().cpus_per_rank(), 1);
  EXPECT_FALSE(s.resources().has_memory_gb());  // no limit
  EXPECT_EQ(s.restarts().max_restarts(), 5);
  EXPECT_EQ(s.restarts().backoff_seconds(), 10);
  EXPECT_EQ(s.parallel().tensor(), 1);
}

TEST(LoadGood, RelativePathsAreResolvedAgainstTheJobFilesFolder) {
  absl::StatusOr<v1::JobSpec> loaded = load_job_spec_file(testdata("good/minimal.yaml"));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  std::filesystem::path folder = std::filesystem::path(testdata("good")).lexically_normal();
  EXPECT_EQ(loaded->data().path(), (folder / "corpus.txt").string());
  EXPECT_EQ(loaded->checkpoint().dir(), (folder / "checkpoints" / "minimal").string());
}

TEST(LoadGood, ValPathIsResolvedAsDataPathIs) {
  v1::JobSpec spec;
  spec.mutable_data()->set_path("shards/train.tokens");
  spec.mutable_data()->set_val_path("../held-out/val.tokens");
  make_paths_absolute(spec, "/jobs/run");
  EXPECT_EQ(spec.data().path(), "/jobs/run/shards/train.tokens");
  EXPECT_EQ(spec.data().val_path(), "/jobs/held-out/val.tokens");
}

// With data.tokenizer sentencepiece and no model.vocab_size, the vocabulary is the
// tokenizer model's, read when the job file is loaded; an unreadable model leaves it
// required.
TEST(LoadGood, ASentencePieceJobTakesItsVocabularyFromTheModel) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "fp8_load_good_spm";
  std::filesystem::create_directories(dir);
  // A ModelProto of three pieces (field 1) and a trainer spec (field 2) with eos_id 1.
  const std::string model = std::string("\x0a\x02\x0a\x00", 4) + std::string("\x0a\x02\x0a\x00", 4) +
                            std::string("\x0a\x02\x0a\x00", 4) + std::string("\x12\x03\xd0\x02\x01", 5);
  std::ofstream(dir / "tok.model", std::ios::binary) << model;
  std::string job = std::string(kMinimalJob);
  job.replace(job.find("  path: corpus.txt\n"), 18,
              "  path: corpus.txt\n  tokenizer: sentencepiece\n  tokenizer_model: tok.model\n");
  std::ofstream(dir / "job.yaml") << job;
  absl::StatusOr<v1::JobSpec> loaded = load_job_spec_file((dir / "job.yaml").string());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->model().vocab_size(), 3);
  EXPECT_EQ(loaded->data().tokenizer_model(), (dir / "tok.model").string());
  std::filesystem::remove(dir / "tok.model");
  loaded = load_job_spec_file((dir / "job.yaml").string());
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("model.vocab_size: required here"), std::string::npos) << loaded.status();
  std::filesystem::remove_all(dir);
}

TEST(LoadGood, TextKeepsPathsAsWritten) {
  absl::StatusOr<v1::JobSpec> loaded = load_job_spec_string(kMinimalJob, "job.yaml");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->data().path(), "corpus.txt");
  EXPECT_EQ(loaded->checkpoint().dir(), "checkpoints/t");
}

TEST(LoadGood, EveryFieldWrittenIsKept) {
  absl::StatusOr<v1::JobSpec> loaded = load_job_spec_file(testdata("good/full.yaml"));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const v1::JobSpec& s = *loaded;
  EXPECT_EQ(s.owner(), "ml-platform");
  EXPECT_EQ(s.priority(), 10);
  EXPECT_EQ(s.labels().at("app.kubernetes.io/part-of"), "fp8train");
  EXPECT_EQ(s.model().n_kv_heads(), 2);
  EXPECT_EQ(s.model().ffn_dim(), 384);
  EXPECT_DOUBLE_EQ(s.model().norm_eps(), 1e-6);
  EXPECT_TRUE(s.model().tie_embeddings());
  EXPECT_EQ(s.data().path(), "/data/corpus.txt");  // absolute stays as written
  EXPECT_EQ(s.data().seed(), 7u);
  EXPECT_DOUBLE_EQ(s.train().min_lr(), 6e-5);
  EXPECT_EQ(s.train().schedule(), v1::TrainSpec::LINEAR);
  EXPECT_EQ(s.train().compute_dtype(), v1::TrainSpec::BF16);
  EXPECT_EQ(s.train().grad_clip(), 0);  // written 0 (off), not replaced by the default 1.0
  EXPECT_EQ(s.train().collective_timeout_seconds(), 90);
  EXPECT_EQ(s.fp8().recipe(), v1::Fp8Spec::ROWWISE_WITH_GW_HP);
  EXPECT_FALSE(s.fp8().power_of_2_scales());  // written; the rowwise default would be true
  ASSERT_EQ(s.fp8().exclude_size(), 2);
  EXPECT_EQ(s.fp8().exclude(1), "*.wo");
  EXPECT_FALSE(s.fp8().gemms().output().fast_accum());
  EXPECT_EQ(s.fp8().gemms().grad_weight().input().granularity(), v1::CastConfig::AXISWISE);
  EXPECT_EQ(s.resources().device(), v1::ResourceSpec::CUDA);
  EXPECT_DOUBLE_EQ(s.resources().memory_gb(), 64.5);
  EXPECT_EQ(s.restarts().max_restarts(), 2);
  EXPECT_TRUE(s.parallel().has_tensor());
}

// Tensor parallelism over the job's two ranks: FSDP has nothing to gather; checkpoints as
// any job's.
TEST(LoadGood, TensorParallelJobGetsItsOwnDefaults) {
  absl::StatusOr<v1::JobSpec> loaded = load_job_spec_file(testdata("good/tensor_parallel.yaml"));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->parallel().tensor(), 2);
  EXPECT_EQ(loaded->resources().world_size(), 2);
  EXPECT_FALSE(loaded->fp8().all_gather_fp8());
  EXPECT_TRUE(loaded->checkpoint().has_dir());
  // Beside data parallelism, FSDP gathers in fp8 as without tensor parallelism, whatever
  // the weights' scales.
  loaded = load_job_spec_file(testdata("good/tensor_parallel.yaml"), {"resources.world_size=4"});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(loaded->fp8().all_gather_fp8());
  loaded = load_job_spec_file(testdata("good/tensor_parallel.yaml"), {"resources.world_size=4", "fp8.recipe=rowwise"});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(loaded->fp8().all_gather_fp8());
  // The same job without tensor parallelism: FSDP over the two ranks, gathering in fp8.
  loaded = load_job_spec_file(testdata("good/tensor_parallel.yaml"), {"parallel.tensor=1"});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(loaded->fp8().all_gather_fp8());
  EXPECT_TRUE(loaded->checkpoint().has_dir());
  // A spec built in code, as the coordinator gets one.
  v1::JobSpec spec = *loaded;
  spec.mutable_parallel()->set_tensor(2);
  spec.mutable_fp8()->clear_all_gather_fp8();
  absl::StatusOr<v1::JobSpec> resolved = resolve_job_spec(spec);
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_FALSE(resolved->fp8().all_gather_fp8());
}

TEST(LoadGood, BlockwiseRecipeTrainsOnCuda) {
  absl::StatusOr<v1::JobSpec> loaded = load_job_spec_file(testdata("good/blockwise_on_cuda.yaml"));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->fp8().recipe(), v1::Fp8Spec::BLOCKWISE);
  EXPECT_EQ(loaded->resources().device(), v1::ResourceSpec::CUDA);
  EXPECT_TRUE(loaded->fp8().power_of_2_scales());  // as TransformerEngine's block scaling
}

TEST(LoadGood, RowwiseRecipeDefaultsToPowerOf2ScalesAndFp8AllGather) {
  absl::StatusOr<v1::JobSpec> loaded =
      load_job_spec_string(std::string(kMinimalJob) + "fp8:\n  recipe: rowwise\n", "job.yaml");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(loaded->fp8().power_of_2_scales());
  EXPECT_TRUE(loaded->fp8().all_gather_fp8());  // each rank casts its shard's rows
}

TEST(LoadGood, EnumNamesInAnyCase) {
  absl::StatusOr<v1::JobSpec> loaded =
      load_job_spec_string(std::string(kMinimalJob) + "fp8:\n  recipe: ROWWISE_with_GW_HP\n", "job.yaml");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->fp8().recipe(), v1::Fp8Spec::ROWWISE_WITH_GW_HP);
}

TEST(LoadGood, EmptyExcludeListMeansTheOutputProjectionIsFp8Too) {
  absl::StatusOr<v1::JobSpec> loaded =
      load_job_spec_string(std::string(kMinimalJob) + "fp8:\n  exclude: []\n", "job.yaml");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(loaded->fp8().exclude().empty());
}

TEST(LoadGood, EmptySectionTakesItsDefaults) {
  absl::StatusOr<v1::JobSpec> loaded = load_job_spec_string(std::string(kMinimalJob) + "fp8:\n", "job.yaml");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->fp8().recipe(), v1::Fp8Spec::TENSORWISE);
}

TEST(LoadGood, OddSizesAreFineWithPadding) {
  absl::StatusOr<v1::JobSpec> loaded = load_job_spec_file(testdata("good/pad_inner_dim.yaml"));
  EXPECT_TRUE(loaded.ok()) << loaded.status();
}

TEST(LoadGood, OddSizesAreFineWhenTheFilterKeepsThoseLayersInHighPrecision) {
  absl::StatusOr<v1::JobSpec> loaded = load_job_spec_file(testdata("good/excluded_small_layers.yaml"));
  EXPECT_TRUE(loaded.ok()) << loaded.status();
}

TEST(LoadGood, OddSizesAreFineWithoutFp8) {
  std::string job = R"(name: t
model: {dim: 20, n_layers: 1, n_heads: 2, max_seq_len: 32}
data: {path: c.txt}
train: {steps: 1, batch_size: 3, lr: 0.1}
fp8: {recipe: none}
)";
  absl::StatusOr<v1::JobSpec> loaded = load_job_spec_string(job, "job.yaml");
  EXPECT_TRUE(loaded.ok()) << loaded.status();
}

TEST(LoadGood, TheTinyCpuExample) {
  absl::StatusOr<v1::JobSpec> loaded = load_job_spec_file(example_job("tiny-cpu.yaml"));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const v1::JobSpec& s = *loaded;
  EXPECT_EQ(s.model().dim(), 64);
  EXPECT_EQ(s.model().n_layers(), 2);
  EXPECT_EQ(s.model().n_heads(), 4);
  EXPECT_EQ(s.model().vocab_size(), 256);
  EXPECT_EQ(s.data().seq_len(), 64);
  EXPECT_EQ(s.train().steps(), 200);
  EXPECT_EQ(s.fp8().recipe(), v1::Fp8Spec::TENSORWISE);
  EXPECT_EQ(s.resources().device(), v1::ResourceSpec::CPU);
  std::filesystem::path corpus = std::filesystem::path(example_job("corpus/kjv.txt")).lexically_normal();
  EXPECT_EQ(s.data().path(), corpus.string());
}

TEST(LoadGood, ResolveFillsDefaultsOfASpecBuiltInCode) {
  v1::JobSpec spec;
  spec.set_name("from-code");
  spec.mutable_model()->set_dim(64);
  spec.mutable_model()->set_n_layers(1);
  spec.mutable_model()->set_n_heads(4);
  spec.mutable_model()->set_max_seq_len(32);
  spec.mutable_data()->set_path("/data/x.txt");
  spec.mutable_train()->set_steps(10);
  spec.mutable_train()->set_batch_size(2);
  spec.mutable_train()->set_lr(0.01);
  absl::StatusOr<v1::JobSpec> resolved = resolve_job_spec(spec);
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_EQ(resolved->model().ffn_dim(), 176);
  ASSERT_EQ(resolved->fp8().exclude_size(), 1);  // no fp8 section: all of its defaults
  EXPECT_TRUE(validate_job_spec(*resolved).ok());
}

TEST(LoadGood, ValidateNamesFieldsWithoutLines) {
  absl::StatusOr<v1::JobSpec> loaded = load_job_spec_string(kMinimalJob, "job.yaml");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  v1::JobSpec spec = *loaded;
  spec.mutable_train()->set_steps(0);
  spec.mutable_fp8()->set_recipe(static_cast<v1::Fp8Spec::Recipe>(42));  // from a newer client
  absl::Status status = validate_job_spec(spec);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("train.steps: must be > 0, got 0"), std::string::npos) << status;
  EXPECT_NE(status.message().find("fp8.recipe: unknown value 42"), std::string::npos) << status;
}

TEST(LoadGood, MissingFileIsNotFound) {
  absl::StatusOr<v1::JobSpec> loaded = load_job_spec_file(testdata("good/no-such-file.yaml"));
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(loaded.status().message().find("no-such-file.yaml: no such file"), std::string::npos);
}

TEST(LoadGood, FolderIsNotAJobFile) {
  absl::StatusOr<v1::JobSpec> loaded = load_job_spec_file(testdata("good"));
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fp8::jobspec
