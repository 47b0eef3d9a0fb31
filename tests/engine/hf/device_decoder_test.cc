// Generation: the KV-cache decoder (DeviceDecoder, the engine's kernels, here on the CPU)
// against the training engine's forward (LlamaModel, recipe none, fp32) on a randomly
// initialised model, greedy decoding with the cache against argmax decoding that
// recomputes the whole prefix without it, bad prompts and models, and the sampler.
#include "worker/engine/hf/device_decoder.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/engine/hf/logits_error.h"
#include "tests/engine/hf/random_checkpoint_model.h"
#include "worker/engine/hf/checkpoint_logits.h"
#include "worker/engine/hf/generate.h"
#include "worker/engine/hf/sampler.h"
#include "worker/engine/tensor/device.h"

namespace fp8::hf {
namespace {

// A small model whose vocabulary (260) pads to 320 rows in the engine. max_seq_len 24
// makes the decoder's cache grow five times (1, 2, 4, 8, 16, 24 rows) over a full context.
CheckpointModel random_model(bool tied, uint64_t seed) {
  engine::LlamaConfig c;
  c.vocab_size = 260;
  c.dim = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.ffn_dim = 48;
  c.max_seq_len = 24;
  c.tie_embeddings = tied;
  return random_checkpoint_model(c, seed);
}

std::vector<int32_t> sample_tokens(int n, int32_t vocab) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) out.push_back((i * 37 + 11) % vocab);
  return out;
}

std::unique_ptr<DeviceDecoder> cpu_decoder(const CheckpointModel& m) {
  absl::StatusOr<std::unique_ptr<DeviceDecoder>> d = DeviceDecoder::create(m, engine::Device::cpu());
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? std::move(*d) : nullptr;
}

class DeviceDecoderTest : public ::testing::TestWithParam<bool> {};
INSTANTIATE_TEST_SUITE_P(Tied, DeviceDecoderTest, ::testing::Bool());

// At every position the logits are those of the engine's forward over the whole sequence
// (causal: its row `pos` is this position's), and again after a reset.
TEST_P(DeviceDecoderTest, LogitsAtEveryPositionAreTheEnginesForward) {
  const CheckpointModel m = random_model(GetParam(), 7);
  const std::vector<int32_t> tokens = sample_tokens(static_cast<int>(m.config.max_seq_len), 260);
  absl::StatusOr<std::vector<float>> engine = checkpoint_logits(m, tokens);
  ASSERT_TRUE(engine.ok()) << engine.status();
  std::unique_ptr<DeviceDecoder> decoder = cpu_decoder(m);
  ASSERT_NE(decoder, nullptr);
  const int64_t vocab = m.config.vocab_size;
  for (int round = 0; round < 2; ++round) {
    for (size_t pos = 0; pos < tokens.size(); ++pos) {
      absl::StatusOr<std::span<const float>> got = decoder->feed(tokens[pos]);
      ASSERT_TRUE(got.ok()) << got.status();
      ASSERT_EQ(static_cast<int64_t>(got->size()), vocab);
      const std::span<const float> want = std::span<const float>(*engine).subspan(pos * vocab, vocab);
      EXPECT_LT(relative_max_error(*got, want), 1e-5) << "round " << round << ", position " << pos;
    }
    // The context is full now; a reset starts it over.
    EXPECT_EQ(decoder->feed(0).status().message(), "the context is full: max_seq_len is 24");
    decoder->reset();
  }
}

