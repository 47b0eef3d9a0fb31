// A rowwise quantize that also makes the columnwise one (QuantizeArgs::columnwise), run
// against every backend like the rest of the contract: the reference and the fast CPU
// backend (unit tests), and CUDA (gpu tests, where it is one amax pass and one cast pass for
// both; skipped, saying why, where no GPU is present). Whatever the passes, the result must
// be bit for bit the reference's rowwise and columnwise quantizes apart: codes, transposed
// codes, scales, inverse scales, amaxes and range counts.
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "fp8/arith.h"
#include "fp8/fp8.h"
#include "tests/kernels/backend_test_util.h"

namespace fp8 {
namespace {

using testing::Buffer;

class QuantizeBothWaysContract : public testing::BackendTest {};

// Gaussian values with rows and columns of very different magnitudes (so that row and
// column scales differ), some past the format's range after scaling, an all-zero row and
// column, and (optionally) ±Inf and a NaN.
std::vector<float> spread_matrix(int64_t rows, int64_t cols, uint32_t seed, bool specials) {
  auto v = testing::gaussian(static_cast<size_t>(rows * cols), seed);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      float& x = v[static_cast<size_t>(r * cols + c)];
      x *= (r % 3 == 1 ? 50.0f : 1.0f) * (c % 5 == 2 ? 1e-3f : 1.0f);
      if ((r * cols + c) % 97 == 13) x *= 1e5f;  // outliers the other half's scale saturates
      if (r == rows / 2 || c == cols / 3) x = 0.0f;
    }
  }
  if (specials && rows * cols > 40) {
    v[7] = std::numeric_limits<float>::infinity();
    v[static_cast<size_t>(rows * cols - 3)] = -std::numeric_limits<float>::infinity();
    v[static_cast<size_t>(rows * cols / 4)] = std::numeric_limits<float>::quiet_NaN();
  }
  return v;
}

std::vector<uint32_t> bits_of(const std::vector<float>& v) {
  std::vector<uint32_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = float_bits(v[i]);
  return b;
}

struct Variant {
  DType dtype;
  Format format;
  bool pow2;
  bool from_row_amaxes;  // the rows' amaxes given (row_amax), the columns' from the input
  bool optional_outputs;  // inverse scales, amaxes and range counts of both halves asked for
};

// Everything a quantize writes, downloaded.
struct Results {
  std::vector<uint8_t> out, out_t;
  std::vector<uint32_t> scale, inv_scale, amax, col_scale, col_inv_scale, col_amax;
  CastRangeCounts counts, col_counts;
};

