// Picks the next token from logits: greedy at temperature 0, otherwise a draw from
// softmax(logits / temperature) over the top_k most likely tokens (all when 0). The draw
// is a function of the seed and the logits alone, so a run repeats exactly.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace fp8::hf {

struct SamplingOptions {
  double temperature = 0.8;  // 0: argmax (the lowest id among equal maxima)
  int top_k = 0;             // 0: every token
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplingOptions& options) : options_(options), rng_(options.seed) {}
  int32_t next(std::span<const float> logits);

 private:
  SamplingOptions options_;
  std::mt19937_64 rng_;
  std::vector<int32_t> order_;
};

}  // namespace fp8::hf
