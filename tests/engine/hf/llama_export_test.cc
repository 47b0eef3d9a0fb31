// Export of real checkpoints: a tiny job trained for a few steps by a single process and
// by FSDP ranks (forked processes over Gloo), exported to Hugging Face's layout; every
// tensor must equal the checkpoint's parameter bit for bit (wq and wk once their RoPE row
// order is undone), whatever the world size. Bad input leaves nothing behind.
#include <cmath>
#include <cstring>
#include <deque>
#include <memory>
#include <fstream>
#include <string>
#include <vector>

#include "fp8/arith.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/engine/fsdp/rank_harness.h"
#include "tests/engine/train/train_test_util.h"
#include "worker/engine/checkpoint/checkpoint.h"
#include "worker/engine/hf/checkpoint_model.h"
#include "worker/engine/hf/hf_model_reader.h"
#include "worker/engine/hf/llama_export.h"
#include "worker/engine/hf/llama_names.h"
#include "worker/engine/hf/rope_permutation.h"
#include "worker/engine/hf/safetensors_reader.h"
#include "worker/engine/hf/safetensors_writer.h"
#include "worker/engine/model/llama_config.h"
#include "worker/engine/tensor/device.h"
#include "worker/engine/train/trainer.h"

namespace fp8::hf {
namespace {

using engine::testing::RankOutcome;
using engine::testing::RunOptions;
using engine::testing::TempDir;

constexpr int64_t kSteps = 3;

// The parameter as the shards hold it, put together without the export's code: each
// rank's record in rank order, the padding (trailing rows) cut off.
std::vector<float> checkpoint_parameter(const std::filesystem::path& step_dir, int world, const std::string& name,
                                       int64_t numel) {
  std::vector<float> all;
  for (int r = 0; r < world; ++r) {
    absl::StatusOr<checkpoint::ShardReader> shard =
        checkpoint::ShardReader::open(step_dir / checkpoint::shard_file_name(r, world));
    EXPECT_TRUE(shard.ok()) << shard.status();
    if (!shard.ok()) return {};
    const checkpoint::RecordInfo* info = shard->find_record("params/" + name);
    EXPECT_NE(info, nullptr) << name;
    if (info == nullptr) return {};
    std::vector<float> part(info->size_bytes / sizeof(float));
    EXPECT_TRUE(shard->read_tensor<float>(info->name, part, info->shape).ok());
    all.insert(all.end(), part.begin(), part.end());
  }
  EXPECT_GE(static_cast<int64_t>(all.size()), numel) << name;
  all.resize(static_cast<size_t>(numel));
  return all;
}

// Entries of `dir` whose names start with `prefix`.
int count_entries(const std::filesystem::path& dir, const std::string& prefix) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) n += e.path().filename().string().starts_with(prefix);
  return n;
}

// Trains the tiny job with checkpoints in ckpt/ at world size `world` (0: a single process
// without FSDP).
class ExportFixture : public ::testing::Test {
 protected:
  void train(int world) {
    world_ = world > 0 ? world : 1;
    const std::filesystem::path corpus = dir_.path() / "corpus.txt";
    engine::testing::write_synthetic_corpus(corpus, 40000);
    // vocab 257: the embedding's rows do not split evenly, so FSDP pads them.
    spec_ = engine::testing::tiny_job(
        corpus, checkpoints(),
        {absl::StrCat("train.steps=", kSteps), "train.warmup_steps=1", "train.eval_every=0",
         absl::StrCat("checkpoint.every=", kSteps), "model.vocab_size=257", "model.n_heads=4", "model.n_kv_heads=2"});
    RunOptions o;
    o.world_size = world;
    const std::vector<RankOutcome> ranks = engine::testing::run_ranks(spec_, o, dir_.path());
    for (size_t r = 0; r < ranks.size(); ++r) ASSERT_TRUE(ranks[r].ok) << "rank " << r << ": " << ranks[r].error;
  }
  std::filesystem::path checkpoints() const { return dir_.path() / "ckpt"; }
  int world() const { return world_; }