void expect_both_ways_equal_apart(Backend& b, int64_t rows, int64_t cols, uint32_t seed, const Variant& v) {
  SCOPED_TRACE(::testing::Message() << rows << "x" << cols << " " << dtype_name(v.dtype) << " "
                                    << format_name(v.format) << " pow2=" << v.pow2
                                    << " from_row_amaxes=" << v.from_row_amaxes
                                    << " optional_outputs=" << v.optional_outputs);
  const auto host = spread_matrix(rows, cols, seed, true);
  Buffer<float> x32(&b, host);
  Buffer<uint16_t> x16(&b, testing::to_bf16(host));
  const MatrixRef x{v.dtype == DType::kFloat32 ? static_cast<const void*>(x32.get()) : x16.get(), v.dtype, rows,
                    cols};
  // The reference's input: the same stored values on the host.
  const std::vector<uint16_t> host16 = testing::to_bf16(host);
  const MatrixRef rx{v.dtype == DType::kFloat32 ? static_cast<const void*>(host.data()) : host16.data(), v.dtype,
                     rows, cols};
  const auto n = static_cast<size_t>(rows * cols);
  const auto nr = static_cast<size_t>(rows), nc = static_cast<size_t>(cols);

  Buffer<float> row_amax(&b, nr);
  if (v.from_row_amaxes) {
    ASSERT_TRUE(b.amax(x, Granularity::kRowwise, row_amax.get()).ok());
  }
  const std::vector<uint8_t> code_sentinel(n, 0xAB);
  const std::vector<float> nr_sentinel(nr, -1.0f), nc_sentinel(nc, -1.0f);
  Buffer<uint8_t> out(&b, code_sentinel), out_t(&b, code_sentinel);
  Buffer<float> scale(&b, nr_sentinel), inv(&b, nr_sentinel), amax(&b, nr_sentinel);
  Buffer<float> col_scale(&b, nc_sentinel), col_inv(&b, nc_sentinel), col_amax(&b, nc_sentinel);
  Buffer<CastRangeCounts> counts(&b, 1), col_counts(&b, 1);
  QuantizeArgs q;
  q.input = x;
  q.format = v.format;
  q.granularity = Granularity::kRowwise;
  q.pow2_scale = v.pow2;
  q.out = out.get();
  q.scale_out = scale.get();
  q.row_amax = v.from_row_amaxes ? row_amax.get() : nullptr;
  q.columnwise.out_t = out_t.get();
  q.columnwise.scale_out = col_scale.get();
  if (v.optional_outputs) {
    q.inv_scale_out = inv.get();
    q.amax_out = amax.get();
    q.range_counts = counts.get();
    q.columnwise.inv_scale_out = col_inv.get();
    q.columnwise.amax_out = col_amax.get();
    q.columnwise.range_counts = col_counts.get();
  }
  ASSERT_TRUE(b.quantize(q).ok());

  // The reference, apart: a rowwise quantize and a columnwise one.
  Results want;
  want.out.resize(n);
  want.out_t.resize(n);
  std::vector<float> s(nr), si(nr), a(nr), cs(nc), csi(nc), ca(nc);
  QuantizeArgs r;
  r.input = rx;
  r.format = v.format;
  r.granularity = Granularity::kRowwise;
  r.pow2_scale = v.pow2;
  r.out = want.out.data();
  r.scale_out = s.data();
  r.inv_scale_out = si.data();
  r.amax_out = a.data();
  r.range_counts = &want.counts;
  ASSERT_TRUE(reference_backend().quantize(r).ok());
  QuantizeArgs c = r;
  c.granularity = Granularity::kColumnwise;
  c.out = nullptr;
  c.out_t = want.out_t.data();
  c.scale_out = cs.data();
  c.inv_scale_out = csi.data();
  c.amax_out = ca.data();
  c.range_counts = &want.col_counts;
  ASSERT_TRUE(reference_backend().quantize(c).ok());

  EXPECT_EQ(out.download(), want.out) << "rowwise codes";
  EXPECT_EQ(out_t.download(), want.out_t) << "columnwise transposed codes";
  EXPECT_EQ(bits_of(scale.download()), bits_of(s)) << "row scales";
  EXPECT_EQ(bits_of(col_scale.download()), bits_of(cs)) << "column scales";
  if (v.optional_outputs) {
    EXPECT_EQ(bits_of(inv.download()), bits_of(si)) << "row inverse scales";
    EXPECT_EQ(bits_of(amax.download()), bits_of(a)) << "row amaxes";
    EXPECT_EQ(bits_of(col_inv.download()), bits_of(csi)) << "column inverse scales";
    EXPECT_EQ(bits_of(col_amax.download()), bits_of(ca)) << "column amaxes";
    const CastRangeCounts got = counts.download()[0], got_col = col_counts.download()[0];
    EXPECT_EQ(got.saturated, want.counts.saturated) << "rows' saturated";
    EXPECT_EQ(got.underflow, want.counts.underflow) << "rows' underflow";
    EXPECT_EQ(got_col.saturated, want.col_counts.saturated) << "columns' saturated";
    EXPECT_EQ(got_col.underflow, want.col_counts.underflow) << "columns' underflow";
  } else {
    EXPECT_EQ(inv.download(), nr_sentinel) << "inverse scales nobody asked for";
    EXPECT_EQ(col_amax.download(), nc_sentinel) << "column amaxes nobody asked for";
  }
  // The two halves scale differently: the test would not tell them apart otherwise.
  EXPECT_NE(want.out_t, std::vector<uint8_t>(n, 0)) << "columnwise codes";
}

// Shapes: aligned tiles, ragged both ways, taller than a block's two row tiles, and tiny.
TEST_P(QuantizeBothWaysContract, EqualsTheRowwiseAndColumnwiseQuantizesApart) {
  const Variant variants[] = {
      {DType::kBFloat16, Format::kE4M3, false, false, true},
      {DType::kBFloat16, Format::kE4M3, false, true, false},
      {DType::kBFloat16, Format::kE5M2, true, true, true},
      {DType::kFloat32, Format::kE4M3, true, false, false},
      {DType::kFloat32, Format::kE5M2, false, true, true},
  };
  uint32_t seed = 1;
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{128, 192}, {37, 53}, {300, 70}, {5, 3}}) {
    for (const Variant& v : variants) expect_both_ways_equal_apart(*b_, rows, cols, seed++, v);
  }
}

