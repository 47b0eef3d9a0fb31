// Checkpoint and resume of the training loop: a run stopped after a checkpoint and resumed
// reproduces the bits of a run that never stopped, and damaged or mismatched checkpoints
// are reported, never loaded.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string_view>

#include "gtest/gtest.h"
#include "tests/engine/train/train_test_util.h"
#include "worker/engine/checkpoint/committed_checkpoint.h"
#include "worker/engine/checkpoint/discovery.h"
#include "worker/engine/checkpoint/layout.h"
#include "worker/engine/checkpoint/save.h"
#include "worker/engine/checkpoint/shard_reader.h"
#include "worker/engine/data/token_shard.h"
#include "worker/engine/status_macros.h"
#include "worker/engine/train/trainer.h"

namespace fp8::engine::testing {
namespace {

namespace fs = std::filesystem;

std::unique_ptr<Trainer> make_trainer(const v1::JobSpec& spec) {
  absl::StatusOr<std::unique_ptr<Trainer>> t = Trainer::create(spec, Device::cpu());
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

// Every record of a shard, as raw bytes by name.
std::map<std::string, std::string> shard_contents(const fs::path& file) {
  absl::StatusOr<checkpoint::ShardReader> r = checkpoint::ShardReader::open(file);
  EXPECT_TRUE(r.ok()) << r.status();
  std::map<std::string, std::string> out;
  if (!r.ok()) return out;
  for (const checkpoint::RecordInfo& info : r->records()) {
    std::string bytes(info.size_bytes, '\0');
    absl::Status s = r->read_record(info.name, info.dtype, info.shape, std::as_writable_bytes(std::span(bytes)));
    EXPECT_TRUE(s.ok()) << s;
    out[info.name] = bytes;
  }
  return out;
}

fs::path shard(const fs::path& dir, int64_t step) { return checkpoint::shard_path(dir, step, 0, 1); }

class ResumeTest : public ::testing::TestWithParam<std::vector<std::string>> {
 protected:
  void SetUp() override { write_synthetic_corpus(corpus_, 200'000); }
  TempDir tmp_{"resume"};
  fs::path corpus_ = tmp_.path() / "corpus.txt";
};

TEST_P(ResumeTest, StoppedAndResumedRunEqualsStraightRunBitForBit) {
  constexpr int64_t kHalf = 10;
  const fs::path straight_dir = tmp_.path() / "straight", split_dir = tmp_.path() / "split";

  std::unique_ptr<Trainer> straight = make_trainer(tiny_job(corpus_, straight_dir, GetParam()));
  ASSERT_NE(straight, nullptr);
  RecordingObserver straight_log;
  ASSERT_TRUE(straight->run(straight_log).ok());

  {
    std::unique_ptr<Trainer> first = make_trainer(tiny_job(corpus_, split_dir, GetParam()));
    ASSERT_NE(first, nullptr);
    RecordingObserver log;
    absl::StatusOr<TrainSummary> s = first->run(log, {.stop = nullptr, .stop_after_step = kHalf});
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_TRUE(s->stopped_early);
    EXPECT_EQ(s->last_step, kHalf);
  }
  std::unique_ptr<Trainer> second = make_trainer(tiny_job(corpus_, split_dir, GetParam()));
  ASSERT_NE(second, nullptr);
  RecordingObserver log;
  absl::StatusOr<int64_t> from = second->resume(log);
  ASSERT_TRUE(from.ok()) << from.status();
  EXPECT_EQ(*from, kHalf);
  absl::StatusOr<TrainSummary> s = second->run(log);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->first_step, kHalf + 1);
  EXPECT_EQ(s->last_step, 20);

  // The same losses, step by step, and the same final state in every record.
  ASSERT_EQ(log.steps.size(), 10u);
  for (const StepReport& r : log.steps) {
    const StepReport& ref = straight_log.steps.at(static_cast<size_t>(r.step - 1));
    EXPECT_EQ(r.loss, ref.loss) << "step " << r.step;
    EXPECT_EQ(r.grad_norm, ref.grad_norm) << "step " << r.step;
    EXPECT_EQ(r.val_loss, ref.val_loss) << "step " << r.step;
  }
  const std::map<std::string, std::string> a = shard_contents(shard(straight_dir, 20));
  const std::map<std::string, std::string> b = shard_contents(shard(split_dir, 20));
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(a.size(), b.size());
  for (const auto& [name, bytes] : a) {
    ASSERT_TRUE(b.contains(name)) << name;
    EXPECT_TRUE(b.at(name) == bytes) << "record " << name << " differs";
  }
}

INSTANTIATE_TEST_SUITE_P(Recipes, ResumeTest,
                         ::testing::Values(std::vector<std::string>{"fp8.recipe=tensorwise"},
                                           // Delayed scaling carries amax histories across the stop.
                                           std::vector<std::string>{"fp8.recipe=delayed"},
                                           std::vector<std::string>{"fp8.recipe=rowwise", "train.batch_size=8",
                                                                    "train.grad_accum=2"},
                                           // bf16 activations: the state is the same fp32 masters.
                                           std::vector<std::string>{"fp8.recipe=tensorwise", "train.compute_dtype=bf16"}),
                         [](const auto& info) {
                           std::string name = info.param[0].substr(11);
                           if (info.param.size() > 1 && info.param[1] == "train.compute_dtype=bf16") name += "_bf16";
                           return name;
                         });

// A checkpoint written before the vocabulary was padded to a multiple of 64 holds the
// embedding, the output projection and their moments without the padding rows. It
// resumes as the same checkpoint written with them (rows the engine starts at zero).
TEST_F(ResumeTest, ACheckpointWithoutTheVocabularysPaddingResumesAsOneWithIt) {
  const std::vector<std::string> untied_300 = {"model.vocab_size=300", "model.tie_embeddings=false"};
  const fs::path padded_dir = tmp_.path() / "padded", unpadded_dir = tmp_.path() / "unpadded";
  {
    std::unique_ptr<Trainer> first = make_trainer(tiny_job(corpus_, padded_dir, untied_300));
    ASSERT_NE(first, nullptr);
    RecordingObserver log;
    ASSERT_TRUE(first->run(log, {.stop = nullptr, .stop_after_step = 10}).ok());
  }
  // Step 10 again, as the engine wrote it before padding: 300 rows where it now has 320.
  absl::StatusOr<checkpoint::ShardReader> padded = checkpoint::ShardReader::open(shard(padded_dir, 10));
  ASSERT_TRUE(padded.ok()) << padded.status();
  int cut = 0;
  absl::StatusOr<checkpoint::CommittedCheckpoint> written =
      checkpoint::save_single_process_checkpoint(unpadded_dir, 10, [&](checkpoint::ShardWriter& w) -> absl::Status {
        for (const auto& [key, value] : padded->metadata()) FP8_RETURN_IF_ERROR(w.set_metadata(key, value));
        for (const checkpoint::RecordInfo& info : padded->records()) {
          std::string bytes(info.size_bytes, '\0');
          FP8_RETURN_IF_ERROR(
              padded->read_record(info.name, info.dtype, info.shape, std::as_writable_bytes(std::span(bytes))));
          checkpoint::Shape shape = info.shape;
          if (shape.size() == 2 && shape[0] == 320) {
            shape[0] = 300;
            bytes.resize(static_cast<size_t>(300 * shape[1]) * sizeof(float));
            ++cut;
          }
          FP8_RETURN_IF_ERROR(w.write_record(info.name, info.dtype, shape, std::as_bytes(std::span(bytes))));
        }
        return absl::OkStatus();
      });
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(cut, 6) << "tok_embeddings and output, each with its two moments";

  std::vector<RecordingObserver> logs(2);
  const std::vector<fs::path> dirs = {padded_dir, unpadded_dir};
  for (size_t i = 0; i < dirs.size(); ++i) {
    std::unique_ptr<Trainer> second = make_trainer(tiny_job(corpus_, dirs[i], untied_300));
    ASSERT_NE(second, nullptr);
    absl::StatusOr<int64_t> from = second->resume(logs[i]);
    ASSERT_TRUE(from.ok()) << from.status();
    EXPECT_EQ(*from, 10);
    ASSERT_TRUE(second->run(logs[i]).ok());
  }
  ASSERT_EQ(logs[0].steps.size(), logs[1].steps.size());
  for (size_t s = 0; s < logs[0].steps.size(); ++s) EXPECT_EQ(logs[0].steps[s].loss, logs[1].steps[s].loss);
  const std::map<std::string, std::string> a = shard_contents(shard(padded_dir, 20));
  const std::map<std::string, std::string> b = shard_contents(shard(unpadded_dir, 20));
  ASSERT_FALSE(a.empty());
  EXPECT_TRUE(a == b) << "the two runs end in different state";
}

// Token shards holding a text's bytes train exactly as the text does, and a run on a
// pattern of shards stopped and resumed (its windows straddle shard boundaries, its data
// position points into the joined stream) equals the straight run, bit for bit.
TEST_F(ResumeTest, ShardsTrainAsTheirTextAndResumeAcrossShardBoundariesBitForBit) {
  std::ifstream in(corpus_, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t split = text.size() * 9 / 10;
  const fs::path train_text = tmp_.path() / "train.txt", val_text = tmp_.path() / "val.txt";
  std::ofstream(train_text, std::ios::binary) << text.substr(0, split);
  std::ofstream(val_text, std::ios::binary) << text.substr(split);
  auto write_shard = [&](const fs::path& path, std::string_view bytes) {
    data::TokenShardHeader h{2, 0, data::kBytesVocabSize, data::kBytesEndOfText,
                             data::tokenizer_fingerprint(data::kBytesTokenizerName)};
    absl::StatusOr<data::TokenShardWriter> w = data::TokenShardWriter::create(path.string(), h);
    ASSERT_TRUE(w.ok()) << w.status();
    const std::vector<uint32_t> tokens(reinterpret_cast<const uint8_t*>(bytes.data()),
                                       reinterpret_cast<const uint8_t*>(bytes.data()) + bytes.size());
    ASSERT_TRUE(w->append(tokens).ok());
    ASSERT_TRUE(w->finish().ok());
  };
  constexpr size_t kShardTokens = 9000;
  int shards = 0;
  for (size_t at = 0; at < split; at += kShardTokens, ++shards) {
    char name[32];
    std::snprintf(name, sizeof name, "train-%05d.tokens", shards);
    write_shard(tmp_.path() / name, std::string_view(text).substr(at, std::min(kShardTokens, split - at)));
  }
  ASSERT_GT(shards, 10);
  write_shard(tmp_.path() / "val.tokens", std::string_view(text).substr(split));
  const std::string pattern = (tmp_.path() / "train-*.tokens").string();
  auto job = [&](const fs::path& data, const fs::path& val, const fs::path& dir) {
    return tiny_job(data, dir, {"data.val_fraction=0", "data.val_path=" + val.string()});
  };

  std::unique_ptr<Trainer> on_text = make_trainer(job(train_text, val_text, tmp_.path() / "text"));
  std::unique_ptr<Trainer> on_shards = make_trainer(job(pattern, tmp_.path() / "val.tokens", tmp_.path() / "a"));
  ASSERT_TRUE(on_text && on_shards);
  RecordingObserver text_log, shards_log;
  ASSERT_TRUE(on_text->run(text_log).ok());
  ASSERT_TRUE(on_shards->run(shards_log).ok());
  ASSERT_EQ(shards_log.steps.size(), 20u);
  for (size_t i = 0; i < text_log.steps.size(); ++i) {
    EXPECT_EQ(shards_log.steps[i].loss, text_log.steps[i].loss) << "step " << i + 1;
    EXPECT_EQ(shards_log.steps[i].val_loss, text_log.steps[i].val_loss) << "step " << i + 1;
  }

  const fs::path split_dir = tmp_.path() / "b";
  {
    std::unique_ptr<Trainer> first = make_trainer(job(pattern, tmp_.path() / "val.tokens", split_dir));
    ASSERT_NE(first, nullptr);
    RecordingObserver log;
    ASSERT_TRUE(first->run(log, {.stop = nullptr, .stop_after_step = 10}).ok());
  }
  std::unique_ptr<Trainer> second = make_trainer(job(pattern, tmp_.path() / "val.tokens", split_dir));
  ASSERT_NE(second, nullptr);
  RecordingObserver log;
  absl::StatusOr<int64_t> from = second->resume(log);
  ASSERT_TRUE(from.ok()) << from.status();
  ASSERT_TRUE(second->run(log).ok());
  ASSERT_EQ(log.steps.size(), 10u);
  for (const StepReport& r : log.steps) {
    const StepReport& ref = shards_log.steps.at(static_cast<size_t>(r.step - 1));
    EXPECT_EQ(r.loss, ref.loss) << "step " << r.step;
    EXPECT_EQ(r.grad_norm, ref.grad_norm) << "step " << r.step;
    EXPECT_EQ(r.val_loss, ref.val_loss) << "step " << r.step;
  }
}

// Flips one byte in the middle of a file.
void corrupt(const fs::path& file) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(fs::file_size(file) / 2));
  char c = 0;
  f.read(&c, 1);
  f.seekp(static_cast<std::streamoff>(fs::file_size(file) / 2));
  c = static_cast<char>(c ^ 0x5a);
  f.write(&c, 1);
}

// The weights' row amaxes that AdamW writes as it updates them are what the next step's
// casts take (the straight runs above, which take them, equal the resumed ones, whose first
// step after loading measures its own): after a run every fp8 weight's casts hold them, and
// they are the row amaxes of the weights as they stand.
TEST_F(ResumeTest, TheUpdateHandsEachWeightsCastsItsRowAmaxes) {
  std::unique_ptr<Trainer> t =
      make_trainer(tiny_job(corpus_, tmp_.path() / "ckpt", {"train.steps=3", "train.warmup_steps=1"}));
  ASSERT_NE(t, nullptr);
  RecordingObserver log;
  ASSERT_TRUE(t->run(log).ok());
  int64_t checked = 0;
  for (const LinearUnit* u : t->model().linears()) {
    if (!u->reads_weight_row_amax()) continue;
    ASSERT_NE(u->weight_row_amax, nullptr) << u->name;
    const int64_t rows = u->weight->value.shape()[0], cols = u->weight->value.numel() / rows;
    absl::StatusOr<std::vector<float>> w = u->weight->value.download<float>();
    ASSERT_TRUE(w.ok()) << w.status();
    std::vector<float> got(static_cast<size_t>(rows));
    ASSERT_TRUE(Device::cpu().backend().copy_to_host(got.data(), u->weight_row_amax, got.size() * sizeof(float)).ok());
    for (int64_t r = 0; r < rows; ++r) {
      float want = 0.0f;
      for (int64_t j = 0; j < cols; ++j) want = std::max(want, std::fabs((*w)[static_cast<size_t>(r * cols + j)]));
      ASSERT_EQ(got[static_cast<size_t>(r)], want) << u->name << " row " << r;
    }
    ++checked;
  }
  // Tensorwise: every projection of the 2 blocks (the output projection stays in high
  // precision by default).
  EXPECT_EQ(checked, 7 * t->model().config().n_layers);
}

class CheckpointProblems : public ::testing::Test {
 protected:
  void SetUp() override {
    write_synthetic_corpus(corpus_, 200'000);
    std::unique_ptr<Trainer> t = make_trainer(tiny_job(corpus_, dir_));
    ASSERT_NE(t, nullptr);
    RecordingObserver log;
    ASSERT_TRUE(t->run(log).ok());
    EXPECT_EQ(log.checkpoints, (std::vector<int64_t>{5, 10, 15, 20}));
  }
  TempDir tmp_{"ckpt"};
  fs::path corpus_ = tmp_.path() / "corpus.txt";
  fs::path dir_ = tmp_.path() / "ckpt";
};

TEST_F(CheckpointProblems, ACorruptCheckpointIsReportedAndTheNewestGoodOneLoaded) {
  corrupt(shard(dir_, 20));
  std::unique_ptr<Trainer> t = make_trainer(tiny_job(corpus_, dir_));
  ASSERT_NE(t, nullptr);
  RecordingObserver log;
  absl::StatusOr<int64_t> from = t->resume(log);
  ASSERT_TRUE(from.ok()) << from.status();
  EXPECT_EQ(*from, 15);
  ASSERT_EQ(log.warnings.size(), 1u);
  EXPECT_NE(log.warnings[0].find("step-00000020"), std::string::npos) << log.warnings[0];
  EXPECT_EQ(t->steps_done(), 15);
}

TEST_F(CheckpointProblems, AnUncommittedCheckpointIsSkipped) {
  fs::remove(checkpoint::step_directory(dir_, 20) / checkpoint::kCommitMarkerFileName);
  std::unique_ptr<Trainer> t = make_trainer(tiny_job(corpus_, dir_));
  ASSERT_NE(t, nullptr);
  RecordingObserver log;
  absl::StatusOr<int64_t> from = t->resume(log);
  ASSERT_TRUE(from.ok()) << from.status();
  EXPECT_EQ(*from, 15);
  EXPECT_EQ(log.warnings.size(), 1u);
}

TEST_F(CheckpointProblems, ACorruptRecordFoundWhileLoadingIsAnError) {
  // Damage that the cheap index check cannot see is still caught by the payload checksum
  // when the trainer reads the record.
  corrupt(shard(dir_, 20));
  absl::StatusOr<checkpoint::ShardReader> r = checkpoint::ShardReader::open(shard(dir_, 20));
  if (r.ok()) {
    EXPECT_FALSE(r->verify_payloads().ok());
  } else {
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << r.status();
  }
}

TEST_F(CheckpointProblems, ACheckpointOfAnotherModelIsRefusedNamingTheRecord) {
  std::unique_ptr<Trainer> t = make_trainer(tiny_job(corpus_, dir_, {"model.dim=64", "model.ffn_dim=64"}));
  ASSERT_NE(t, nullptr);
  RecordingObserver log;
  absl::StatusOr<int64_t> from = t->resume(log);
  ASSERT_FALSE(from.ok());
  EXPECT_EQ(from.status().code(), absl::StatusCode::kFailedPrecondition) << from.status();
  EXPECT_NE(from.status().message().find("params/tok_embeddings"), std::string::npos) << from.status();
}

TEST_F(CheckpointProblems, ACheckpointOfAnotherDataOrderIsRefused) {
  std::unique_ptr<Trainer> t = make_trainer(tiny_job(corpus_, dir_, {"data.seed=99"}));
  ASSERT_NE(t, nullptr);
  RecordingObserver log;
  absl::StatusOr<int64_t> from = t->resume(log);
  ASSERT_FALSE(from.ok());
  EXPECT_NE(from.status().message().find("data.seed"), std::string::npos) << from.status();
}

TEST_F(CheckpointProblems, ResumingAFinishedJobHasNothingToDo) {
  std::unique_ptr<Trainer> t = make_trainer(tiny_job(corpus_, dir_));
  ASSERT_NE(t, nullptr);
  RecordingObserver log;
  ASSERT_EQ(*t->resume(log), 20);
  absl::StatusOr<TrainSummary> s = t->run(log);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(log.steps.empty());
  EXPECT_EQ(s->last_step, 20);
}

}  // namespace
}  // namespace fp8::engine::testing
