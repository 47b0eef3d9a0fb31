// The fast CPU path's building blocks that the contract tests reach only indirectly:
// fp8 widening (used by the GEMM) and the byte transpose (used by cast+transpose).
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "cpu/cast_cpu.h"
#include "cpu/transpose.h"

namespace fp8::cpu {
namespace {

TEST(WidenFp8, EveryCodeWidensToItsExactValueBitForBit) {
  for (Format f : {Format::kE4M3, Format::kE5M2}) {
    // Three passes over all codes plus a ragged tail, so both the vector bulk and the
    // scalar tail see every code.
    std::vector<uint8_t> codes;
    for (int rep = 0; rep < 3; ++rep) {
      for (int c = 0; c < 256; ++c) codes.push_back(static_cast<uint8_t>(c));
    }
    for (int c = 250; c < 256; ++c) codes.push_back(static_cast<uint8_t>(c));
    std::vector<float> out(codes.size());
    widen_fp8(codes.data(), f, static_cast<int64_t>(codes.size()), out.data());
    for (size_t i = 0; i < codes.size(); ++i) {
      ASSERT_EQ(float_bits(out[i]), float_bits(fp8_to_float(codes[i], f)))
          << format_name(f) << " code 0x" << std::hex << int{codes[i]} << " at " << std::dec << i;
    }
  }
}

TEST(TransposeBytes, MatchesNaiveTransposeForRaggedShapes) {
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{16, 16}, {17, 33}, {64, 48}, {5, 100}, {100, 5}, {1, 1}}) {
    std::vector<uint8_t> src(static_cast<size_t>(rows * cols));
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 31 + 7);
    const int64_t ld_dst = rows + 3;  // a wider destination stride, as for a tile of a larger matrix
    std::vector<uint8_t> dst(static_cast<size_t>(cols * ld_dst), 0xEE);
    transpose_bytes(src.data(), cols, rows, cols, dst.data(), ld_dst);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        ASSERT_EQ(dst[static_cast<size_t>(c * ld_dst + r)], src[static_cast<size_t>(r * cols + c)])
            << rows << "x" << cols << " at " << r << "," << c;
      }
    }
    for (int64_t c = 0; c < cols; ++c) {
      for (int64_t r = rows; r < ld_dst; ++r) EXPECT_EQ(dst[static_cast<size_t>(c * ld_dst + r)], 0xEE);
    }
  }
}

}  // namespace
}  // namespace fp8::cpu
