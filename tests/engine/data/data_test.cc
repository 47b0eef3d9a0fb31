// The training data pipeline: corpus loading and splitting, the shuffled and sharded
// training stream with its resumable position, the fixed validation batches, and the
// platform-independent randomness under them. Corpora are small synthetic files.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "gtest/gtest.h"
#include "worker/engine/data/batcher.h"
#include "worker/engine/data/corpus.h"
#include "worker/engine/data/corpus_split.h"
#include "worker/engine/data/epoch_order.h"
#include "worker/engine/data/portable_random.h"
#include "worker/engine/data/validation_set.h"

namespace fp8::engine::data {
namespace {

namespace fs = std::filesystem;

// Lines of pseudo-random lower-case words, `line_length` bytes each counting the '\n',
// so that windows at different offsets hold different text.
std::string synthetic_text(int64_t bytes, int64_t line_length) {
  std::string text;
  text.reserve(static_cast<size_t>(bytes));
  uint64_t state = 12345;
  for (int64_t i = 0; i < bytes; ++i) {
    if (i % line_length == line_length - 1) {
      text += '\n';
      continue;
    }
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    const auto letter = static_cast<int>((state >> 33) % 27);
    text += letter == 26 ? ' ' : static_cast<char>('a' + letter);
  }
  return text;
}

// A byte-token stream as the text it came from.
std::string as_text(const TokenStream& tokens) {
  std::string text;
  for (int64_t i = 0; i < tokens.size(); ++i) text += static_cast<char>(tokens.at(i));
  return text;
}

std::vector<int64_t> sorted(std::vector<int64_t> values) {
  std::sort(values.begin(), values.end());
  return values;
}

class DataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // ctest runs tests as parallel processes: one folder per test and process.
    dir_ = fs::path(::testing::TempDir()) /
           ("fp8_data_test_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "_" +
            std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write_file(const std::string& name, std::string_view contents) {
    const fs::path path = dir_ / name;
    std::ofstream(path, std::ios::binary) << contents;
    return path.string();
  }

  Corpus load(std::string_view contents, int64_t seq_len, double val_fraction) {
    absl::StatusOr<Corpus> corpus = Corpus::load(write_file("corpus.txt", contents), {seq_len, val_fraction});
    EXPECT_TRUE(corpus.ok()) << corpus.status();
    return *std::move(corpus);
  }

  static Batcher make_batcher(const Corpus& corpus, const BatcherOptions& options) {
    absl::StatusOr<Batcher> batcher = Batcher::create(corpus, options);
    EXPECT_TRUE(batcher.ok()) << batcher.status();
    return *std::move(batcher);
  }

  fs::path dir_;
};

// ---- corpus and split ------------------------------------------------------------------

TEST_F(DataTest, ValidationIsTheTailStartingAtTheNearestLineStart) {
  // 37-byte lines: the exact split (10000 - 1000) is 9 bytes past the line start at 8991
  // and 28 before the one at 9028.
  const std::string text = synthetic_text(10000, 37);
  const Corpus corpus = load(text, 16, 0.1);
  EXPECT_EQ(corpus.train_tokens().size(), 8991);
  EXPECT_EQ(text[8990], '\n');
  EXPECT_EQ(corpus.train_tokens().size(), 8991);
  EXPECT_EQ(corpus.validation_tokens().size(), 10000 - 8991);
  // Together the splits are the file, byte for byte.
  const std::string train = as_text(corpus.train_tokens());
  const std::string validation = as_text(corpus.validation_tokens());
  EXPECT_EQ(train + validation, text);
}

TEST_F(DataTest, SplitIsExactWithoutANewlineWithin1KiB) {
  // Lines of 5000 bytes: line starts at 5000, 10000 and 15000.
  const std::string text = synthetic_text(20000, 5000);
  EXPECT_EQ(load(text, 16, 0.15).train_tokens().size(), 17000);  // the nearest line start is 2000 away
  EXPECT_EQ(load(text, 16, 0.2).train_tokens().size(), 15000);   // 1000 away: within reach
}

TEST(CorpusSplitTest, SnapsWithin1KiBToTheNearestLineStartEarlierOnATie) {
  // A line starts at offset p when bytes[p - 1] is '\n'.
  auto add_line_start = [](std::vector<uint8_t>& bytes, int64_t p) { bytes[static_cast<size_t>(p - 1)] = '\n'; };
  std::vector<uint8_t> bytes(20000, 'x');
  const double half = 0.5;  // exact split 10000
  EXPECT_EQ(validation_split_offset(bytes, half), 10000);
  add_line_start(bytes, 10000 - 1025);  // too far
  EXPECT_EQ(validation_split_offset(bytes, half), 10000);
  add_line_start(bytes, 10000 + 1024);  // just within reach
  EXPECT_EQ(validation_split_offset(bytes, half), 10000 + 1024);
  add_line_start(bytes, 10000 - 1024);  // as near, but earlier: wins the tie
  EXPECT_EQ(validation_split_offset(bytes, half), 10000 - 1024);
  add_line_start(bytes, 10000 + 3);
  EXPECT_EQ(validation_split_offset(bytes, half), 10000 + 3);
  EXPECT_EQ(validation_split_offset(bytes, 0.0), 20000);  // no validation
  // A newline as the very last byte would leave validation empty: not a candidate.
  std::vector<uint8_t> tail(100, 'x');
  tail.back() = '\n';
  EXPECT_EQ(validation_split_offset(tail, 0.05), 95);
}

TEST_F(DataTest, ZeroValFractionKeepsTheWholeFileForTraining) {
  const Corpus corpus = load(synthetic_text(1000, 37), 16, 0.0);
  EXPECT_EQ(corpus.train_tokens().size(), 1000);
  EXPECT_TRUE(corpus.validation_tokens().empty());
}

TEST_F(DataTest, MissingFileIsNotFoundAndNamesThePath) {
  const std::string path = (dir_ / "no-such-file.txt").string();
  absl::StatusOr<Corpus> corpus = Corpus::load(path, {16, 0.05});
  ASSERT_FALSE(corpus.ok());
  EXPECT_EQ(corpus.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(corpus.status().message(), "data.path: cannot open " + path + ": No such file or directory");
}

TEST_F(DataTest, EmptyFileIsAnError) {
  const std::string path = write_file("empty.txt", "");
  absl::StatusOr<Corpus> corpus = Corpus::load(path, {16, 0.05});
  ASSERT_FALSE(corpus.ok());
  EXPECT_EQ(corpus.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(corpus.status().message(), "data.path: " + path + " is empty");
}

TEST_F(DataTest, DirectoryIsNotACorpus) {
  absl::StatusOr<Corpus> corpus = Corpus::load(dir_.string(), {16, 0.05});
  ASSERT_FALSE(corpus.ok());
  EXPECT_EQ(corpus.status().message(), "data.path: " + dir_.string() + " is not a regular file");
}

TEST_F(DataTest, ValidationSplitTooShortForOneWindowSaysWhatToChange) {
  // 6000 bytes without newlines, 5% validation = 300 tokens, windows of 513.
  const std::string path = write_file("short.txt", std::string(6000, 'a'));
  absl::StatusOr<Corpus> corpus = Corpus::load(path, {512, 0.05});
  ASSERT_FALSE(corpus.ok());
  EXPECT_EQ(corpus.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(corpus.status().message(),
            "data.path: validation split of " + path +
                " has 300 tokens, fewer than seq_len+1 = 513; raise data.val_fraction, lower data.seq_len or use "
                "a larger file");
  EXPECT_TRUE(Corpus::load(path, {299, 0.05}).ok());  // 300 tokens hold one window of 300
}

TEST_F(DataTest, TrainingSplitTooShortForOneWindowSaysWhatToChange) {
  const std::string path = write_file("tiny.txt", std::string(100, 'a'));
  absl::StatusOr<Corpus> corpus = Corpus::load(path, {512, 0.0});
  ASSERT_FALSE(corpus.ok());
  EXPECT_EQ(corpus.status().message(),
            "data.path: training split of " + path +
                " has 100 tokens, fewer than seq_len+1 = 513; use a larger file, or lower data.seq_len or "
                "data.val_fraction");
}

TEST_F(DataTest, OptionsOutOfRangeNameTheirField) {
  const std::string path = write_file("ok.txt", synthetic_text(1000, 37));
  EXPECT_EQ(Corpus::load(path, {0, 0.05}).status().message(), "data.seq_len: must be at least 1, got 0");
  EXPECT_EQ(Corpus::load(path, {16, 0.6}).status().message(), "data.val_fraction: must be in [0, 0.5], got 0.6");
}

TEST_F(DataTest, TokensAreTheFileBytesIncludingHighBytes) {
  std::string text;
  for (int repeat = 0; repeat < 4; ++repeat) {
    for (int b = 0; b < 256; ++b) text += static_cast<char>(b);
  }
  const Corpus corpus = load(text, 8, 0.0);
  ASSERT_EQ(corpus.train_tokens().size(), 1024);
  for (int64_t i = 0; i < 1024; ++i) EXPECT_EQ(corpus.train_tokens().at(i), i % 256) << i;
}

// ---- platform-independent randomness ---------------------------------------------------

TEST(PortableRandomTest, GoldenValuesPinTheOrderOnEveryPlatform) {
  // mt19937_64's 10000th output from the default seed is fixed by the C++ standard.
  std::mt19937_64 standard;
  standard.discard(9999);
  EXPECT_EQ(standard(), 9981545732273789042ULL);
  // mix_seed(0, 0) is SplitMix64's first output from seed 0, a published value.
  EXPECT_EQ(mix_seed(0, 0), 0xe220a8397b1dcdafULL);
  // Ours, recorded once: if this changes, every saved data position means something else.
  std::mt19937_64 rng(mix_seed(7, 3));
  std::vector<uint32_t> values = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  shuffle_in_place(values, rng);
  EXPECT_EQ(values, (std::vector<uint32_t>{1, 5, 4, 8, 6, 2, 3, 0, 9, 7}));
  const EpochOrder epoch(/*train_tokens=*/1000, /*seq_len=*/16, /*seed=*/0, /*epoch=*/0);
  EXPECT_EQ(epoch.phase(), 8);
  EXPECT_EQ(epoch.size(), 61);
  EXPECT_EQ(epoch.start(0), 920);
  EXPECT_EQ(epoch.start(1), 696);
  EXPECT_EQ(epoch.start(2), 472);
}

TEST(PortableRandomTest, UniformBelowIsInRangeAndEven) {
  std::mt19937_64 rng(1);
  std::vector<int> counts(6);
  for (int i = 0; i < 60000; ++i) {
    const uint64_t v = uniform_below(rng, 6);
    ASSERT_LT(v, 6u);
    ++counts[v];
  }
  for (int c : counts) EXPECT_NEAR(c, 10000, 400);
  EXPECT_EQ(uniform_below(rng, 1), 0u);
  // A bound above 2^63 rejects almost half the raw draws; results must still fit.
  for (int i = 0; i < 100; ++i) EXPECT_LT(uniform_below(rng, (1ULL << 63) + 1), (1ULL << 63) + 1);
}

TEST(PortableRandomTest, ShuffleIsAPermutationAndSeedsDiffer) {
  std::vector<uint32_t> a(1000), b(1000);
  for (uint32_t i = 0; i < 1000; ++i) a[i] = b[i] = i;
  std::mt19937_64 rng_a(mix_seed(1, 0)), rng_b(mix_seed(2, 0));
  shuffle_in_place(a, rng_a);
  shuffle_in_place(b, rng_b);
  EXPECT_NE(a, b);
  std::sort(a.begin(), a.end());
  for (uint32_t i = 0; i < 1000; ++i) ASSERT_EQ(a[i], i);
  EXPECT_NE(mix_seed(1, 0), mix_seed(0, 1));
}

// ---- training stream -------------------------------------------------------------------

TEST_F(DataTest, WindowsAreTheFileBytesWithTargetsShiftedByOne) {
  const std::string text = synthetic_text(5000, 37);
  const Corpus corpus = load(text, 32, 0.1);
  Batcher batcher = make_batcher(corpus, {.seq_len = 32, .batch_size = 4, .grad_accum = 2, .seed = 3});
  ASSERT_EQ(batcher.micro_batch_size(), 2);
  for (int micro = 0; micro < 50; ++micro) {
    const TokenBatch batch = batcher.next_micro_batch();
    ASSERT_EQ(batch.rows, 2);
    ASSERT_EQ(batch.seq_len, 32);
    ASSERT_EQ(batch.inputs.size(), 64u);
    ASSERT_EQ(batch.targets.size(), 64u);
    for (int64_t row = 0; row < batch.rows; ++row) {
      const int64_t start = batch.window_starts[row];
      ASSERT_LE(start + 33, corpus.train_tokens().size());  // never reads into validation
      for (int64_t t = 0; t < 32; ++t) {
        ASSERT_EQ(batch.inputs[row * 32 + t], static_cast<uint8_t>(text[start + t]));
        ASSERT_EQ(batch.targets[row * 32 + t], static_cast<uint8_t>(text[start + t + 1]));
        if (t + 1 < 32) {
          ASSERT_EQ(batch.targets[row * 32 + t], batch.inputs[row * 32 + t + 1]);
        }
      }
    }
  }
}

// Window starts of the next `micros` micro-batches, in order.
std::vector<int64_t> next_starts(Batcher& batcher, int micros) {
  std::vector<int64_t> starts;
  for (int i = 0; i < micros; ++i) {
    const TokenBatch batch = batcher.next_micro_batch();
    starts.insert(starts.end(), batch.window_starts.begin(), batch.window_starts.end());
  }
  return starts;
}

TEST_F(DataTest, SameSeedSameOrderDifferentSeedDifferentOrder) {
  const Corpus corpus = load(synthetic_text(20000, 37), 16, 0.05);
  Batcher a = make_batcher(corpus, {.seq_len = 16, .batch_size = 8, .seed = 11});
  Batcher b = make_batcher(corpus, {.seq_len = 16, .batch_size = 8, .seed = 11});
  Batcher c = make_batcher(corpus, {.seq_len = 16, .batch_size = 8, .seed = 12});
  const std::vector<int64_t> order_a = next_starts(a, 20);
  EXPECT_EQ(order_a, next_starts(b, 20));
  EXPECT_NE(order_a, next_starts(c, 20));
}

TEST_F(DataTest, EveryWindowOnceAnEpochWithBoundariesMovingBetweenEpochs) {
  const int64_t seq_len = 16;
  const Corpus corpus = load(synthetic_text(3000, 37), seq_len, 0.0);
  const auto tokens = static_cast<int64_t>(corpus.train_tokens().size());
  Batcher batcher = make_batcher(corpus, {.seq_len = seq_len, .batch_size = 1, .seed = 5});
  std::set<int64_t> phases;
  for (int64_t epoch = 0; epoch < 8; ++epoch) {
    ASSERT_EQ(batcher.position(), (DataPosition{epoch, 0}));
    std::vector<int64_t> starts;
    while (batcher.position().epoch == epoch) starts.push_back(batcher.next_micro_batch().window_starts[0]);
    starts = sorted(starts);
    const int64_t phase = starts.front();
    ASSERT_LT(phase, seq_len);
    phases.insert(phase);
    // Every window at stride seq_len from the phase that fits, each exactly once.
    ASSERT_EQ(static_cast<int64_t>(starts.size()), (tokens - phase - 1) / seq_len) << "epoch " << epoch;
    for (size_t i = 0; i < starts.size(); ++i) ASSERT_EQ(starts[i], phase + static_cast<int64_t>(i) * seq_len);
  }
  EXPECT_GT(phases.size(), 1u);
}

TEST_F(DataTest, EpochOrderDependsOnlyOnSeedEpochAndSize) {
  const EpochOrder a(5000, 16, 9, 4);
  const EpochOrder b(5000, 16, 9, 4);
  const EpochOrder other_epoch(5000, 16, 9, 5);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(a.phase(), b.phase());
  bool orders_differ = a.size() != other_epoch.size();
  for (int64_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a.start(i), b.start(i));
    if (!orders_differ) orders_differ = a.start(i) != other_epoch.start(i);
  }
  EXPECT_TRUE(orders_differ);
  // A split of exactly one window leaves no room for a phase.
  const EpochOrder single(17, 16, 9, 4);
  EXPECT_EQ(single.phase(), 0);
  EXPECT_EQ(single.size(), 1);
}

// The union over ranks of every micro-batch equals the one-rank micro-batch with the same
// global batch; more precisely rank r's row k is the one-rank row r + k * world_size.
TEST_F(DataTest, ShardsOfEveryWorldSizeMakeTheSameGlobalBatch) {
  const int64_t seq_len = 8;
  // About 70 windows an epoch, so the 40 steps below cross epoch boundaries at every world size.
  const Corpus corpus = load(synthetic_text(600, 37), seq_len, 0.05);
  for (int world : {1, 2, 3}) {
    for (int64_t grad_accum : {1, 2}) {
      const int64_t per_rank = 4;
      Batcher single = make_batcher(
          corpus, {.seq_len = seq_len, .batch_size = per_rank * world, .grad_accum = grad_accum, .seed = 21});
      std::vector<Batcher> ranks;
      for (int r = 0; r < world; ++r) {
        ranks.push_back(make_batcher(corpus, {.seq_len = seq_len,
                                             .batch_size = per_rank,
                                             .grad_accum = grad_accum,
                                             .seed = 21,
                                             .rank = r,
                                             .world_size = world}));
      }
      for (int micro = 0; micro < 40 * grad_accum; ++micro) {
        const TokenBatch global = single.next_micro_batch();
        std::vector<int64_t> union_of_ranks;
        for (int r = 0; r < world; ++r) {
          const TokenBatch shard = ranks[r].next_micro_batch();
          ASSERT_EQ(shard.rows, per_rank / grad_accum);
          for (int64_t k = 0; k < shard.rows; ++k) {
            ASSERT_EQ(shard.window_starts[k], global.window_starts[r + k * world]);
            union_of_ranks.push_back(shard.window_starts[k]);
          }
          ASSERT_EQ(ranks[r].position(), single.position());
        }
        ASSERT_EQ(sorted(union_of_ranks), sorted(global.window_starts))
            << "world " << world << " grad_accum " << grad_accum << " micro " << micro;
      }
      EXPECT_GE(single.position().epoch, 2);
    }
  }
}

// Runs `before` micro-batches, saves the position, and checks that a fresh batcher
// restored there produces exactly the next `after` micro-batches.
void expect_restore_continues_exactly(const Corpus& corpus, const BatcherOptions& options, int before, int after) {
  absl::StatusOr<Batcher> original = Batcher::create(corpus, options);
  ASSERT_TRUE(original.ok()) << original.status();
  for (int i = 0; i < before; ++i) original->next_micro_batch();
  const DataPosition saved = original->position();

  absl::StatusOr<Batcher> resumed = Batcher::create(corpus, options);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  ASSERT_TRUE(resumed->restore(saved).ok());
  EXPECT_EQ(resumed->position(), saved);
  for (int i = 0; i < after; ++i) {
    const TokenBatch expected = original->next_micro_batch();
    const TokenBatch actual = resumed->next_micro_batch();
    ASSERT_EQ(actual.window_starts, expected.window_starts) << "micro-batch " << i << " after the restore";
    ASSERT_EQ(actual.inputs, expected.inputs);
    ASSERT_EQ(actual.targets, expected.targets);
  }
}

TEST_F(DataTest, RestoredPositionContinuesWithTheVeryNextWindows) {
  const Corpus corpus = load(synthetic_text(2000, 37), 16, 0.05);
  const BatcherOptions options{.seq_len = 16, .batch_size = 6, .grad_accum = 3, .seed = 8};
  // Each micro-batch takes 2 windows of ~118 an epoch (the phase decides exactly).
  expect_restore_continues_exactly(corpus, options, /*before=*/10, /*after=*/20);   // mid-epoch
  expect_restore_continues_exactly(corpus, options, /*before=*/55, /*after=*/20);   // across a boundary
  expect_restore_continues_exactly(corpus, options, /*before=*/200, /*after=*/80);  // later epochs
  // Sharded, saved one micro-batch into a step.
  expect_restore_continues_exactly(
      corpus, {.seq_len = 16, .batch_size = 4, .grad_accum = 2, .seed = 8, .rank = 1, .world_size = 3},
      /*before=*/31, /*after=*/30);
}

TEST_F(DataTest, RestoreAtAnEpochStartAndUnderAnotherWorldSize) {
  const Corpus corpus = load(synthetic_text(2000, 37), 16, 0.05);
  Batcher one_rank = make_batcher(corpus, {.seq_len = 16, .batch_size = 4, .seed = 2});
  while (one_rank.position().epoch == 0) one_rank.next_micro_batch();
  // Wherever epoch 0 ended within a micro-batch, epoch 1 starting afresh is a valid place.
  const DataPosition epoch_start{1, 0};
  ASSERT_TRUE(one_rank.restore(epoch_start).ok());
  const TokenBatch global = one_rank.next_micro_batch();
  // The same global batch of 4 over 2 ranks of 2 picks up at the same window.
  for (int r = 0; r < 2; ++r) {
    Batcher shard = make_batcher(corpus, {.seq_len = 16, .batch_size = 2, .seed = 2, .rank = r, .world_size = 2});
    ASSERT_TRUE(shard.restore(epoch_start).ok());
    const TokenBatch part = shard.next_micro_batch();
    EXPECT_EQ(part.window_starts[0], global.window_starts[r]);
    EXPECT_EQ(part.window_starts[1], global.window_starts[r + 2]);
  }
}

TEST_F(DataTest, RestoreRejectsAPositionOutsideItsEpoch) {
  const Corpus corpus = load(synthetic_text(2000, 37), 16, 0.05);
  Batcher batcher = make_batcher(corpus, {.seq_len = 16, .batch_size = 2, .seed = 2});
  batcher.next_micro_batch();
  const DataPosition before = batcher.position();
  const absl::Status beyond = batcher.restore({0, 1000});
  EXPECT_EQ(beyond.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(beyond.message().find("index 1000 is outside epoch 0"), std::string_view::npos) << beyond;
  EXPECT_FALSE(batcher.restore({-1, 0}).ok());
  EXPECT_FALSE(batcher.restore({0, -1}).ok());
  EXPECT_EQ(batcher.position(), before);
}

TEST_F(DataTest, BatcherRejectsInconsistentOptions) {
  const Corpus corpus = load(synthetic_text(2000, 37), 16, 0.05);
  auto message = [&](const BatcherOptions& o) { return std::string(Batcher::create(corpus, o).status().message()); };
  EXPECT_EQ(message({.seq_len = 16, .batch_size = 6, .grad_accum = 4}),
            "train.grad_accum: 4 does not divide train.batch_size (6)");
  EXPECT_EQ(message({.seq_len = 16, .batch_size = 0}), "train.batch_size: must be at least 1, got 0");
  EXPECT_EQ(message({.seq_len = 16, .batch_size = 2, .rank = 2, .world_size = 2}),
            "rank 2 is not in a world of size 2");
  ASSERT_EQ(corpus.train_tokens().size(), 1887);  // the split moved to a line start
  EXPECT_EQ(message({.seq_len = 4000, .batch_size = 2}),
            "data.seq_len: training split has 1887 tokens, fewer than seq_len+1 = 4001");
}

TEST_F(DataTest, TinyCorpusStreamsAcrossManyEpochsInOneMicroBatch) {
  // One window an epoch, eight windows a micro-batch: each micro-batch spans eight epochs.
  const Corpus corpus = load("abcdefghijklmnopq", 16, 0.0);
  Batcher batcher = make_batcher(corpus, {.seq_len = 16, .batch_size = 8, .seed = 1});
  const TokenBatch batch = batcher.next_micro_batch();
  EXPECT_EQ(batch.window_starts, std::vector<int64_t>(8, 0));
  EXPECT_EQ(batcher.position(), (DataPosition{8, 0}));
  EXPECT_EQ(batch.inputs[0], 'a');
  EXPECT_EQ(batch.targets[15], 'q');
}

// ---- validation batches ----------------------------------------------------------------

TEST_F(DataTest, ValidationBatchesAreTheFirstWindowsAtStrideAndNeverChange) {
  const std::string text = synthetic_text(20000, 37);
  const Corpus corpus = load(text, 16, 0.25);
  const auto offset = corpus.train_tokens().size();
  const ValidationOptions options{.seq_len = 16, .batch_size = 4, .eval_batches = 3};
  absl::StatusOr<ValidationSet> set = ValidationSet::create(corpus, options);
  ASSERT_TRUE(set.ok()) << set.status();
  ASSERT_EQ(set->num_batches(), 3);
  EXPECT_EQ(set->distinct_windows(), 12);
  for (int64_t b = 0; b < 3; ++b) {
    const TokenBatch batch = set->batch(b);
    ASSERT_EQ(batch.rows, 4);
    for (int64_t row = 0; row < 4; ++row) {
      const int64_t start = (b * 4 + row) * 16;
      ASSERT_EQ(batch.window_starts[row], start);
      for (int64_t t = 0; t < 16; ++t) {
        ASSERT_EQ(batch.inputs[row * 16 + t], static_cast<uint8_t>(text[offset + start + t]));
        ASSERT_EQ(batch.targets[row * 16 + t], static_cast<uint8_t>(text[offset + start + t + 1]));
      }
    }
    // Identical at every evaluation, and from an independently built set.
    const TokenBatch again = set->batch(b);
    EXPECT_EQ(again.inputs, batch.inputs);
    EXPECT_EQ(again.targets, batch.targets);
    EXPECT_EQ(ValidationSet::create(corpus, options)->batch(b).inputs, batch.inputs);
  }
}

TEST_F(DataTest, ValidationShardsMakeTheSameGlobalBatches) {
  const Corpus corpus = load(synthetic_text(20000, 37), 16, 0.25);
  absl::StatusOr<ValidationSet> single =
      ValidationSet::create(corpus, {.seq_len = 16, .batch_size = 6, .eval_batches = 2});
  ASSERT_TRUE(single.ok());
  for (int world : {2, 3}) {
    for (int64_t b = 0; b < 2; ++b) {
      std::vector<int64_t> union_of_ranks;
      for (int r = 0; r < world; ++r) {
        absl::StatusOr<ValidationSet> shard = ValidationSet::create(
            corpus, {.seq_len = 16, .batch_size = 6 / world, .eval_batches = 2, .rank = r, .world_size = world});
        ASSERT_TRUE(shard.ok());
        const TokenBatch part = shard->batch(b);
        union_of_ranks.insert(union_of_ranks.end(), part.window_starts.begin(), part.window_starts.end());
      }
      EXPECT_EQ(sorted(union_of_ranks), single->batch(b).window_starts) << "world " << world;
    }
  }
}

TEST_F(DataTest, ValidationWrapsAroundAShortSplit) {
  // Validation of 100 tokens holds 6 windows of 16 (+1); 2 batches of 4 need 8.
  const Corpus corpus = load(std::string(1900, 'a') + std::string(100, 'b'), 16, 0.05);
  ASSERT_EQ(corpus.validation_tokens().size(), 100);
  absl::StatusOr<ValidationSet> set =
      ValidationSet::create(corpus, {.seq_len = 16, .batch_size = 4, .eval_batches = 2});
  ASSERT_TRUE(set.ok());
  EXPECT_EQ(set->distinct_windows(), 6);
  EXPECT_EQ(set->batch(1).window_starts, (std::vector<int64_t>{64, 80, 0, 16}));
}

TEST_F(DataTest, ValidationNeedsAValidationSplit) {
  const Corpus corpus = load(synthetic_text(2000, 37), 16, 0.0);
  absl::StatusOr<ValidationSet> set =
      ValidationSet::create(corpus, {.seq_len = 16, .batch_size = 4, .eval_batches = 2});
  ASSERT_FALSE(set.ok());
  EXPECT_EQ(set.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(set.status().message(),
            "evaluation needs held-out data, but data.val_fraction is 0 and there is no data.val_path");
}

}  // namespace
}  // namespace fp8::engine::data