  TempDir dir_{"hf-export"};
  v1::JobSpec spec_;
  int world_ = 1;
};

class LlamaExportTest : public ExportFixture, public ::testing::WithParamInterface<int> {
 protected:
  void SetUp() override { train(GetParam()); }
};
INSTANTIATE_TEST_SUITE_P(WorldSizes, LlamaExportTest, ::testing::Values(0, 1, 2),
                         [](const auto& info) { return info.param == 0 ? std::string("single") : absl::StrCat("fsdp", info.param); });

TEST_P(LlamaExportTest, EveryTensorIsTheCheckpointsParameterBitForBit) {
  ExportOptions o;
  o.checkpoint = checkpoints();
  o.out = dir_.path() / "hf";
  absl::StatusOr<ExportSummary> done = export_llama(o);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->step, kSteps);
  EXPECT_EQ(done->world_size, world());
  EXPECT_EQ(count_entries(dir_.path(), ".hf"), 0);  // no temporary folder left

  const absl::StatusOr<engine::LlamaConfig> c = engine::llama_config_from_spec(spec_.model());
  ASSERT_TRUE(c.ok());
  const std::vector<ParameterShape> params = llama_parameter_shapes(*c);
  absl::StatusOr<SafetensorsReader> st = SafetensorsReader::open(o.out / "model.safetensors");
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->tensors().size(), params.size());
  EXPECT_EQ(st->metadata().at("format"), "pt");
  const std::filesystem::path step_dir = checkpoint::step_directory(checkpoints(), kSteps);
  for (const ParameterShape& p : params) {
    SCOPED_TRACE(p.name);
    const SafetensorsTensorInfo* t = st->find(hf_tensor_name(p.name));
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->dtype, SafetensorsDType::kF32);
    EXPECT_EQ(t->shape, p.shape);
    absl::StatusOr<std::vector<float>> got = st->read_f32(t->name);
    ASSERT_TRUE(got.ok());
    if (is_rope_projection(p.name)) *got = half_to_interleaved_rows(*got, p.shape[0] / c->head_dim(), c->head_dim(), p.shape[1]);
    const std::vector<float> want = checkpoint_parameter(step_dir, world(), p.name, t->numel());
    ASSERT_EQ(got->size(), want.size());
    EXPECT_EQ(std::memcmp(got->data(), want.data(), want.size() * sizeof(float)), 0);
  }

  std::ifstream config_file(o.out / "config.json");
  const nlohmann::json config = nlohmann::json::parse(config_file);
  EXPECT_EQ(config["architectures"][0], "LlamaForCausalLM");
  EXPECT_EQ(config["model_type"], "llama");
  EXPECT_EQ(config["hidden_size"], 32);
  EXPECT_EQ(config["num_hidden_layers"], 2);
  EXPECT_EQ(config["num_attention_heads"], 4);
  EXPECT_EQ(config["num_key_value_heads"], 2);
  EXPECT_EQ(config["intermediate_size"], 64);
  EXPECT_EQ(config["vocab_size"], 257);
  EXPECT_EQ(config["max_position_embeddings"], 32);
  EXPECT_EQ(config["rms_norm_eps"], 1e-5);
  EXPECT_EQ(config["rope_theta"], 10000.0);
  EXPECT_EQ(config["tie_word_embeddings"], false);
  EXPECT_EQ(config["torch_dtype"], "float32");

  // Imported back: the checkpoint's model, every tensor bit for bit, wq and wk included.
  absl::StatusOr<CheckpointModel> from_checkpoint = read_checkpoint_model(checkpoints());
  ASSERT_TRUE(from_checkpoint.ok()) << from_checkpoint.status();
  absl::StatusOr<CheckpointModel> imported = read_hf_model(o.out);
  ASSERT_TRUE(imported.ok()) << imported.status();
  EXPECT_EQ(imported->spec.SerializeAsString(), from_checkpoint->spec.SerializeAsString())
      << imported->spec.DebugString() << " vs " << from_checkpoint->spec.DebugString();
  ASSERT_EQ(imported->parameters.size(), from_checkpoint->parameters.size());
  for (const NamedTensor& want : from_checkpoint->parameters) {
    SCOPED_TRACE(want.name);
    const NamedTensor* got = imported->find(want.name);
    ASSERT_NE(got, nullptr);
    EXPECT_EQ(got->shape, want.shape);
    ASSERT_EQ(got->values.size(), want.values.size());
    EXPECT_EQ(std::memcmp(got->values.data(), want.values.data(), want.values.size() * sizeof(float)), 0);
  }

  // bf16: each element the fp32 export's, rounded to nearest even.
  o.out = dir_.path() / "hf-bf16";
  o.dtype = SafetensorsDType::kBF16;
  ASSERT_TRUE(export_llama(o).ok());
  absl::StatusOr<SafetensorsReader> bf = SafetensorsReader::open(o.out / "model.safetensors");
  ASSERT_TRUE(bf.ok()) << bf.status();
  for (const SafetensorsTensorInfo& t : st->tensors()) {
    SCOPED_TRACE(t.name);
    ASSERT_EQ(bf->find(t.name)->dtype, SafetensorsDType::kBF16);
    const std::vector<float> f32 = *st->read_f32(t.name);
    const std::vector<std::byte> raw = *bf->read_bytes(t.name);
    ASSERT_EQ(raw.size(), 2 * f32.size());
    for (size_t i = 0; i < f32.size(); ++i) {
      uint16_t h;
      std::memcpy(&h, raw.data() + 2 * i, 2);
      ASSERT_EQ(h, float_to_bf16(f32[i])) << i;
    }
  }
}