// Tokens fed together (a prompt: kChunk at a time, GEMMs over their rows) give what the
// engine's forward gives at the last of them, whatever the split: one call of the whole
// sequence (three chunks), or calls of 70 (a chunk and a part), 1 and the rest.
TEST(DeviceDecoderPrefillTest, TokensFedTogetherGiveTheEnginesLogitsAtTheLast) {
  engine::LlamaConfig c = random_model(false, 0).config;
  c.max_seq_len = 150;
  const CheckpointModel m = random_checkpoint_model(c, 17);
  const std::vector<int32_t> tokens = sample_tokens(150, 260);
  absl::StatusOr<std::vector<float>> engine = checkpoint_logits(m, tokens);
  ASSERT_TRUE(engine.ok()) << engine.status();
  std::unique_ptr<DeviceDecoder> decoder = cpu_decoder(m);
  ASSERT_NE(decoder, nullptr);
  const int64_t vocab = c.vocab_size;
  auto expect_row = [&](std::span<const float> got, int64_t pos) {
    const std::span<const float> want = std::span<const float>(*engine).subspan(pos * vocab, vocab);
    EXPECT_LT(relative_max_error(got, want), 1e-5) << "position " << pos;
  };
  for (const std::vector<size_t>& split : {std::vector<size_t>{150}, {70, 1, 79}}) {
    decoder->reset();
    size_t first = 0;
    for (size_t n : split) {
      absl::StatusOr<std::span<const float>> got = decoder->feed(std::span<const int32_t>(tokens).subspan(first, n));
      ASSERT_TRUE(got.ok()) << got.status();
      first += n;
      EXPECT_EQ(decoder->position(), static_cast<int64_t>(first));
      expect_row(*got, static_cast<int64_t>(first) - 1);
    }
  }

  // Refused whole: nothing is fed.
  decoder->reset();
  ASSERT_TRUE(decoder->feed(std::span<const int32_t>(tokens).first(100)).ok());
  EXPECT_EQ(decoder->feed(std::span<const int32_t>(tokens).first(51)).status().message(),
            "the context is full: max_seq_len is 150");
  const std::vector<int32_t> one_bad = {5, 6, 260, 7};
  EXPECT_EQ(decoder->feed(one_bad).status().message(), "token 260 is outside the vocabulary of 260");
  EXPECT_EQ(decoder->feed(std::span<const int32_t>()).status().message(), "no tokens to feed");
  EXPECT_EQ(decoder->position(), 100);
  absl::StatusOr<std::span<const float>> rest = decoder->feed(std::span<const int32_t>(tokens).subspan(100));
  ASSERT_TRUE(rest.ok()) << rest.status();
  expect_row(*rest, 149);
}

TEST(DeviceDecoderGreedyTest, GreedyWithTheCacheIsArgmaxOfTheWholePrefixRecomputed) {
  const CheckpointModel m = random_model(false, 11);
  const std::vector<int32_t> prompt = {72, 101, 108, 108, 111};
  std::unique_ptr<DeviceDecoder> decoder = cpu_decoder(m);
  ASSERT_NE(decoder, nullptr);
  Sampler greedy(SamplingOptions{.temperature = 0});
  absl::StatusOr<Generation> g = generate(*decoder, prompt, 100, greedy);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(g->context_full);
  ASSERT_EQ(static_cast<int64_t>(prompt.size() + g->tokens.size()), m.config.max_seq_len + 1);

  // Without a cache: the engine's forward over the whole sequence so far, every step.
  std::vector<int32_t> sequence = prompt;
  const int64_t vocab = m.config.vocab_size;
  for (int32_t generated : g->tokens) {
    absl::StatusOr<std::vector<float>> logits = checkpoint_logits(m, sequence);
    ASSERT_TRUE(logits.ok()) << logits.status();
    const auto last = logits->begin() + static_cast<int64_t>(sequence.size() - 1) * vocab;
    const auto argmax = static_cast<int32_t>(std::max_element(last, last + vocab) - last);
    ASSERT_EQ(generated, argmax) << "after " << sequence.size() << " tokens";
    sequence.push_back(generated);
  }

  // The same again from the same decoder (generate starts it over).
  absl::StatusOr<Generation> again = generate(*decoder, prompt, 100, greedy);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->tokens, g->tokens);

  // A stop token ends it, kept as the last; max_new_tokens bounds it.
  const int32_t third = g->tokens[2];
  absl::StatusOr<Generation> stopped = generate(*decoder, prompt, 100, greedy, [&](int32_t t) { return t == third; });
  ASSERT_TRUE(stopped.ok());
  const auto first_stop = std::find(g->tokens.begin(), g->tokens.end(), third);
  EXPECT_EQ(stopped->tokens, std::vector<int32_t>(g->tokens.begin(), first_stop + 1));
  EXPECT_FALSE(stopped->context_full);
  absl::StatusOr<Generation> two = generate(*decoder, prompt, 2, greedy);
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->tokens, std::vector<int32_t>(g->tokens.begin(), g->tokens.begin() + 2));
}

