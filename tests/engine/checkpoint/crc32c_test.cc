#include "worker/engine/checkpoint/crc32c.h"

#include <random>
#include <string_view>
#include <vector>

#include "gtest/gtest.h"
#include "worker/engine/checkpoint/byte_codec.h"

namespace fp8::checkpoint {
namespace {

TEST(Crc32cTest, MatchesPublishedCheckValues) {
  EXPECT_EQ(crc32c(as_bytes("123456789")), 0xE3069283u);
  EXPECT_EQ(crc32c({}), 0u);
  // RFC 3720 (iSCSI) appendix B.4 vectors.
  std::vector<std::byte> zeros(32, std::byte{0});
  std::vector<std::byte> ones(32, std::byte{0xFF});
  std::vector<std::byte> ascending(32);
  for (size_t i = 0; i < ascending.size(); ++i) ascending[i] = std::byte(i);
  EXPECT_EQ(crc32c(zeros), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones), 0x62A8AB43u);
  EXPECT_EQ(crc32c(ascending), 0x46DD794Eu);
}

TEST(Crc32cTest, ExtendingInPiecesEqualsOneGo) {
  const std::string_view text = "checkpoint payloads are checksummed in pieces";
  const uint32_t whole = crc32c(as_bytes(text));
  for (size_t split = 0; split <= text.size(); ++split) {
    const uint32_t first = crc32c(as_bytes(text.substr(0, split)));
    EXPECT_EQ(crc32c_extend(first, as_bytes(text.substr(split))), whole) << split;
  }
}

TEST(Crc32cTest, HardwareAndSoftwarePathsAgree) {
  std::mt19937 rng(7);
  std::vector<std::byte> data(4096 + 13);
  for (std::byte& b : data) b = std::byte(rng() & 0xFF);
  // Odd lengths and offsets exercise the unaligned head and the byte-wise tail.
  for (size_t offset : {0, 1, 3, 7}) {
    for (size_t length : {0, 1, 7, 8, 9, 63, 64, 65, 4096}) {
      const auto piece = std::span(data).subspan(offset, length);
      EXPECT_EQ(crc32c_extend(0x12345678u, piece), crc32c_extend_software(0x12345678u, piece))
          << "offset " << offset << " length " << length;
    }
  }
}

}  // namespace
}  // namespace fp8::checkpoint
