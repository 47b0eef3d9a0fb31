#include "worker/engine/checkpoint/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define FP8_CRC32C_HAVE_SSE42_PATH 1
#endif

namespace fp8::checkpoint {
namespace {

constexpr uint32_t kCastagnoliReflected = 0x82F63B78u;

// Slicing-by-8 tables: table[k][b] is the CRC of byte b followed by k zero bytes, so
// eight input bytes are folded with eight lookups instead of eight dependent steps.
using SlicingTables = std::array<std::array<uint32_t, 256>, 8>;

constexpr SlicingTables make_slicing_tables() {
  SlicingTables t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t crc = b;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1u) ? kCastagnoliReflected : 0u);
    t[0][b] = crc;
  }
  for (int k = 1; k < 8; ++k) {
    for (uint32_t b = 0; b < 256; ++b) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFFu];
  }
  return t;
}

constexpr SlicingTables kTables = make_slicing_tables();

// Both paths work on the raw (pre-inverted) register value.
uint32_t update_software(uint32_t state, const unsigned char* p, size_t n) {
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);  // memcpy: the data need not be aligned
    word ^= state;             // little-endian: the low 4 bytes take the running CRC
    state = kTables[7][word & 0xFF] ^ kTables[6][(word >> 8) & 0xFF] ^ kTables[5][(word >> 16) & 0xFF] ^
            kTables[4][(word >> 24) & 0xFF] ^ kTables[3][(word >> 32) & 0xFF] ^ kTables[2][(word >> 40) & 0xFF] ^
            kTables[1][(word >> 48) & 0xFF] ^ kTables[0][(word >> 56) & 0xFF];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) state = (state >> 8) ^ kTables[0][(state ^ *p++) & 0xFF];
  return state;
}

#ifdef FP8_CRC32C_HAVE_SSE42_PATH
__attribute__((target("sse4.2"))) uint32_t update_sse42(uint32_t state, const unsigned char* p, size_t n) {
  uint64_t state64 = state;
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    state64 = _mm_crc32_u64(state64, word);
    p += 8;
    n -= 8;
  }
  auto state32 = static_cast<uint32_t>(state64);
  while (n-- > 0) state32 = _mm_crc32_u8(state32, *p++);
  return state32;
}

bool cpu_has_sse42() {
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
}
#endif

const unsigned char* bytes(std::span<const std::byte> data) {
  return reinterpret_cast<const unsigned char*>(data.data());
}

}  // namespace

uint32_t crc32c_extend_software(uint32_t crc, std::span<const std::byte> data) {
  return ~update_software(~crc, bytes(data), data.size());
}

uint32_t crc32c_extend(uint32_t crc, std::span<const std::byte> data) {
#ifdef FP8_CRC32C_HAVE_SSE42_PATH
  if (cpu_has_sse42()) return ~update_sse42(~crc, bytes(data), data.size());
#endif
  return crc32c_extend_software(crc, data);
}

uint32_t crc32c(std::span<const std::byte> data) { return crc32c_extend(0, data); }

}  // namespace fp8::checkpoint
