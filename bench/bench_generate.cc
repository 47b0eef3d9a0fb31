// bench_generate: fp8-model generate's decoding speed, side by side in one run: the KV-cache
// decoder (DeviceDecoder: each new token one pass over the weights and the cached keys and
// values) against recomputing the engine's forward over the whole context for each new
// token (what generation on a GPU did before it had a cache); and the prompt fed together
// (DeviceDecoder::kChunk tokens a pass) against a token at a time. A model of the given
// shape, initialised as a fresh job would be; greedy decoding, so both runs take the same
// tokens.
//
//   bench_generate [--device cpu|cuda] [--dim D] [--layers L] [--heads H] [--kv-heads KV] [--ffn F]
//                  [--vocab V] [--prompt P] [--new N] [--rounds R]
//
// Prints each way's milliseconds per token (median over the rounds, the ways taking turns
// within each) and tokens per second, the speed-ups, and whether both decodings chose the
// same tokens.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "bench/bench_device.h"
#include "bench/bench_util.h"
#include "worker/engine/hf/checkpoint_logits.h"
#include "worker/engine/hf/checkpoint_model.h"
#include "worker/engine/hf/device_decoder.h"
#include "worker/engine/model/llama.h"

namespace fp8::bench {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

int32_t argmax(std::span<const float> logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// The prompt into a fresh context, in one call (together) or a token at a time; returns
// the seconds it took and the logits after it.
double run_prompt(hf::DeviceDecoder& d, const std::vector<int32_t>& prompt, bool together,
                  std::span<const float>& logits) {
  d.reset();
  const Clock::time_point start = Clock::now();
  if (together) {
    absl::StatusOr<std::span<const float>> l = d.feed(prompt);
    check(l.status(), "feed the prompt");
    logits = *l;
  } else {
    for (int32_t t : prompt) {
      absl::StatusOr<std::span<const float>> l = d.feed(t);
      check(l.status(), "feed the prompt");
      logits = *l;
    }
  }
  return seconds_since(start);
}

// After the prompt (fed together), `n` greedy tokens; returns the seconds the new tokens
// took and appends them to `chosen`.
double run_cached(hf::DeviceDecoder& d, const std::vector<int32_t>& prompt, int n, std::vector<int32_t>& chosen) {
  std::span<const float> logits;
  run_prompt(d, prompt, /*together=*/true, logits);
  const Clock::time_point start = Clock::now();
  for (int i = 0; i < n; ++i) {
    const int32_t next = argmax(logits);
    chosen.push_back(next);
    absl::StatusOr<std::span<const float>> l = d.feed(next);
    check(l.status(), "feed a new token");
    logits = *l;
  }
  return seconds_since(start);
}

// The same tokens through the whole forward over the context for each new one.
double run_recomputed(engine::LlamaModel& model, const std::vector<int32_t>& prompt, int n, int64_t vocab,
                      std::vector<int32_t>& chosen) {
  std::vector<int32_t> context = prompt;
  const Clock::time_point start = Clock::now();
  for (int i = 0; i < n; ++i) {
    absl::StatusOr<std::vector<float>> logits = hf::engine_logits(model, context);
    check(logits.status(), "the forward over the context");
    const int32_t next = argmax(std::span<const float>(*logits).last(static_cast<size_t>(vocab)));
    chosen.push_back(next);
    context.push_back(next);
  }
  return seconds_since(start);
}

}  // namespace
}  // namespace fp8::bench

