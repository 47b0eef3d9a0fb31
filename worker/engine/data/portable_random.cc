#include "worker/engine/data/portable_random.h"

#include <utility>

namespace fp8::engine::data {
namespace {

// The finaliser of SplitMix64 (Steele, Lea and Flood): a bijection on 64-bit words in
// which every input bit affects every output bit.
uint64_t avalanche(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

uint64_t mix_seed(uint64_t seed, uint64_t stream) {
  // Mixing the seed before adding the stream keeps (seed, stream) and (seed + 1,
  // stream - 1) apart; the odd constant is the golden-ratio increment of SplitMix64.
  return avalanche(avalanche(seed) + 0x9e3779b97f4a7c15ULL * (stream + 1));
}

uint64_t uniform_below(std::mt19937_64& rng, uint64_t bound) {
  // 2^64 mod bound raw values at the bottom of the range would make small results
  // slightly more likely than large ones; redraw when one comes up. (-bound) % bound is
  // that count computed in 64-bit arithmetic. At most half of the draws are rejected,
  // and for small bounds almost none.
  const uint64_t rejected_below = (0 - bound) % bound;
  while (true) {
    const uint64_t raw = rng();
    if (raw >= rejected_below) return raw % bound;
  }
}

void shuffle_in_place(std::span<uint32_t> values, std::mt19937_64& rng) {
  for (size_t i = values.size(); i > 1; --i) {
    const auto j = static_cast<size_t>(uniform_below(rng, i));
    std::swap(values[i - 1], values[j]);
  }
}

}  // namespace fp8::engine::data
