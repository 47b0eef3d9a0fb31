// Token shards (worker/engine/data/token_shard.h) and the token streams the pipeline reads
// through: the format round trip, damaged shards refused with the file and the offset, and
// a corpus from a shard training on exactly the batches its text would give.
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/engine/data/batcher.h"
#include "worker/engine/data/corpus.h"
#include "worker/engine/data/token_shard.h"
#include "worker/engine/data/token_stream.h"
#include "worker/engine/data/validation_set.h"

namespace fp8::engine::data {
namespace {

namespace fs = std::filesystem;

class TokenShardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("fp8_token_shard_test_" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "_" +
            std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // A shard of `tokens` in the bytes tokenizer's vocabulary unless `header` says otherwise.
  std::string write_shard(const std::string& name, const std::vector<uint32_t>& tokens, TokenShardHeader header = {}) {
    if (header.vocab_size == 0) {
      header.vocab_size = kBytesVocabSize;
      header.end_of_text = kBytesEndOfText;
      header.tokenizer = tokenizer_fingerprint(kBytesTokenizerName);
    }
    absl::StatusOr<TokenShardWriter> w = TokenShardWriter::create(path(name), header);
    EXPECT_TRUE(w.ok()) << w.status();
    EXPECT_TRUE(w->append(tokens).ok());
    EXPECT_TRUE(w->finish().ok());
    return path(name);
  }

  std::string write_bytes(const std::string& name, const std::string& bytes) {
    std::ofstream(path(name), std::ios::binary) << bytes;
    return path(name);
  }

  fs::path dir_;
};

std::vector<uint32_t> tokens_of(const std::string& text) { return {text.begin(), text.end()}; }

std::string sample_text(int64_t bytes) {
  std::string text;
  uint64_t state = 7;
  for (int64_t i = 0; i < bytes; ++i) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    const auto letter = static_cast<int>((state >> 33) % 28);
    text += letter == 27 ? '\n' : letter == 26 ? ' ' : static_cast<char>('a' + letter);
  }
  return text;
}

TEST_F(TokenShardTest, WhatIsWrittenIsReadBackInBothWidths) {
  for (int width : {2, 4}) {
    SCOPED_TRACE(width);
    TokenShardHeader h;
    h.width = width;
    h.vocab_size = width == 2 ? 50000 : 200000;
    h.end_of_text = 7;
    h.tokenizer = tokenizer_fingerprint("some tokenizer");
    std::vector<uint32_t> tokens;
    for (uint32_t i = 0; i < 3000; ++i) tokens.push_back((i * 7919u) % h.vocab_size);
    const std::string path = write_shard("w" + std::to_string(width) + ".tokens", tokens, h);
    EXPECT_EQ(fs::file_size(path), kTokenShardHeaderBytes + 3000u * static_cast<unsigned>(width));
    EXPECT_FALSE(fs::exists(path + ".tmp"));
    absl::StatusOr<TokenShard> shard = TokenShard::open(path);
    ASSERT_TRUE(shard.ok()) << shard.status();
    EXPECT_EQ(shard->header().width, width);
    EXPECT_EQ(shard->header().tokens, 3000);
    EXPECT_EQ(shard->header().vocab_size, h.vocab_size);
    EXPECT_EQ(shard->header().end_of_text, 7u);
    EXPECT_EQ(shard->header().tokenizer, h.tokenizer);
    const TokenStream stream({shard->tokens()});
    ASSERT_EQ(stream.size(), 3000);
    for (int64_t i = 0; i < stream.size(); ++i) ASSERT_EQ(stream.at(i), static_cast<int32_t>(tokens[i])) << i;
  }
}

TEST_F(TokenShardTest, DamagedShardsAreRefusedNamingTheFileAndTheProblem) {
  const std::string good = write_shard("good.tokens", tokens_of("hello"));
  std::ifstream in(good, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  struct Case {
    std::string name, bytes, message;
  };
  std::string wrong_version = bytes;
  wrong_version[8] = 9;
  std::string wrong_width = bytes;
  wrong_width[12] = 3;
  const std::vector<Case> cases = {
      {"truncated.tokens", bytes.substr(0, bytes.size() - 1), "counts 5 tokens of 2 bytes, but 9 bytes follow"},
      {"padded.tokens", bytes + "xy", "counts 5 tokens of 2 bytes, but 12 bytes follow"},
      {"short.tokens", bytes.substr(0, 20), "shorter than its 64-byte header"},
      {"version.tokens", wrong_version, "version 9 at offset 8"},
      {"width.tokens", wrong_width, "token width 3 at offset 12"},
      {"magic.tokens", "FP8TOKNZ" + bytes.substr(8), "does not begin with the magic"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = write_bytes(c.name, c.bytes);
    absl::StatusOr<TokenShard> shard = TokenShard::open(path);
    ASSERT_FALSE(shard.ok());
    EXPECT_NE(shard.status().message().find(path), std::string::npos) << shard.status();
    EXPECT_NE(shard.status().message().find(c.message), std::string::npos) << shard.status();
  }
}

TEST_F(TokenShardTest, AnUnfinishedWriterLeavesNothingAndATokenOutsideTheVocabularyIsRefused) {
  {
    absl::StatusOr<TokenShardWriter> w = TokenShardWriter::create(path("a.tokens"), {2, 0, 256, 3, 1});
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(w->append(tokens_of("abc")).ok());
    const absl::Status s = w->append(std::vector<uint32_t>{256});
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("token 256 at position 3 is not below the vocabulary size 256"), std::string::npos)
        << s;
  }
  EXPECT_TRUE(fs::is_empty(dir_)) << "a writer destroyed before Finish() left a file";
  EXPECT_FALSE(TokenShardWriter::create(path("b.tokens"), {2, 0, 100000, 3, 1}).ok()) << "2-byte tokens, vocab 100000";
}

TEST_F(TokenShardTest, StreamsCopyAndSliceAcrossRuns) {
  const std::vector<uint8_t> a = {1, 2, 3};
  const std::vector<uint8_t> b = {4, 0, 5, 0};                 // two 2-byte tokens: 4, 5
  const std::vector<uint8_t> c = {6, 0, 0, 0, 7, 1, 0, 0};  // two 4-byte tokens: 6, 263
  const TokenStream stream({{a.data(), 3, 1}, {b.data(), 2, 2}, {c.data(), 2, 4}});
  ASSERT_EQ(stream.size(), 7);
  std::vector<int32_t> out(7);
  stream.copy(0, 7, out.data());
  EXPECT_EQ(out, (std::vector<int32_t>{1, 2, 3, 4, 5, 6, 263}));
  std::vector<int32_t> middle(4);
  stream.copy(2, 4, middle.data());
  EXPECT_EQ(middle, (std::vector<int32_t>{3, 4, 5, 6}));
  const TokenStream slice = stream.slice(1, 5);
  ASSERT_EQ(slice.size(), 5);
  std::vector<int32_t> sliced(5);
  slice.copy(0, 5, sliced.data());
  EXPECT_EQ(sliced, (std::vector<int32_t>{2, 3, 4, 5, 6}));
}

// The same tokens from a shard and from the text file they were made of: the same training
// stream and the same evaluation batches, whichever file the job names.
TEST_F(TokenShardTest, ACorpusFromAShardTrainsOnTheBatchesItsTextGives) {
  const std::string text = sample_text(6000), held_out = sample_text(900).substr(100);
  const std::string text_path = write_bytes("train.txt", text), val_text_path = write_bytes("val.txt", held_out);
  const std::string shard_path = write_shard("train.tokens", tokens_of(text));
  const std::string val_shard_path = write_shard("val.tokens", tokens_of(held_out));
  const CorpusOptions from_text{.seq_len = 32, .val_fraction = 0, .val_path = val_text_path};
  const CorpusOptions from_shards{.seq_len = 32, .val_fraction = 0, .val_path = val_shard_path};
  absl::StatusOr<Corpus> a = Corpus::load(text_path, from_text);
  absl::StatusOr<Corpus> b = Corpus::load(shard_path, from_shards);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->tokenizer().vocab_size, kBytesVocabSize);
  absl::StatusOr<Batcher> batcher_a = Batcher::create(*a, {.seq_len = 32, .batch_size = 4, .seed = 5});
  absl::StatusOr<Batcher> batcher_b = Batcher::create(*b, {.seq_len = 32, .batch_size = 4, .seed = 5});
  ASSERT_TRUE(batcher_a.ok() && batcher_b.ok());
  for (int i = 0; i < 60; ++i) {  // past the end of an epoch of ~187 windows / 4
    const TokenBatch x = batcher_a->next_micro_batch(), y = batcher_b->next_micro_batch();
    ASSERT_EQ(x.inputs, y.inputs) << "micro-batch " << i;
    ASSERT_EQ(x.targets, y.targets) << "micro-batch " << i;
  }
  const ValidationOptions eval{.seq_len = 32, .batch_size = 4, .eval_batches = 2};
  absl::StatusOr<ValidationSet> va = ValidationSet::create(*a, eval), vb = ValidationSet::create(*b, eval);
  ASSERT_TRUE(va.ok() && vb.ok());
  EXPECT_EQ(va->batch(1).inputs, vb->batch(1).inputs);
  std::vector<int32_t> first(32);
  b->validation_tokens().copy(0, 32, first.data());
  EXPECT_EQ(first, std::vector<int32_t>(held_out.begin(), held_out.begin() + 32));
}

TEST_F(TokenShardTest, AShardSplitsAtADocumentAndMismatchedValidationIsRefused) {
  // Two documents, each ended by the end-of-text id: 10% validation lands after the first.
  std::vector<uint32_t> tokens = tokens_of(sample_text(1795));
  tokens.push_back(kBytesEndOfText);
  const std::vector<uint32_t> second = tokens_of(sample_text(205));
  tokens.insert(tokens.end(), second.begin(), second.end());
  const std::string shard = write_shard("docs.tokens", tokens);
  absl::StatusOr<Corpus> corpus = Corpus::load(shard, {.seq_len = 16, .val_fraction = 0.1});
  ASSERT_TRUE(corpus.ok()) << corpus.status();
  EXPECT_EQ(corpus->train_tokens().size(), 1796);
  EXPECT_EQ(corpus->validation_tokens().size(), 205);

  const std::string text = write_bytes("val.txt", sample_text(500));
  absl::StatusOr<Corpus> mixed = Corpus::load(shard, {.seq_len = 16, .val_fraction = 0, .val_path = text});
  ASSERT_FALSE(mixed.ok());
  EXPECT_NE(mixed.status().message().find("data.val_path"), std::string::npos) << mixed.status();
  absl::StatusOr<Corpus> both = Corpus::load(shard, {.seq_len = 16, .val_fraction = 0.1, .val_path = text});
  ASSERT_FALSE(both.ok());
  EXPECT_EQ(both.status().message(), "data.val_path and data.val_fraction: give one of them, not both");
}

}  // namespace
}  // namespace fp8::engine::data
