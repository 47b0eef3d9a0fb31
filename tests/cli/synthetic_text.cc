#include "tests/cli/synthetic_text.h"

#include <cstdint>
#include <iterator>

namespace fp8::cli_test {
namespace {

// splitmix64: the same numbers on every platform (std:: distributions are not).
struct Rng {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  size_t below(size_t n) { return static_cast<size_t>(next() % n); }
};

}  // namespace

std::string synthetic_text(size_t bytes) {
  static const char* kWords[] = {
      "the",   "of",    "and",   "to",    "in",     "a",      "is",     "that",   "for",   "it",
      "as",    "was",   "with",  "be",    "by",     "on",     "not",    "he",     "this",  "are",
      "or",    "his",   "from",  "at",    "which",  "but",    "have",   "an",     "they",  "you",
      "were",  "her",   "she",   "there", "one",    "all",    "we",     "their",  "model", "train",
      "small", "river", "stone", "light", "morning", "garden", "window", "quietly", "after", "before"};
  Rng rng{2024};
  std::string text;
  text.reserve(bytes + 128);
  while (text.size() < bytes) {
    const size_t words = 5 + rng.below(11);
    for (size_t i = 0; i < words; ++i) {
      std::string w = kWords[rng.below(std::size(kWords))];
      if (i == 0) w[0] = static_cast<char>(w[0] - 'a' + 'A');
      text += w;
      if (i + 1 < words) text += (rng.below(9) == 0) ? ", " : " ";
    }
    text += (rng.below(6) == 0) ? "?" : ".";
    text += (rng.below(5) == 0) ? "\n\n" : " ";
  }
  return text;
}

}  // namespace fp8::cli_test