// A Hugging Face folder this project's Llama cannot compute, or that does not hold the
// model its config.json describes, is refused naming the file and what is wrong.
class HfImportBadInputTest : public ExportFixture {
 protected:
  void SetUp() override {
    train(0);
    ExportOptions o;
    o.checkpoint = checkpoints();
    o.out = good();
    ASSERT_TRUE(export_llama(o).ok());
  }
  std::filesystem::path good() const { return dir_.path() / "hf"; }
  // A copy of the export with config.json's `key` set to `value`.
  std::filesystem::path with_config(const std::string& name, const std::string& key, const nlohmann::json& value) {
    const std::filesystem::path out = dir_.path() / name;
    std::filesystem::copy(good(), out);
    std::ifstream in(out / "config.json");
    nlohmann::json config = nlohmann::json::parse(in);
    in.close();
    config[key] = value;
    std::ofstream(out / "config.json") << config.dump();
    return out;
  }
  // A copy of the export whose model.safetensors holds `tensors` instead.
  std::filesystem::path with_tensors(const std::string& name, std::vector<SafetensorsTensor> tensors) {
    const std::filesystem::path out = dir_.path() / name;
    std::filesystem::create_directory(out);
    std::filesystem::copy(good() / "config.json", out / "config.json");
    EXPECT_TRUE(write_safetensors(out / "model.safetensors", tensors, {}).ok());
    return out;
  }
};