int main(int argc, char** argv) {
  using namespace fp8;
  bench::apply_threads_from_environment();
  CLI::App app{"bench_generate: generation's tokens/s with the KV cache vs recomputing the whole context"};
  std::string device = "cpu";
  engine::LlamaConfig c;
  c.vocab_size = 256;
  c.dim = 512;
  c.n_layers = 8;
  c.n_heads = 8;
  c.n_kv_heads = 8;
  c.ffn_dim = 1408;
  int prompt_len = 64, new_tokens = 64, rounds = 3;
  app.add_option("--device", device, "cpu, or cuda (GPU 0)")->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  app.add_option("--dim", c.dim)->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--layers", c.n_layers)->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--heads", c.n_heads)->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--kv-heads", c.n_kv_heads)->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--ffn", c.ffn_dim)->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--vocab", c.vocab_size)->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--prompt", prompt_len, "prompt tokens before the timed ones")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--new", new_tokens, "new tokens timed per round")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--rounds", rounds)->check(CLI::PositiveNumber)->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (c.dim % c.n_heads != 0 || c.n_heads % c.n_kv_heads != 0 || (c.dim / c.n_heads) % 2 != 0) {
    bench::die("--dim must split into --heads heads of an even head_dim, and --heads into --kv-heads groups");
  }
  c.max_seq_len = prompt_len + new_tokens;

  std::unique_ptr<engine::Device> owner;
  const engine::Device& dev = bench::open_engine_device(device == "cuda", owner);
  absl::StatusOr<hf::CheckpointModel> model = hf::initial_checkpoint_model(c, /*seed=*/1);
  bench::check(model.status(), "the model");
  absl::StatusOr<std::unique_ptr<hf::DeviceDecoder>> cached = hf::DeviceDecoder::create(*model, dev);
  bench::check(cached.status(), "the KV-cache decoder");
  absl::StatusOr<std::unique_ptr<engine::LlamaModel>> whole = hf::engine_model(*model, dev);
  bench::check(whole.status(), "the engine's model");
  std::vector<int32_t> prompt;
  for (int i = 0; i < prompt_len; ++i) prompt.push_back((i * 37 + 11) % static_cast<int32_t>(c.vocab_size));

  std::vector<double> cached_s, recomputed_s, together_s, one_by_one_s;
  bool same_tokens = true;
  for (int r = 0; r <= rounds; ++r) {  // round 0 warms up
    std::vector<int32_t> a, b;
    const double t_cached = bench::run_cached(**cached, prompt, new_tokens, a);
    const double t_recomputed = bench::run_recomputed(**whole, prompt, new_tokens, c.vocab_size, b);
    same_tokens = same_tokens && a == b;
    std::span<const float> ignored;
    const double t_together = bench::run_prompt(**cached, prompt, /*together=*/true, ignored);
    const double t_one_by_one = bench::run_prompt(**cached, prompt, /*together=*/false, ignored);
    if (r == 0) continue;
    cached_s.push_back(t_cached / new_tokens);
    recomputed_s.push_back(t_recomputed / new_tokens);
    together_s.push_back(t_together / prompt_len);
    one_by_one_s.push_back(t_one_by_one / prompt_len);
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double cached_med = median(cached_s), recomputed_med = median(recomputed_s);
  std::printf("bench_generate %s on %s: dim %lld, %lld layers, %lld/%lld heads, ffn %lld, vocab %lld; prompt %d, "
              "%d new tokens a round, %d rounds\n",
              bench::today().c_str(), dev.name().c_str(), static_cast<long long>(c.dim),
              static_cast<long long>(c.n_layers), static_cast<long long>(c.n_heads),
              static_cast<long long>(c.n_kv_heads), static_cast<long long>(c.ffn_dim),
              static_cast<long long>(c.vocab_size), prompt_len, new_tokens, rounds);
  bench::Table t({"decoding", "ms/token", "tokens/s", "vs recomputing"});
  t.add({"KV cache", bench::fmt(cached_med * 1e3, 2), bench::fmt(1.0 / cached_med, 1),
         bench::fmt(recomputed_med / cached_med, 2) + "x"});
  t.add({"whole context recomputed", bench::fmt(recomputed_med * 1e3, 2), bench::fmt(1.0 / recomputed_med, 1),
         "1.00x"});
  t.print();
  const double together_med = median(together_s), one_by_one_med = median(one_by_one_s);
  bench::Table p({"the prompt", "ms/prompt token", "prompt tokens/s", "vs a token at a time"});
  p.add({"fed together", bench::fmt(together_med * 1e3, 3), bench::fmt(1.0 / together_med, 1),
         bench::fmt(one_by_one_med / together_med, 2) + "x"});
  p.add({"a token at a time", bench::fmt(one_by_one_med * 1e3, 3), bench::fmt(1.0 / one_by_one_med, 1), "1.00x"});
  p.print();
  std::printf("same greedy tokens both ways: %s\n", same_tokens ? "yes" : "NO");
  return same_tokens ? 0 : 1;
}
