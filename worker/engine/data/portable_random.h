// Random numbers whose every output is fixed by the seed, on every platform and standard
// library. The data order must be reproducible across machines (a job resumed elsewhere,
// ranks on different hosts), so this avoids std::uniform_int_distribution and
// std::shuffle, whose outputs the standard leaves to each implementation. The engine
// itself, std::mt19937_64, is fully specified by the standard, seeding included.
#pragma once

#include <cstdint>
#include <random>
#include <span>

namespace fp8::engine::data {

// One well-mixed 64-bit seed per (seed, stream) pair, so that streams derived from
// nearby seeds or adjacent stream numbers (epoch 0, 1, 2...) are unrelated.
uint64_t mix_seed(uint64_t seed, uint64_t stream);

// Uniform in [0, bound), without modulo bias. bound must be > 0.
uint64_t uniform_below(std::mt19937_64& rng, uint64_t bound);

// Fisher-Yates: every permutation of `values` equally likely.
void shuffle_in_place(std::span<uint32_t> values, std::mt19937_64& rng);

}  // namespace fp8::engine::data