TEST_F(HfImportBadInputTest, IsRefusedNamingTheFileAndWhat) {
  auto refused = [](const std::filesystem::path& dir, const std::string& says) {
    absl::StatusOr<CheckpointModel> m = read_hf_model(dir);
    ASSERT_FALSE(m.ok()) << dir;
    EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(m.status().message().find(says), std::string::npos) << m.status();
  };
  refused(dir_.path() / "nowhere", "no such directory");
  refused(with_config("scaled", "rope_scaling", {{"type", "linear"}, {"factor", 2.0}}), "rope_scaling is set");
  refused(with_config("gelu", "hidden_act", "gelu"), "hidden_act \"gelu\" is not silu");
  refused(with_config("headdim", "head_dim", 16), "head_dim 16 is not hidden_size / num_attention_heads");
  refused(with_config("novocab", "vocab_size", nullptr), "config.json: has no vocab_size");
  refused(with_config("mistral", "model_type", "mistral"), "model_type \"mistral\" is not llama");

  absl::StatusOr<SafetensorsReader> st = SafetensorsReader::open(good() / "model.safetensors");
  ASSERT_TRUE(st.ok());
  std::deque<std::vector<std::byte>> storage;
  std::vector<SafetensorsTensor> all;
  for (const SafetensorsTensorInfo& t : st->tensors()) {
    all.push_back({t.name, t.dtype, t.shape, storage.emplace_back(*st->read_bytes(t.name))});
  }
  std::vector<SafetensorsTensor> missing = all;
  std::erase_if(missing, [](const SafetensorsTensor& t) { return t.name == "model.layers.1.mlp.up_proj.weight"; });
  refused(with_tensors("missing", missing), "has no tensor model.layers.1.mlp.up_proj.weight");
  std::vector<SafetensorsTensor> extra = all;
  extra.push_back({"model.layers.2.mlp.up_proj.weight", all.back().dtype, all.back().shape, all.back().bytes});
  refused(with_tensors("extra", extra), "tensor model.layers.2.mlp.up_proj.weight has no place");
  std::vector<SafetensorsTensor> reshaped = all;
  for (SafetensorsTensor& t : reshaped) {
    if (t.name == "model.norm.weight") t.shape = {t.shape[0] / 2, 2};
  }
  refused(with_tensors("reshaped", reshaped), "model.norm.weight is shaped [16, 2]; config.json's model needs [32]");
}

// model.init_from: a job started from an exported model holds its parameters bit for bit,
// a single process and FSDP ranks (each reading its own rows) alike; a folder of another
// model is refused naming each difference.
class InitFromTest : public ExportFixture {
 protected:
  void SetUp() override {
    train(0);
    ExportOptions o;
    o.checkpoint = checkpoints();
    o.out = dir_.path() / "hf";
    ASSERT_TRUE(export_llama(o).ok());
  }
  // The trained job's model, started from the export, recipe none so that FSDP's losses
  // match the single process's to rounding.
  v1::JobSpec continued(const std::string& name, int batch_size) const {
    v1::JobSpec spec = spec_;
    spec.mutable_model()->set_init_from((dir_.path() / "hf").string());
    spec.mutable_fp8()->set_recipe(v1::Fp8Spec::NONE);
    spec.mutable_fp8()->clear_all_gather_fp8();
    spec.mutable_train()->set_steps(2);
    spec.mutable_train()->set_batch_size(batch_size);
    spec.mutable_train()->set_log_every(1);
    spec.mutable_checkpoint()->set_dir((dir_.path() / name).string());
    return spec;
  }
};