// An empty input still has its scales, those of a zero amax, quantized one way (every
// granularity) or both.
TEST_P(QuantizeBothWaysContract, AnEmptyInputGetsTheScalesOfAZeroAmax) {
  const float zero_amax_scale = scale_from_amax(0.0f, Format::kE4M3, false);
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{0, 5}, {4, 0}}) {
    for (Granularity g : {Granularity::kTensorwise, Granularity::kRowwise, Granularity::kColumnwise}) {
      SCOPED_TRACE(::testing::Message() << rows << "x" << cols << " " << granularity_name(g) << " alone");
      const auto ns = static_cast<size_t>(scale_count(g, rows, cols));
      const std::vector<float> unwritten(ns + 1, -1.0f);
      Buffer<float> x(b_, 1), scale(b_, unwritten), inv(b_, unwritten);
      Buffer<uint8_t> out(b_, 1);
      QuantizeArgs q;
      q.input = {x.get(), DType::kFloat32, rows, cols};
      q.granularity = g;
      q.out = out.get();
      q.scale_out = scale.get();
      q.inv_scale_out = inv.get();
      const absl::Status st = b_->quantize(q);
      ASSERT_TRUE(st.ok()) << st;
      const auto got = scale.download(), got_inv = inv.download();
      for (size_t i = 0; i < ns; ++i) {
        EXPECT_EQ(got[i], zero_amax_scale) << i;
        EXPECT_EQ(got_inv[i], inverse_scale(zero_amax_scale)) << i;
      }
      EXPECT_EQ(got[ns], -1.0f) << "past the scales";
    }
  }
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{0, 5}, {4, 0}}) {
    SCOPED_TRACE(::testing::Message() << rows << "x" << cols << " both ways");
    Buffer<float> x(b_, 1), scale(b_, std::vector<float>(static_cast<size_t>(rows) + 1, -1.0f));
    Buffer<float> col_scale(b_, std::vector<float>(static_cast<size_t>(cols) + 1, -1.0f));
    Buffer<uint8_t> out(b_, 1), out_t(b_, 1);
    QuantizeArgs q;
    q.input = {x.get(), DType::kFloat32, rows, cols};
    q.granularity = Granularity::kRowwise;
    q.out = out.get();
    q.scale_out = scale.get();
    q.columnwise.out_t = out_t.get();
    q.columnwise.scale_out = col_scale.get();
    const absl::Status st = b_->quantize(q);
    ASSERT_TRUE(st.ok()) << st;
    const auto got_rows = scale.download(), got_cols = col_scale.download();
    for (int64_t i = 0; i < rows; ++i) EXPECT_EQ(got_rows[static_cast<size_t>(i)], zero_amax_scale) << "row " << i;
    for (int64_t i = 0; i < cols; ++i) EXPECT_EQ(got_cols[static_cast<size_t>(i)], zero_amax_scale) << "col " << i;
    EXPECT_EQ(got_rows.back(), -1.0f) << "past the rows";
    EXPECT_EQ(got_cols.back(), -1.0f) << "past the columns";
  }
}

// Each malformed request is refused naming what is wrong, and writes nothing.
TEST_P(QuantizeBothWaysContract, BadRequestsAreRefusedWithoutTouchingMemory) {
  const int64_t rows = 16, cols = 24;
  const auto n = static_cast<size_t>(rows * cols);
  Buffer<float> x(b_, spread_matrix(rows, cols, 3, false));
  const std::vector<uint8_t> sentinel(n, 0xAB);
  Buffer<uint8_t> out(b_, sentinel), out_t(b_, sentinel), other_t(b_, sentinel);
  Buffer<float> scale(b_, std::vector<float>(n, -1.0f)), col_scale(b_, std::vector<float>(n, -1.0f));
  Buffer<CastRangeCounts> counts(b_, 2);
  auto good = [&] {
    QuantizeArgs q;
    q.input = {x.get(), DType::kFloat32, rows, cols};
    q.granularity = Granularity::kRowwise;
    q.out = out.get();
    q.scale_out = scale.get();
    q.columnwise.out_t = out_t.get();
    q.columnwise.scale_out = col_scale.get();
    return q;
  };
  struct Bad {
    const char* what;  // the part of the message that names the problem
    QuantizeArgs q;
  };
  std::vector<Bad> bad;
  for (Granularity g : {Granularity::kTensorwise, Granularity::kColumnwise}) {
    QuantizeArgs q = good();
    q.granularity = g;
    bad.push_back({"rides on a rowwise quantize only", q});
  }
  {
    QuantizeArgs q = good();
    q.out_t = other_t.get();
    bad.push_back({"quantize out_t", q});
  }
  {
    QuantizeArgs q = good();
    q.columnwise.out_t = nullptr;
    bad.push_back({"columnwise.out_t", q});
  }
  {
    QuantizeArgs q = good();
    q.columnwise.scale_out = nullptr;
    bad.push_back({"columnwise.scale_out", q});
  }
  if (b_->is_cuda()) {  // the host backends take any alignment
    QuantizeArgs q = good();
    q.columnwise.range_counts =
        reinterpret_cast<CastRangeCounts*>(reinterpret_cast<char*>(counts.get()) + 4);  // not 16-byte aligned
    bad.push_back({"columnwise.range_counts", q});
  }
  for (const Bad& c : bad) {
    SCOPED_TRACE(c.what);
    const absl::Status s = b_->quantize(c.q);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(std::string(s.message()).find(c.what), std::string::npos) << s.message();
  }
  EXPECT_EQ(out.download(), sentinel);
  EXPECT_EQ(out_t.download(), sentinel);
  EXPECT_EQ(other_t.download(), sentinel);
  EXPECT_EQ(scale.download(), std::vector<float>(n, -1.0f));
  EXPECT_EQ(col_scale.download(), std::vector<float>(n, -1.0f));
  ASSERT_TRUE(b_->quantize(good()).ok());  // the buffers themselves were fine
}

#if defined(FP8_CONTRACT_BACKENDS_HOST)
INSTANTIATE_TEST_SUITE_P(Host, QuantizeBothWaysContract, ::testing::Values("reference", "cpu"));
#endif
#if defined(FP8_CONTRACT_BACKENDS_CUDA)
INSTANTIATE_TEST_SUITE_P(Cuda, QuantizeBothWaysContract, ::testing::Values("cuda"));
#endif

}  // namespace
}  // namespace fp8