TEST(DeviceDecoderGreedyTest, BadPromptsAndModelsAreRefused) {
  const CheckpointModel m = random_model(false, 3);
  std::unique_ptr<DeviceDecoder> decoder = cpu_decoder(m);
  ASSERT_NE(decoder, nullptr);
  Sampler s(SamplingOptions{});
  EXPECT_EQ(generate(*decoder, {}, 4, s).status().code(), absl::StatusCode::kInvalidArgument);
  const std::vector<int32_t> outside = {1, 260};
  absl::Status status = generate(*decoder, outside, 4, s).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("token 260 is outside the vocabulary of 260"), std::string::npos) << status;
  const std::vector<int32_t> too_long(static_cast<size_t>(m.config.max_seq_len + 1), 5);
  EXPECT_EQ(generate(*decoder, too_long, 4, s).status().code(), absl::StatusCode::kInvalidArgument);

  // A refused token is not kept in the context.
  decoder->reset();
  ASSERT_TRUE(decoder->feed(1).ok());
  EXPECT_EQ(decoder->feed(-1).status().message(), "token -1 is outside the vocabulary of 260");
  EXPECT_EQ(decoder->position(), 1);

  CheckpointModel missing = m;
  missing.parameters.pop_back();  // "output"
  status = DeviceDecoder::create(missing, engine::Device::cpu()).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("no parameter output"), std::string::npos) << status;
}

TEST(SamplerTest, GreedyTopKAndSeeds) {
  const std::vector<float> logits = {0.5f, 2.0f, 1.5f, 2.0f, -1.0f, 1.9f};
  Sampler greedy(SamplingOptions{.temperature = 0});
  EXPECT_EQ(greedy.next(logits), 1);  // the lowest id among equal maxima

  // top_k 1 is greedy at any temperature; top_k 3 draws only among ids 1, 3 and 5.
  Sampler one(SamplingOptions{.temperature = 5, .top_k = 1, .seed = 9});
  Sampler three(SamplingOptions{.temperature = 5, .top_k = 3, .seed = 9});
  Sampler all(SamplingOptions{.temperature = 5, .top_k = 0, .seed = 9});
  std::vector<int> seen_three(6), seen_all(6);
  for (int i = 0; i < 2000; ++i) {
    EXPECT_EQ(one.next(logits), 1);
    ++seen_three[three.next(logits)];
    ++seen_all[all.next(logits)];
  }
  EXPECT_EQ(seen_three[0] + seen_three[2] + seen_three[4], 0);
  EXPECT_GT(seen_three[1], 0);
  EXPECT_GT(seen_three[3], 0);
  EXPECT_GT(seen_three[5], 0);
  for (int id = 0; id < 6; ++id) EXPECT_GT(seen_all[id], 0) << id;  // temperature 5 flattens

  // A seed repeats its draws; another seed draws otherwise.
  Sampler a(SamplingOptions{.temperature = 1, .seed = 42}), b(SamplingOptions{.temperature = 1, .seed = 42}),
      c(SamplingOptions{.temperature = 1, .seed = 43});
  std::vector<int32_t> da, db, dc;
  for (int i = 0; i < 64; ++i) {
    da.push_back(a.next(logits));
    db.push_back(b.next(logits));
    dc.push_back(c.next(logits));
  }
  EXPECT_EQ(da, db);
  EXPECT_NE(da, dc);
}

}  // namespace
}  // namespace fp8::hf