TEST_F(InitFromTest, StartsFromTheModelsParametersOnEveryRank) {
  RunOptions single;
  single.world_size = 0;
  RunOptions two;
  two.world_size = 2;
  const std::vector<RankOutcome> one_process = engine::testing::run_ranks(continued("single", 4), single, dir_.path());
  const std::vector<RankOutcome> ranks = engine::testing::run_ranks(continued("fsdp", 2), two, dir_.path());
  v1::JobSpec fresh_spec = continued("fresh", 4);
  fresh_spec.mutable_model()->clear_init_from();
  const std::vector<RankOutcome> fresh = engine::testing::run_ranks(fresh_spec, single, dir_.path());
  for (const auto* run : {&one_process, &ranks, &fresh}) {
    for (const RankOutcome& r : *run) ASSERT_TRUE(r.ok) << r.error;
  }
  ASSERT_EQ(one_process[0].steps.size(), 2u);
  ASSERT_EQ(ranks[0].steps.size(), 2u);
  // The first loss comes from the initial parameters alone: each rank's rows of every
  // tensor, put together, are the single process's whole tensors.
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_NEAR(ranks[0].steps[i].loss, one_process[0].steps[i].loss, 1e-6 * one_process[0].steps[i].loss) << i;
  }
  EXPECT_GT(std::abs(fresh[0].steps[0].loss - one_process[0].steps[0].loss), 1e-3);  // not the random start

  // In this process (after the forks): the trainer's parameters are the checkpoint's.
  absl::StatusOr<CheckpointModel> trained = read_checkpoint_model(checkpoints());
  ASSERT_TRUE(trained.ok()) << trained.status();
  absl::StatusOr<std::unique_ptr<engine::Trainer>> t =
      engine::Trainer::create(continued("in-process", 4), engine::Device::cpu());
  ASSERT_TRUE(t.ok()) << t.status();
  for (const engine::Parameter& p : (*t)->trained_parameters().all()) {
    SCOPED_TRACE(p.name);
    const NamedTensor* want = trained->find(p.name);
    ASSERT_NE(want, nullptr);
    const std::vector<float> got = *p.value.download<float>();
    // The engine's tensor holds the vocabulary's padding rows (257 pads to 320), zero.
    ASSERT_EQ(got.size(), want->values.size() / want->shape[0] * p.shape[0]);
    EXPECT_EQ(std::memcmp(got.data(), want->values.data(), want->values.size() * sizeof(float)), 0);
    for (size_t i = want->values.size(); i < got.size(); ++i) ASSERT_EQ(got[i], 0.0f) << "padding at " << i;
  }

  // Opened beneath a root, the folder's files are not followed through links.
  const std::filesystem::path linked = dir_.path() / "linked";
  std::filesystem::create_directory(linked);
  std::filesystem::copy(dir_.path() / "hf" / "config.json", linked / "config.json");
  std::filesystem::create_symlink(dir_.path() / "hf" / "model.safetensors", linked / "model.safetensors");
  v1::JobSpec through_link = continued("linked", 4);
  through_link.mutable_model()->set_init_from(linked.string());
  engine::TrainerOptions confined;
  confined.init_from_follow_links = false;
  absl::Status refused = engine::Trainer::create(through_link, engine::Device::cpu(), nullptr, confined).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find((linked / "model.safetensors").string()), std::string::npos) << refused;
  EXPECT_TRUE(engine::Trainer::create(through_link, engine::Device::cpu()).ok());

  // Another model's folder: every difference named, field against config.json's key.
  v1::JobSpec other = continued("other", 4);
  other.mutable_model()->set_n_kv_heads(4);
  other.mutable_model()->set_ffn_dim(96);
  refused = engine::Trainer::create(other, engine::Device::cpu()).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("model.n_kv_heads is 4, config.json's num_key_value_heads 2; "
                                   "model.ffn_dim is 96, config.json's intermediate_size 64"),
            std::string::npos)
      << refused;
  other = continued("missing", 4);
  other.mutable_model()->set_init_from((dir_.path() / "nowhere").string());
  refused = engine::Trainer::create(other, engine::Device::cpu()).status();
  EXPECT_NE(refused.message().find("model.init_from: " + (dir_.path() / "nowhere").string() + ": no such directory"),
            std::string::npos)
      << refused;
}

// On a checkpoint of two ranks, the most shards to get wrong.
class LlamaExportBadInputTest : public ExportFixture {
 protected:
  void SetUp() override { train(2); }
};

TEST_F(LlamaExportBadInputTest, IsRefusedNamingThePathAndLeavesNothing) {
  const std::filesystem::path out = dir_.path() / "out";
  auto refused = [&](const std::filesystem::path& checkpoint, const std::filesystem::path& named) {
    ExportOptions o;
    o.checkpoint = checkpoint;
    o.out = out;
    absl::StatusOr<ExportSummary> done = export_llama(o);
    EXPECT_EQ(done.status().code(), absl::StatusCode::kInvalidArgument) << done.status();
    EXPECT_NE(done.status().message().find(named.string()), std::string::npos) << done.status();
    EXPECT_EQ(count_entries(dir_.path(), ".out"), 0);
  };
  // No checkpoint at all; a folder without a committed one.
  refused(dir_.path() / "missing", dir_.path() / "missing");
  std::filesystem::create_directories(dir_.path() / "empty");
  refused(dir_.path() / "empty", dir_.path() / "empty");
  EXPECT_FALSE(std::filesystem::exists(out));

  // A damaged payload in rank 1's shard: found as the export reads it.
  const std::filesystem::path copy = dir_.path() / "damaged";
  std::filesystem::copy(checkpoints(), copy, std::filesystem::copy_options::recursive);
  const std::filesystem::path shard = checkpoint::shard_path(copy, kSteps, 1, 2);
  uint64_t offset = 0;
  {
    absl::StatusOr<checkpoint::ShardReader> r = checkpoint::ShardReader::open(shard);
    ASSERT_TRUE(r.ok());
    offset = r->find_record("params/norm")->offset;
  }
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(offset));
    char byte = 0;
    f.read(&byte, 1);
    byte = static_cast<char>(byte ^ 0x10);
    f.seekp(static_cast<std::streamoff>(offset));
    f.write(&byte, 1);
  }
  refused(copy, shard);
  EXPECT_FALSE(std::filesystem::exists(out));

  // An --out that exists and is not empty is left as it was; an empty one is filled.
  std::filesystem::create_directories(out);
  std::ofstream(out / "keep.txt") << "mine";
  refused(checkpoints(), out);
  EXPECT_TRUE(std::filesystem::exists(out / "keep.txt"));
  EXPECT_FALSE(std::filesystem::exists(out / "model.safetensors"));
  std::filesystem::remove(out / "keep.txt");
  ExportOptions o;
  o.checkpoint = checkpoint::step_directory(checkpoints(), kSteps);  // one step's folder
  o.out = out;
  absl::StatusOr<ExportSummary> done = export_llama(o);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_TRUE(std::filesystem::exists(out / "model.safetensors"));
}

// A SentencePiece job's tokenizer model goes along as tokenizer.model, byte for byte; one
// whose vocabulary is not the model's is refused and nothing is written.
TEST_F(LlamaExportBadInputTest, TheTokenizerModelGoesAlongWhenItsVocabularyIsTheModels) {
  // ModelProtos of 257 and of 256 pieces (field 1), no trainer spec.
  auto model_of = [&](int pieces, const std::string& name) {
    std::string bytes;
    for (int i = 0; i < pieces; ++i) bytes += std::string("\x0a\x02\x0a\x00", 4);
    std::ofstream(dir_.path() / name, std::ios::binary) << bytes;
    return std::make_pair(dir_.path() / name, bytes);
  };
  const auto [good, good_bytes] = model_of(257, "tok.model");
  const auto [bad, bad_bytes] = model_of(256, "other.model");
  ExportOptions o;
  o.checkpoint = checkpoints();
  o.out = dir_.path() / "with-tokenizer";
  o.tokenizer_model = bad;
  absl::StatusOr<ExportSummary> done = export_llama(o);
  EXPECT_EQ(done.status().code(), absl::StatusCode::kInvalidArgument) << done.status();
  EXPECT_NE(done.status().message().find("256 pieces"), std::string::npos) << done.status();
  EXPECT_FALSE(std::filesystem::exists(o.out));
  o.tokenizer_model = good;
  done = export_llama(o);
  ASSERT_TRUE(done.ok()) << done.status();
  std::ifstream in(o.out / "tokenizer.model", std::ios::binary);
  const std::string copied((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(copied, good_bytes);
}

}  // namespace
}  // namespace fp8::hf
