// The contract every fp8 backend keeps, run against each: the reference and the fast
// CPU backend (unit tests), and the CUDA backend (gpu tests; skipped, saying why, where
// no GPU is present). Casts, amaxes and scales must match the reference bit for bit;
// GEMMs must match within the tolerance of fp32 accumulation, and reach torchao's
// accuracy bars against an fp64 product of the unquantised data.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "fp8/arith.h"
#include "fp8/delayed_state.h"
#include "fp8/fp8.h"
#include "tests/kernels/backend_test_util.h"

namespace fp8 {
namespace {

using testing::Buffer;
using testing::gaussian;
using testing::stored_bytes;
using testing::widened;

class BackendContract : public testing::BackendTest {
 protected:
  // Data with a spread of magnitudes, some values past the e4m3 range after scaling,
  // and (optionally) the special values.
  static std::vector<float> test_matrix(int64_t rows, int64_t cols, uint32_t seed, bool specials) {
    auto v = gaussian(static_cast<size_t>(rows * cols), seed);
    for (size_t i = 0; i < v.size(); i += 7) v[i] *= 100.0f;
    for (size_t i = 3; i < v.size(); i += 11) v[i] *= 1e-4f;
    if (specials && v.size() > 20) {
      v[1] = 0.0f;
      v[2] = -0.0f;
      v[5] = std::numeric_limits<float>::infinity();
      v[9] = -std::numeric_limits<float>::infinity();
    }
    return v;
  }

};

// ---- amax and scales --------------------------------------------------------------------

TEST_P(BackendContract, AmaxMatchesReferenceForEveryGranularityAndDtype) {
  const int64_t rows = 67, cols = 131;
  const auto host = test_matrix(rows, cols, 1, false);
  const auto host_bf16 = testing::to_bf16(host);
  Buffer<float> x(b_, host);
  Buffer<uint16_t> xb(b_, host_bf16);
  for (Granularity g : {Granularity::kTensorwise, Granularity::kRowwise, Granularity::kColumnwise}) {
    const auto n = static_cast<size_t>(scale_count(g, rows, cols));
    for (DType t : {DType::kFloat32, DType::kBFloat16}) {
      SCOPED_TRACE(::testing::Message() << granularity_name(g) << " " << dtype_name(t));
      const void* dev = t == DType::kFloat32 ? static_cast<const void*>(x.get()) : xb.get();
      const void* hst = t == DType::kFloat32 ? static_cast<const void*>(host.data()) : host_bf16.data();
      Buffer<float> out(b_, n);
      ASSERT_TRUE(b_->amax({dev, t, rows, cols}, g, out.get()).ok());
      std::vector<float> want(n);
      ASSERT_TRUE(ref().amax({hst, t, rows, cols}, g, want.data()).ok());
      EXPECT_EQ(out.download(), want);
    }
  }
}

TEST_P(BackendContract, AmaxPropagatesNaNToItsRowColumnAndTensor) {
  const int64_t rows = 40, cols = 50;
  auto host = gaussian(static_cast<size_t>(rows * cols), 2);
  host[7 * cols + 9] = std::numeric_limits<float>::quiet_NaN();
  Buffer<float> x(b_, host);
  Buffer<float> t(b_, 1), r(b_, rows), c(b_, cols);
  ASSERT_TRUE(b_->amax({x.get(), DType::kFloat32, rows, cols}, Granularity::kTensorwise, t.get()).ok());
  ASSERT_TRUE(b_->amax({x.get(), DType::kFloat32, rows, cols}, Granularity::kRowwise, r.get()).ok());
  ASSERT_TRUE(b_->amax({x.get(), DType::kFloat32, rows, cols}, Granularity::kColumnwise, c.get()).ok());
  EXPECT_TRUE(std::isnan(t.download()[0]));
  const auto rv = r.download();
  const auto cv = c.download();
  for (int64_t i = 0; i < rows; ++i) EXPECT_EQ(std::isnan(rv[i]), i == 7) << i;
  for (int64_t j = 0; j < cols; ++j) EXPECT_EQ(std::isnan(cv[j]), j == 9) << j;
}

TEST_P(BackendContract, AmaxOfEmptyAndZeroTensorsIsZero) {
  std::vector<float> zeros(64, 0.0f);
  zeros[3] = -0.0f;
  Buffer<float> x(b_, zeros), out(b_, 1);
  ASSERT_TRUE(b_->amax({x.get(), DType::kFloat32, 8, 8}, Granularity::kTensorwise, out.get()).ok());
  EXPECT_EQ(out.download()[0], 0.0f);
  ASSERT_TRUE(b_->amax({x.get(), DType::kFloat32, 0, 8}, Granularity::kTensorwise, out.get()).ok());
  EXPECT_EQ(out.download()[0], 0.0f);
}

TEST_P(BackendContract, ComputeScalesMatchesTheFormula) {
  const std::vector<float> amax = {0.0f, 1e-20f, 1.0f, 3.0f, 448.0f, 1e6f, std::numeric_limits<float>::infinity(),
                                   std::numeric_limits<float>::quiet_NaN()};
  Buffer<float> a(b_, amax), s(b_, amax.size());
  for (Format f : {Format::kE4M3, Format::kE5M2}) {
    for (bool pow2 : {false, true}) {
      ASSERT_TRUE(b_->compute_scales(a.get(), static_cast<int64_t>(amax.size()), f, pow2, s.get()).ok());
      const auto got = s.download();
      for (size_t i = 0; i < amax.size(); ++i) {
        const float want = scale_from_amax(amax[i], f, pow2);
        if (std::isnan(want)) {
          EXPECT_TRUE(std::isnan(got[i]));
        } else {
          EXPECT_EQ(got[i], want) << amax[i];
        }
      }
    }
  }
}

// A queued read holds the bytes as they were when it was queued, even when work queued
// after it overwrites them (FSDP's ranks read a step's stop votes a step later), and only
// values go this way.
TEST_P(BackendContract, AQueuedReadHoldsTheBytesAsOfWhenItWasQueued) {
  Buffer<float> x(b_, std::vector<float>{1.5f, -2.0f, 3.25f});
  Buffer<float> later(b_, std::vector<float>{7.0f, 8.0f, 9.0f});
  absl::StatusOr<std::unique_ptr<QueuedRead>> first = b_->queue_read(x.get(), 3 * sizeof(float));
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<std::unique_ptr<QueuedRead>> second = b_->queue_read(x.get() + 1, sizeof(float));
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_TRUE(b_->copy(x.get(), later.get(), 3 * sizeof(float)).ok());  // queued after both
  std::vector<float> got(3, 0.0f);
  ASSERT_TRUE((*first)->wait(got.data()).ok());
  EXPECT_EQ(got, (std::vector<float>{1.5f, -2.0f, 3.25f}));
  float one = 0.0f;
  ASSERT_TRUE((*second)->wait(&one).ok());
  EXPECT_EQ(one, -2.0f);
  EXPECT_EQ(x.download(), (std::vector<float>{7.0f, 8.0f, 9.0f}));

  Buffer<float> big(b_, Backend::kMaxQueuedReadBytes / sizeof(float) + 1);
  const absl::StatusOr<std::unique_ptr<QueuedRead>> too_big =
      b_->queue_read(big.get(), Backend::kMaxQueuedReadBytes + sizeof(float));
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(too_big.status().message().find("at most 256"), std::string::npos) << too_big.status();
}

// FSDP's fp8 all-gather derives a weight's scale and the GEMM's inverse from the ranks'
// reduced amax without the host reading it.
TEST_P(BackendContract, ComputeScalesWritesTheInversesWhenAsked) {
  const std::vector<float> amax = {0.0f, 1e-20f, 0.75f, 3.0f, 448.0f, 1e6f, std::numeric_limits<float>::infinity()};
  Buffer<float> a(b_, amax), s(b_, amax.size()), inv(b_, amax.size());
  for (bool pow2 : {false, true}) {
    ASSERT_TRUE(
        b_->compute_scales(a.get(), static_cast<int64_t>(amax.size()), Format::kE5M2, pow2, s.get(), inv.get()).ok());
    const auto scales = s.download();
    const auto inverses = inv.download();
    for (size_t i = 0; i < amax.size(); ++i) {
      EXPECT_EQ(scales[i], scale_from_amax(amax[i], Format::kE5M2, pow2)) << amax[i];
      EXPECT_EQ(inverses[i], inverse_scale(scales[i])) << amax[i];
    }
  }
}

// Delayed scaling kept in backend memory: every backend records as the host's
// delayed::record does, bit for bit, and writes each next scale with its inverse.
TEST_P(BackendContract, RecordDelayedAmaxesFollowsTheHostRule) {
  constexpr int kHistory = 3;
  const int64_t each = delayed::state_floats(kHistory);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  // Four casts (both formats, with and without power-of-two scales), eight steps whose
  // amaxes include 0, a NaN, an Inf and values that move the window's max both ways.
  const std::vector<std::vector<float>> steps = {{0.0f, 2.0f, 1e-3f, 3.0f},  {0.0f, 5.0f, nan, 3.5f},
                                                 {1.5f, 1.0f, 2e-3f, inf},   {0.5f, 1.0f, 4e-3f, 1.0f},
                                                 {0.25f, 1e-9f, 1e-3f, 1.0f}, {0.0f, 0.0f, 1e-3f, 1.0f},
                                                 {3e4f, 0.0f, 5e-4f, 2.0f},  {1.0f, 0.0f, 5e-4f, 1e5f}};
  const Format formats[] = {Format::kE4M3, Format::kE5M2, Format::kE4M3, Format::kE5M2};
  const bool pow2[] = {false, false, true, true};
  constexpr int64_t kCasts = 4, kStride = 8, kInverse = 4;

  std::vector<float> host_states(static_cast<size_t>(kCasts * each));
  for (int64_t i = 0; i < kCasts; ++i) {
    delayed::init_state(host_states.data() + i * each, kHistory, formats[i], pow2[i]);
  }
  Buffer<float> states(b_, host_states), amaxes(b_, kCasts), scales(b_, kCasts * kStride);
  for (size_t t = 0; t < steps.size(); ++t) {
    SCOPED_TRACE(::testing::Message() << "step " << t);
    amaxes.upload(steps[t]);
    DelayedRecordArgs r;
    r.states = states.get();
    r.count = kCasts;
    r.history_len = kHistory;
    r.amaxes = amaxes.get();
    r.scales = scales.get();
    r.scale_stride = kStride;
    r.inverse_offset = kInverse;
    ASSERT_TRUE(b_->record_delayed_amaxes(r).ok());
    for (int64_t i = 0; i < kCasts; ++i) {
      delayed::record(host_states.data() + i * each, steps[t][static_cast<size_t>(i)]);
    }

    const std::vector<float> got = states.download();
    for (size_t k = 0; k < got.size(); ++k) {
      EXPECT_EQ(float_bits(got[k]), float_bits(host_states[k])) << "state float " << k;
    }
    const std::vector<float> got_scales = scales.download();
    for (int64_t i = 0; i < kCasts; ++i) {
      const float* state = host_states.data() + i * each;
      const float want = state[delayed::kHasScale] != 0.0f ? state[delayed::kScale] : 1.0f;
      EXPECT_EQ(got_scales[static_cast<size_t>(i * kStride)], want) << "cast " << i;
      EXPECT_EQ(got_scales[static_cast<size_t>(i * kStride + kInverse)], inverse_scale(want)) << "cast " << i;
    }
  }
  // The rule itself on this sequence: cast 0 found a usable amax at step 2; cast 1 kept
  // the scale of 1e-9 once its window held only zeros; cast 3's last amax (1e5) was cast
  // with the scale of 2 and saturated.
  EXPECT_EQ(host_states[delayed::kHasScale], 1.0f);
  const float* cast1 = host_states.data() + each;
  EXPECT_EQ(cast1[delayed::kScale], scale_from_amax(1e-9f, Format::kE5M2, false));
  const float* cast3 = host_states.data() + 3 * each;
  EXPECT_EQ(cast3[delayed::kRangeUse], 1e5f * scale_from_amax(2.0f, Format::kE5M2, true) / 57344.0f);
  EXPECT_GT(cast3[delayed::kRangeUse], 1.0f);
}

TEST_P(BackendContract, RecordDelayedAmaxesRejectsBadArguments) {
  Buffer<float> states(b_, 16), amaxes(b_, 1), scales(b_, 8);
  DelayedRecordArgs r;
  r.states = states.get();
  r.count = 1;
  r.history_len = 2;
  r.amaxes = amaxes.get();
  r.scales = scales.get();
  DelayedRecordArgs bad = r;
  bad.history_len = 0;
  EXPECT_EQ(b_->record_delayed_amaxes(bad).code(), absl::StatusCode::kInvalidArgument);
  bad = r;
  bad.inverse_offset = 2;  // not inside the stride of 2
  EXPECT_EQ(b_->record_delayed_amaxes(bad).code(), absl::StatusCode::kInvalidArgument);
  bad = r;
  bad.amaxes = nullptr;
  EXPECT_EQ(b_->record_delayed_amaxes(bad).code(), absl::StatusCode::kInvalidArgument);
  bad = r;
  bad.count = -1;
  EXPECT_EQ(b_->record_delayed_amaxes(bad).code(), absl::StatusCode::kInvalidArgument);
}

// ---- casts --------------------------------------------------------------------------------

struct CastCase {
  int64_t rows, cols;
};

TEST_P(BackendContract, CastMatchesReferenceBitForBit) {
  for (CastCase shape : {CastCase{67, 131}, CastCase{128, 256}, CastCase{1, 1000}, CastCase{300, 3}}) {
    const int64_t rows = shape.rows, cols = shape.cols, n = rows * cols;
    const auto host = test_matrix(rows, cols, 3, true);
    const auto host_bf16 = testing::to_bf16(host);
    Buffer<float> x(b_, host);
    Buffer<uint16_t> xb(b_, host_bf16);
    for (Granularity g : {Granularity::kTensorwise, Granularity::kRowwise, Granularity::kColumnwise}) {
      const auto ns = static_cast<size_t>(scale_count(g, rows, cols));
      std::vector<float> scales(ns);
      for (size_t i = 0; i < ns; ++i) scales[i] = 0.5f + static_cast<float>(i % 13);
      Buffer<float> s(b_, scales);
      for (DType t : {DType::kFloat32, DType::kBFloat16}) {
        for (Format f : {Format::kE4M3, Format::kE5M2}) {
          for (bool sat : {true, false}) {
            for (int outputs : {1, 2, 3}) {  // bit 0: out, bit 1: out_t
              SCOPED_TRACE(::testing::Message() << rows << "x" << cols << " " << granularity_name(g) << " "
                                                << dtype_name(t) << " " << format_name(f) << " sat=" << sat
                                                << " outputs=" << outputs);
              const void* dev = t == DType::kFloat32 ? static_cast<const void*>(x.get()) : xb.get();
              const void* hst = t == DType::kFloat32 ? static_cast<const void*>(host.data()) : host_bf16.data();
              Buffer<uint8_t> out(b_, static_cast<size_t>(n)), out_t(b_, static_cast<size_t>(n));
              Buffer<float> amax(b_, ns);
              CastArgs a;
              a.input = {dev, t, rows, cols};
              a.format = f;
              a.granularity = g;
              a.scale = s.get();
              a.saturate = sat;
              a.out = outputs & 1 ? out.get() : nullptr;
              a.out_t = outputs & 2 ? out_t.get() : nullptr;
              a.amax_out = amax.get();
              ASSERT_TRUE(b_->cast(a).ok());

              std::vector<uint8_t> want(static_cast<size_t>(n)), want_t(static_cast<size_t>(n));
              std::vector<float> want_amax(ns);
              CastArgs r = a;
              r.input.data = hst;
              r.scale = scales.data();
              r.out = want.data();
              r.out_t = want_t.data();
              r.amax_out = want_amax.data();
              ASSERT_TRUE(ref().cast(r).ok());
              if (outputs & 1) {
                EXPECT_EQ(out.download(), want);
              }
              if (outputs & 2) {
                EXPECT_EQ(out_t.download(), want_t);
              }
              EXPECT_EQ(amax.download(), want_amax);
            }
          }
        }
      }
    }
  }
}

TEST_P(BackendContract, CastOfATallMatrixWalksEveryRowTile) {
  // Over a thousand row tiles of the GPU's transposing cast (64 x 64), ragged in both
  // directions, with every output and the amax at once.
  const int64_t rows = 1100 * 64 + 37, cols = 72, n = rows * cols;
  const auto host = test_matrix(rows, cols, 11, true);
  const auto host_bf16 = testing::to_bf16(host);
  Buffer<float> x(b_, host);
  Buffer<uint16_t> xb(b_, host_bf16);
  for (Granularity g : {Granularity::kTensorwise, Granularity::kRowwise}) {
    const auto ns = static_cast<size_t>(scale_count(g, rows, cols));
    std::vector<float> scales(ns);
    for (size_t i = 0; i < ns; ++i) scales[i] = 0.5f + static_cast<float>(i % 13);
    Buffer<float> s(b_, scales);
    for (DType t : {DType::kFloat32, DType::kBFloat16}) {
      SCOPED_TRACE(::testing::Message() << granularity_name(g) << " " << dtype_name(t));
      Buffer<uint8_t> out(b_, static_cast<size_t>(n)), out_t(b_, static_cast<size_t>(n));
      Buffer<float> amax(b_, ns);
      CastArgs a;
      a.input = {t == DType::kFloat32 ? static_cast<const void*>(x.get()) : xb.get(), t, rows, cols};
      a.format = Format::kE4M3;
      a.granularity = g;
      a.scale = s.get();
      a.out = out.get();
      a.out_t = out_t.get();
      a.amax_out = amax.get();
      ASSERT_TRUE(b_->cast(a).ok());
      std::vector<uint8_t> want(static_cast<size_t>(n)), want_t(static_cast<size_t>(n));
      std::vector<float> want_amax(ns);
      CastArgs r = a;
      r.input.data = t == DType::kFloat32 ? static_cast<const void*>(host.data()) : host_bf16.data();
      r.scale = scales.data();
      r.out = want.data();
      r.out_t = want_t.data();
      r.amax_out = want_amax.data();
      ASSERT_TRUE(ref().cast(r).ok());
      EXPECT_TRUE(out.download() == want);
      EXPECT_TRUE(out_t.download() == want_t);
      EXPECT_EQ(amax.download(), want_amax);
    }
  }
}

TEST_P(BackendContract, QuantizeIsAmaxThenScaleThenCast) {
  // With and without the transpose (the GPU's tiled and flat casts, which derive
  // tensorwise and rowwise scales from the amaxes themselves), on a shape whose rows end
  // inside the flat cast's 16-element chunks too.
  for (CastCase shape : {CastCase{96, 160}, CastCase{37, 53}}) {
    const int64_t rows = shape.rows, cols = shape.cols;
    const auto host = test_matrix(rows, cols, 4, false);
    Buffer<float> x(b_, host);
    for (Granularity g : {Granularity::kTensorwise, Granularity::kRowwise, Granularity::kColumnwise}) {
      for (bool pow2 : {false, true}) {
        for (bool transposed : {true, false}) {
          SCOPED_TRACE(::testing::Message() << rows << "x" << cols << " " << granularity_name(g) << " pow2=" << pow2
                                            << " transposed=" << transposed);
          const auto ns = static_cast<size_t>(scale_count(g, rows, cols));
          Buffer<uint8_t> out(b_, static_cast<size_t>(rows * cols)), out_t(b_, static_cast<size_t>(rows * cols));
          Buffer<float> scale(b_, ns), inv(b_, ns), amax(b_, ns);
          QuantizeArgs q;
          q.input = {x.get(), DType::kFloat32, rows, cols};
          q.granularity = g;
          q.pow2_scale = pow2;
          q.out = out.get();
          q.out_t = transposed ? out_t.get() : nullptr;
          q.scale_out = scale.get();
          q.inv_scale_out = inv.get();
          q.amax_out = amax.get();
          ASSERT_TRUE(b_->quantize(q).ok());

          std::vector<uint8_t> want(static_cast<size_t>(rows * cols)), want_t(static_cast<size_t>(rows * cols));
          std::vector<float> want_scale(ns), want_inv(ns), want_amax(ns);
          QuantizeArgs r = q;
          r.input.data = host.data();
          r.out = want.data();
          r.out_t = transposed ? want_t.data() : nullptr;
          r.scale_out = want_scale.data();
          r.inv_scale_out = want_inv.data();
          r.amax_out = want_amax.data();
          ASSERT_TRUE(ref().quantize(r).ok());
          EXPECT_EQ(out.download(), want);
          if (transposed) {
            EXPECT_EQ(out_t.download(), want_t);
          }
          EXPECT_EQ(scale.download(), want_scale);
          EXPECT_EQ(inv.download(), want_inv);
          EXPECT_EQ(amax.download(), want_amax);
        }
      }
    }
  }
}

TEST_P(BackendContract, QuantizeFromRowAmaxesEqualsQuantizeFromTheInput) {
  const int64_t rows = 72, cols = 136;
  for (int variant = 0; variant < 4; ++variant) {
    const bool nan = variant >= 2;
    const DType dtype = variant % 2 == 0 ? DType::kFloat32 : DType::kBFloat16;
    auto host = test_matrix(rows, cols, 21, true);
    if (nan) host[static_cast<size_t>(5 * cols + 7)] = std::numeric_limits<float>::quiet_NaN();
    Buffer<uint16_t> x16(b_, testing::to_bf16(host));
    Buffer<float> x32(b_, host);
    const MatrixRef x{dtype == DType::kFloat32 ? static_cast<const void*>(x32.get()) : x16.get(), dtype, rows, cols};
    Buffer<float> row_amax(b_, static_cast<size_t>(rows));
    ASSERT_TRUE(b_->amax(x, Granularity::kRowwise, row_amax.get()).ok());
    for (Granularity g : {Granularity::kTensorwise, Granularity::kRowwise}) {
      for (bool pow2 : {false, true}) {
        SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << " " << granularity_name(g) << " pow2=" << pow2
                                          << " nan=" << nan);
        const auto ns = static_cast<size_t>(scale_count(g, rows, cols));
        const auto n = static_cast<size_t>(rows * cols);
        Buffer<uint8_t> out(b_, n), out_t(b_, n), want(b_, n), want_t(b_, n);
        Buffer<float> scale(b_, ns), amax(b_, ns), want_scale(b_, ns), want_amax(b_, ns);
        QuantizeArgs q;
        q.input = x;
        q.format = pow2 ? Format::kE5M2 : Format::kE4M3;
        q.granularity = g;
        q.pow2_scale = pow2;
        q.out = want.get();
        q.out_t = want_t.get();
        q.scale_out = want_scale.get();
        q.amax_out = want_amax.get();
        ASSERT_TRUE(b_->quantize(q).ok());
        q.out = out.get();
        q.out_t = out_t.get();
        q.scale_out = scale.get();
        q.amax_out = amax.get();
        q.row_amax = row_amax.get();
        ASSERT_TRUE(b_->quantize(q).ok());
        EXPECT_EQ(out.download(), want.download());
        EXPECT_EQ(out_t.download(), want_t.download());
        const auto got_scale = scale.download(), wanted_scale = want_scale.download();
        const auto got_amax = amax.download(), wanted_amax = want_amax.download();
        ASSERT_EQ(got_amax.size(), wanted_amax.size());
        for (size_t i = 0; i < got_amax.size(); ++i) {
          // NaN != NaN: compare bits.
          EXPECT_EQ(float_bits(got_amax[i]), float_bits(wanted_amax[i])) << "amax " << i;
          EXPECT_EQ(float_bits(got_scale[i]), float_bits(wanted_scale[i])) << "scale " << i;
        }
      }
    }
    // Columnwise: a column's amax is not to be had from the rows'.
    const std::vector<uint8_t> sentinel(static_cast<size_t>(rows * cols), 0xAB);
    Buffer<uint8_t> out(b_, sentinel);
    Buffer<float> scale(b_, static_cast<size_t>(cols));
    QuantizeArgs q;
    q.input = x;
    q.granularity = Granularity::kColumnwise;
    q.out = out.get();
    q.scale_out = scale.get();
    q.row_amax = row_amax.get();
    const absl::Status s = b_->quantize(q);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(std::string(s.message()).find("row_amax"), std::string::npos) << s.message();
    EXPECT_EQ(out.download(), sentinel) << "a rejected quantize wrote its output";
  }
}

// inv_scale_out holds each scale's dequantization factor, bit for bit what dequantizing
// the code of 1.0 with that scale gives (what Float8Linear computed with a kernel of its
// own before), for every granularity, format and scaling, an all-zero row and a NaN.
TEST_P(BackendContract, QuantizeWritesTheInverseScalesDequantizeWouldGive) {
  const int64_t rows = 40, cols = 72;
  auto host = test_matrix(rows, cols, 23, true);
  for (int64_t c = 0; c < cols; ++c) host[static_cast<size_t>(3 * cols + c)] = 0.0f;
  host[static_cast<size_t>(9 * cols + 4)] = std::numeric_limits<float>::quiet_NaN();
  Buffer<float> x(b_, host);
  Buffer<uint8_t> one(b_, std::vector<uint8_t>{float_to_fp8(1.0f, Format::kE4M3, true)});
  for (Granularity g : {Granularity::kTensorwise, Granularity::kRowwise, Granularity::kColumnwise}) {
    for (bool pow2 : {false, true}) {
      SCOPED_TRACE(::testing::Message() << granularity_name(g) << " pow2=" << pow2);
      const auto ns = static_cast<size_t>(scale_count(g, rows, cols));
      Buffer<uint8_t> out(b_, static_cast<size_t>(rows * cols));
      Buffer<float> scale(b_, ns), inv(b_, ns), by_dequantize(b_, 1);
      QuantizeArgs q;
      q.input = {x.get(), DType::kFloat32, rows, cols};
      q.format = pow2 ? Format::kE5M2 : Format::kE4M3;
      q.granularity = g;
      q.pow2_scale = pow2;
      q.out = out.get();
      q.scale_out = scale.get();
      q.inv_scale_out = inv.get();
      ASSERT_TRUE(b_->quantize(q).ok());
      const auto scales = scale.download(), inverses = inv.download();
      for (size_t i = 0; i < ns; ++i) {
        EXPECT_EQ(float_bits(inverses[i]), float_bits(inverse_scale(scales[i]))) << "scale " << i;
        DequantizeArgs d;
        d.input = one.get();
        d.format = Format::kE4M3;
        d.rows = 1;
        d.cols = 1;
        d.scale = scale.get() + i;
        d.out = by_dequantize.get();
        ASSERT_TRUE(b_->dequantize(d).ok());
        EXPECT_EQ(float_bits(inverses[i]), float_bits(by_dequantize.download()[0])) << "scale " << i;
      }
    }
  }
}

TEST_P(BackendContract, DequantizeMatchesReferenceBitForBit) {
  const int64_t rows = 33, cols = 70;
  std::vector<uint8_t> codes(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint8_t>(i * 37 + 11);
  Buffer<uint8_t> q(b_, codes);
  for (Granularity g : {Granularity::kTensorwise, Granularity::kRowwise, Granularity::kColumnwise}) {
    const auto ns = static_cast<size_t>(scale_count(g, rows, cols));
    std::vector<float> scales(ns);
    for (size_t i = 0; i < ns; ++i) scales[i] = 0.75f * static_cast<float>(i + 1);
    Buffer<float> s(b_, scales);
    for (Format f : {Format::kE4M3, Format::kE5M2}) {
      for (DType t : {DType::kFloat32, DType::kBFloat16}) {
        SCOPED_TRACE(::testing::Message() << granularity_name(g) << " " << format_name(f) << " " << dtype_name(t));
        DequantizeArgs a{q.get(), f, rows, cols, g, s.get(), t, nullptr};
        Buffer<uint8_t> out(b_, codes.size() * dtype_size(t));
        a.out = out.get();
        ASSERT_TRUE(b_->dequantize(a).ok());
        std::vector<uint8_t> want(codes.size() * dtype_size(t));
        DequantizeArgs r{codes.data(), f, rows, cols, g, scales.data(), t, want.data()};
        ASSERT_TRUE(ref().dequantize(r).ok());
        EXPECT_EQ(out.download(), want);
      }
    }
  }
}

TEST_P(BackendContract, ConvertBetweenFloat32AndBFloat16) {
  auto host = test_matrix(1, 5000, 5, true);
  host[17] = std::numeric_limits<float>::quiet_NaN();
  Buffer<float> x(b_, host);
  Buffer<uint16_t> h(b_, host.size());
  Buffer<float> back(b_, host.size());
  ASSERT_TRUE(b_->convert(x.get(), DType::kFloat32, h.get(), DType::kBFloat16, 5000).ok());
  ASSERT_TRUE(b_->convert(h.get(), DType::kBFloat16, back.get(), DType::kFloat32, 5000).ok());
  const auto hv = h.download();
  const auto bv = back.download();
  for (size_t i = 0; i < host.size(); ++i) {
    ASSERT_EQ(hv[i], float_to_bf16(host[i])) << i;
    if (i == 17) {
      EXPECT_TRUE(std::isnan(bv[i]));
    } else {
      ASSERT_EQ(bv[i], bf16_to_float(hv[i])) << i;
    }
  }
}

// ---- scaled GEMM ----------------------------------------------------------------------------

// Quantizes a [rows, k] fp32 matrix on the backend at the given granularity and returns
// (codes, inverse scales) ready for scaled_gemm.
struct Quantized {
  std::unique_ptr<Buffer<uint8_t>> codes;
  std::unique_ptr<Buffer<float>> inv_scale;
  ScaledOperand operand() const { return {codes->get(), format, granularity, inv_scale->get()}; }
  Format format;
  Granularity granularity;
};

Quantized quantize_operand(Backend* b, const std::vector<float>& host, int64_t rows, int64_t k, Format f,
                           Granularity g) {
  Quantized out;
  out.format = f;
  out.granularity = g;
  Buffer<float> x(b, host);
  const auto ns = static_cast<size_t>(scale_count(g, rows, k));
  out.codes = std::make_unique<Buffer<uint8_t>>(b, static_cast<size_t>(rows * k));
  Buffer<float> scale(b, ns);
  QuantizeArgs q;
  q.input = {x.get(), DType::kFloat32, rows, k};
  q.format = f;
  q.granularity = g;
  q.out = out.codes->get();
  q.scale_out = scale.get();
  EXPECT_TRUE(b->quantize(q).ok());
  auto s = scale.download();
  for (auto& v : s) v = 1.0f / v;
  out.inv_scale = std::make_unique<Buffer<float>>(b, s);
  return out;
}

std::vector<float> run_gemm(Backend* b, int64_t m, int64_t n, int64_t k, const Quantized& qa, const Quantized& qb,
                            bool fast_accum = false) {
  Buffer<float> out(b, static_cast<size_t>(m * n));
  ScaledGemmArgs g;
  g.m = m;
  g.n = n;
  g.k = k;
  g.a = qa.operand();
  g.b = qb.operand();
  g.out = out.get();
  g.fast_accum = fast_accum;
  const auto s = b->scaled_gemm(g);
  EXPECT_TRUE(s.ok()) << s;
  return out.download();
}

TEST_P(BackendContract, ScaledGemmReachesTorchaoAccuracyOnGaussianData) {
  const int64_t m = 128, n = 96, k = 256;
  const auto a = gaussian(static_cast<size_t>(m * k), 10);
  const auto w = gaussian(static_cast<size_t>(n * k), 11, 0.02f);
  const auto want = testing::matmul_nt_fp64(a, w, m, n, k);
  for (Granularity g : {Granularity::kTensorwise, Granularity::kRowwise}) {
    for (bool fast : {false, true}) {
      const auto qa = quantize_operand(b_, a, m, k, Format::kE4M3, g);
      const auto qb = quantize_operand(b_, w, n, k, Format::kE4M3, g);
      const double db = testing::sqnr_db(want, run_gemm(b_, m, n, k, qa, qb, fast));
      EXPECT_GE(db, 25.0) << granularity_name(g) << " fast_accum=" << fast;
    }
  }
}

// fp8.pad_inner_dim on the host backends: a GEMM whose dimensions are not multiples of 16
// computes exactly what zero padding them to 16 would (zeros change no amax, so no scale,
// and add nothing to a sum), so the host backends need no padded copy. CUDA refuses such
// shapes (cuBLASLt), and the job validator with them.
TEST_P(BackendContract, ARaggedGemmEqualsItsZeroPaddedProductBitForBit) {
  if (b_->is_cuda()) GTEST_SKIP() << "cuBLASLt's fp8 GEMMs take multiples of 16 only";
  const int64_t m = 24, n = 40, k = 40, padded_k = 48;
  const auto a = gaussian(static_cast<size_t>(m * k), 30);
  const auto w = gaussian(static_cast<size_t>(n * k), 31, 0.02f);
  auto pad = [&](const std::vector<float>& x, int64_t rows) {
    std::vector<float> out(static_cast<size_t>(rows * padded_k), 0.0f);
    for (int64_t r = 0; r < rows; ++r) {
      std::copy_n(x.begin() + r * k, k, out.begin() + r * padded_k);
    }
    return out;
  };
  for (Granularity g : {Granularity::kTensorwise, Granularity::kRowwise}) {
    SCOPED_TRACE(granularity_name(g));
    const auto ragged = run_gemm(b_, m, n, k, quantize_operand(b_, a, m, k, Format::kE4M3, g),
                                 quantize_operand(b_, w, n, k, Format::kE4M3, g));
    const auto padded = run_gemm(b_, m, n, padded_k, quantize_operand(b_, pad(a, m), m, padded_k, Format::kE4M3, g),
                                 quantize_operand(b_, pad(w, n), n, padded_k, Format::kE4M3, g));
    ASSERT_EQ(ragged.size(), padded.size());
    for (size_t i = 0; i < ragged.size(); ++i) ASSERT_EQ(float_bits(ragged[i]), float_bits(padded[i])) << i;
  }
}

// Worst per-row SQNR of an e4m3 GEMM whose A rows span `spread` in magnitude
// (geometrically, 1 .. spread), at the given scaling granularity of both operands.
double worst_row_sqnr(Backend* b, double spread, Granularity g) {
  const int64_t m = 64, n = 64, k = 128;
  auto a = gaussian(static_cast<size_t>(m * k), 20);
  for (int64_t i = 0; i < m; ++i) {
    const auto row_scale = static_cast<float>(std::pow(spread, static_cast<double>(i) / static_cast<double>(m - 1)));
    for (int64_t j = 0; j < k; ++j) a[i * k + j] *= row_scale;
  }
  const auto w = gaussian(static_cast<size_t>(n * k), 21);
  const auto want = testing::matmul_nt_fp64(a, w, m, n, k);
  const auto qa = quantize_operand(b, a, m, k, Format::kE4M3, g);
  const auto qb = quantize_operand(b, w, n, k, Format::kE4M3, g);
  const auto got = run_gemm(b, m, n, k, qa, qb);
  double worst = 1e9;
  for (int64_t i = 0; i < m; ++i) {
    worst = std::min(worst, testing::sqnr_db(want, got, static_cast<size_t>(i * n), static_cast<size_t>((i + 1) * n)));
  }
  return worst;
}

// e4m3 spans 2^-9 .. 448, about 18 binades, so rows 1000x (10 binades) apart still all
// quantise well with one tensor scale: measured worst rows 25.7 dB tensorwise, 25.6 dB
// rowwise. Past the format's range (1e5x) the small rows flush towards zero under a
// tensor scale while rowwise scales keep every row at full precision.
TEST_P(BackendContract, AxiswiseScalingKeepsEveryRowAccurateAcrossLargeMagnitudeSpreads) {
  EXPECT_GE(worst_row_sqnr(b_, 1e3, Granularity::kRowwise), 25.0);
  EXPECT_GE(worst_row_sqnr(b_, 1e3, Granularity::kTensorwise), 25.0);
  const double rowwise = worst_row_sqnr(b_, 1e5, Granularity::kRowwise);
  const double tensorwise = worst_row_sqnr(b_, 1e5, Granularity::kTensorwise);
  EXPECT_GE(rowwise, 25.0);
  EXPECT_GE(rowwise - tensorwise, 10.0) << "rowwise " << rowwise << " dB, tensorwise " << tensorwise << " dB";
}

TEST_P(BackendContract, OutliersSaturateInsteadOfOverflowing) {
  // A stale (delayed) scale computed for amax 1 meets data with outliers 1e6 larger.
  const int64_t m = 32, n = 32, k = 64;
  auto a = gaussian(static_cast<size_t>(m * k), 30, 0.3f);
  a[5] = 1e6f;
  a[77] = -3e7f;
  Buffer<float> x(b_, a);
  const float scale = scale_from_amax(1.0f, Format::kE4M3, false);
  Buffer<float> s(b_, std::vector<float>{scale});
  Buffer<uint8_t> q(b_, a.size());
  CastArgs c;
  c.input = {x.get(), DType::kFloat32, m, k};
  c.scale = s.get();
  c.out = q.get();
  ASSERT_TRUE(b_->cast(c).ok());
  const auto codes = q.download();
  EXPECT_EQ(codes[5], 0x7E);   // +448
  EXPECT_EQ(codes[77], 0xFE);  // -448
  Quantized qa;
  qa.format = Format::kE4M3;
  qa.granularity = Granularity::kTensorwise;
  qa.codes = std::make_unique<Buffer<uint8_t>>(b_, codes);
  qa.inv_scale = std::make_unique<Buffer<float>>(b_, std::vector<float>{1.0f / scale});
  const auto w = gaussian(static_cast<size_t>(n * k), 31);
  const auto qb = quantize_operand(b_, w, n, k, Format::kE4M3, Granularity::kTensorwise);
  for (float v : run_gemm(b_, m, n, k, qa, qb)) ASSERT_TRUE(std::isfinite(v));
}

// The fast paths accumulate in fp32; the reference accumulates in fp64. Their results
// agree to fp32 accumulation error, for every option of the GEMM.
TEST_P(BackendContract, ScaledGemmMatchesReferenceForEveryOption) {
  const int64_t m = 48, n = 80, k = 96;
  const auto a = gaussian(static_cast<size_t>(m * k), 40);
  const auto w = gaussian(static_cast<size_t>(n * k), 41);
  const auto bias = gaussian(static_cast<size_t>(n), 42);
  const auto init = gaussian(static_cast<size_t>(m * n), 43);
  struct Case {
    Format fa, fb;
    Granularity ga, gb;
    DType out;
    bool bias, accumulate;
  };
  const Case cases[] = {
      {Format::kE4M3, Format::kE4M3, Granularity::kTensorwise, Granularity::kTensorwise, DType::kFloat32, false, false},
      {Format::kE4M3, Format::kE4M3, Granularity::kRowwise, Granularity::kRowwise, DType::kFloat32, true, false},
      {Format::kE4M3, Format::kE4M3, Granularity::kRowwise, Granularity::kTensorwise, DType::kBFloat16, false, false},
      {Format::kE5M2, Format::kE4M3, Granularity::kTensorwise, Granularity::kRowwise, DType::kFloat32, false, true},
      {Format::kE4M3, Format::kE5M2, Granularity::kTensorwise, Granularity::kTensorwise, DType::kBFloat16, true, false},
      {Format::kE4M3, Format::kE4M3, Granularity::kTensorwise, Granularity::kTensorwise, DType::kFloat32, true, true},
      // A backward's grad_input added into a bf16 buffer its sibling layer wrote.
      {Format::kE5M2, Format::kE4M3, Granularity::kTensorwise, Granularity::kTensorwise, DType::kBFloat16, false, true},
      {Format::kE4M3, Format::kE4M3, Granularity::kRowwise, Granularity::kRowwise, DType::kBFloat16, false, true},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(::testing::Message() << format_name(c.fa) << "x" << format_name(c.fb) << " " << granularity_name(c.ga)
                                      << "/" << granularity_name(c.gb) << " out=" << dtype_name(c.out)
                                      << " bias=" << c.bias << " acc=" << c.accumulate);
    const auto qa = quantize_operand(b_, a, m, k, c.fa, c.ga);
    const auto qb = quantize_operand(b_, w, n, k, c.fb, c.gb);
    const std::vector<uint8_t> init_bytes = stored_bytes(init, c.out);
    Buffer<uint8_t> out(b_, init_bytes);
    Buffer<float> bias_dev(b_, bias);
    ScaledGemmArgs g;
    g.m = m;
    g.n = n;
    g.k = k;
    g.a = qa.operand();
    g.b = qb.operand();
    g.out_dtype = c.out;
    g.out = out.get();
    g.bias = c.bias ? bias_dev.get() : nullptr;
    g.accumulate = c.accumulate;
    ASSERT_TRUE(b_->scaled_gemm(g).ok());
    const auto got_bytes = out.download();

    // The same GEMM on the reference, from the same codes and scales.
    const auto codes_a = qa.codes->download(), codes_b = qb.codes->download();
    const auto inv_a = qa.inv_scale->download(), inv_b = qb.inv_scale->download();
    std::vector<uint8_t> want_bytes = init_bytes;
    ScaledGemmArgs r = g;
    r.a.data = codes_a.data();
    r.a.inv_scale = inv_a.data();
    r.b.data = codes_b.data();
    r.b.inv_scale = inv_b.data();
    r.out = want_bytes.data();
    r.bias = c.bias ? bias.data() : nullptr;
    ASSERT_TRUE(ref().scaled_gemm(r).ok());

    const std::vector<float> got = widened(got_bytes, c.out), want_values = widened(want_bytes, c.out);
    const std::vector<double> want(want_values.begin(), want_values.end());
    // bf16 output: both round to bf16 (2^-9 relative), possibly on different sides.
    // Hopper's fp8 tensor cores keep fewer bits than fp32 in their accumulator within
    // each K block (DeepSeek-V3 measured about 14), so the GPU's fp32 result sits ~1e-4
    // from the exact sum; the CPU's is fp32 exact.
    const double fp32_tol = b_->is_cuda() ? 5e-4 : 1e-5;
    const double tol = c.out == DType::kFloat32 ? fp32_tol : 8e-3;
    EXPECT_LT(testing::relative_error(want, got), tol);
  }
}

// An addend (cuBLASLt's C apart from D) is added once, in the epilogue: out = result +
// addend gives what accumulating onto a copy of the addend gives, the addend is left as it
// was, and whatever out held before is ignored. Both the fp8 and the high-precision GEMM,
// with and without bias (the GPU adds an fp32 output's bias by filling out first), and an
// empty sum (k = 0).
TEST_P(BackendContract, GemmsAddAnAddendOnceInTheirEpilogue) {
  const int64_t m = 48, n = 80;
  const auto bias = gaussian(static_cast<size_t>(n), 62);
  const auto addend = gaussian(static_cast<size_t>(m * n), 63);
  const auto stale = gaussian(static_cast<size_t>(m * n), 64);
  struct Case {
    Granularity g;
    DType out;
    bool bias;
    int64_t k;
  };
  const Case cases[] = {
      {Granularity::kTensorwise, DType::kBFloat16, false, 96}, {Granularity::kRowwise, DType::kBFloat16, false, 96},
      {Granularity::kTensorwise, DType::kFloat32, true, 96},   {Granularity::kRowwise, DType::kFloat32, true, 96},
      {Granularity::kTensorwise, DType::kBFloat16, true, 96},  {Granularity::kTensorwise, DType::kFloat32, true, 0},
  };
  // Same backend, same GEMM: with an addend, and accumulating onto a copy of it. The CPU
  // paths run the same epilogue both ways (bit for bit); cuBLASLt may pick another kernel
  // for a C apart from D, so the GPU is held to the reference's tolerance instead.
  const auto expect_same = [&](const std::vector<uint8_t>& got, const std::vector<uint8_t>& want, DType t) {
    if (!b_->is_cuda()) {
      EXPECT_EQ(got, want);
      return;
    }
    const std::vector<float> w = widened(want, t);
    EXPECT_LT(testing::relative_error(std::vector<double>(w.begin(), w.end()), widened(got, t)),
              t == DType::kFloat32 ? 5e-4 : 8e-3);
  };

  for (const auto& c : cases) {
    SCOPED_TRACE(::testing::Message() << "scaled_gemm " << granularity_name(c.g) << " out=" << dtype_name(c.out)
                                      << " bias=" << c.bias << " k=" << c.k);
    const int64_t k_data = std::max<int64_t>(c.k, 16);
    const auto qa = quantize_operand(b_, gaussian(static_cast<size_t>(m * k_data), 60), m, k_data, Format::kE4M3, c.g);
    const auto qb = quantize_operand(b_, gaussian(static_cast<size_t>(n * k_data), 61), n, k_data, Format::kE4M3, c.g);
    Buffer<uint8_t> add_dev(b_, stored_bytes(addend, c.out));
    Buffer<uint8_t> out(b_, stored_bytes(stale, c.out));
    Buffer<uint8_t> acc(b_, stored_bytes(addend, c.out));
    Buffer<float> bias_dev(b_, bias);
    ScaledGemmArgs g;
    g.m = m;
    g.n = n;
    g.k = c.k;
    g.a = qa.operand();
    g.b = qb.operand();
    g.out_dtype = c.out;
    g.out = out.get();
    g.bias = c.bias ? bias_dev.get() : nullptr;
    g.addend = add_dev.get();
    ASSERT_TRUE(b_->scaled_gemm(g).ok());
    ScaledGemmArgs accumulated = g;
    accumulated.addend = nullptr;
    accumulated.accumulate = true;
    accumulated.out = acc.get();
    ASSERT_TRUE(b_->scaled_gemm(accumulated).ok());
    expect_same(out.download(), acc.download(), c.out);
    EXPECT_EQ(add_dev.download(), stored_bytes(addend, c.out)) << "the addend is read, never written";
  }

  const int64_t k = 64;
  const auto a = gaussian(static_cast<size_t>(m * k), 65);
  const auto b = gaussian(static_cast<size_t>(k * n), 66);
  for (DType in : {DType::kFloat32, DType::kBFloat16}) {
    for (DType out_t : {DType::kFloat32, DType::kBFloat16}) {
      for (bool with_bias : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "gemm in=" << dtype_name(in) << " out=" << dtype_name(out_t)
                                          << " bias=" << with_bias);
        Buffer<uint8_t> a_dev(b_, stored_bytes(a, in)), b_dev(b_, stored_bytes(b, in));
        Buffer<uint8_t> add_dev(b_, stored_bytes(addend, out_t));
        Buffer<uint8_t> out(b_, stored_bytes(stale, out_t));
        Buffer<uint8_t> acc(b_, stored_bytes(addend, out_t));
        Buffer<float> bias_dev(b_, bias);
        GemmArgs g;
        g.m = m;
        g.n = n;
        g.k = k;
        g.a = a_dev.get();
        g.b = b_dev.get();
        g.in_dtype = in;
        g.out_dtype = out_t;
        g.out = out.get();
        g.beta = 1.0f;
        g.addend = add_dev.get();
        g.bias = with_bias ? bias_dev.get() : nullptr;
        ASSERT_TRUE(b_->gemm(g).ok());
        GemmArgs accumulated = g;
        accumulated.addend = nullptr;
        accumulated.out = acc.get();
        ASSERT_TRUE(b_->gemm(accumulated).ok());
        expect_same(out.download(), acc.download(), out_t);
        EXPECT_EQ(add_dev.download(), stored_bytes(addend, out_t)) << "the addend is read, never written";
      }
    }
  }
}

TEST_P(BackendContract, ScaledGemmRefusesAnAddendWithAccumulate) {
  const int64_t m = 16, n = 16, k = 16;
  const auto qa = quantize_operand(b_, gaussian(static_cast<size_t>(m * k), 67), m, k, Format::kE4M3,
                                   Granularity::kTensorwise);
  const auto qb = quantize_operand(b_, gaussian(static_cast<size_t>(n * k), 68), n, k, Format::kE4M3,
                                   Granularity::kTensorwise);
  Buffer<float> out(b_, static_cast<size_t>(m * n)), addend(b_, static_cast<size_t>(m * n));
  ScaledGemmArgs g;
  g.m = m;
  g.n = n;
  g.k = k;
  g.a = qa.operand();
  g.b = qb.operand();
  g.out = out.get();
  g.addend = addend.get();
  g.accumulate = true;
  const absl::Status s = b_->scaled_gemm(g);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("addend"), std::string::npos) << s.message();
}

// ---- high-precision GEMM ---------------------------------------------------------------------

TEST_P(BackendContract, HighPrecisionGemmMatchesReferenceForEveryLayout) {
  const int64_t m = 48, n = 64, k = 80;
  const auto a = gaussian(static_cast<size_t>(m * k), 50);
  const auto b = gaussian(static_cast<size_t>(k * n), 51);
  const auto bias = gaussian(static_cast<size_t>(n), 52);
  const auto init = gaussian(static_cast<size_t>(m * n), 53);
  for (DType in : {DType::kFloat32, DType::kBFloat16}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        for (float beta : {0.0f, 1.0f}) {
          SCOPED_TRACE(::testing::Message() << dtype_name(in) << " ta=" << ta << " tb=" << tb << " beta=" << beta);
          const bool bf = in == DType::kBFloat16;
          Buffer<float> af(b_, a), bfl(b_, b);
          Buffer<uint16_t> ah(b_, testing::to_bf16(a)), bh(b_, testing::to_bf16(b));
          Buffer<float> out(b_, init), bias_dev(b_, bias);
          GemmArgs g;
          g.m = m;
          g.n = n;
          g.k = k;
          g.a = bf ? static_cast<const void*>(ah.get()) : af.get();
          g.b = bf ? static_cast<const void*>(bh.get()) : bfl.get();
          g.in_dtype = in;
          g.trans_a = ta;
          g.trans_b = tb;
          g.out = out.get();
          g.alpha = 0.5f;
          g.beta = beta;
          g.bias = bias_dev.get();
          ASSERT_TRUE(b_->gemm(g).ok());

          const auto ah_host = testing::to_bf16(a);
          const auto bh_host = testing::to_bf16(b);
          std::vector<float> want = init;
          GemmArgs r = g;
          r.a = bf ? static_cast<const void*>(ah_host.data()) : a.data();
          r.b = bf ? static_cast<const void*>(bh_host.data()) : b.data();
          r.out = want.data();
          r.bias = bias.data();
          ASSERT_TRUE(ref().gemm(r).ok());
          // The layout flags reinterpret the same buffers, so the values differ per case;
          // the reference defines what each means.
          EXPECT_LT(testing::relative_error(std::vector<double>(want.begin(), want.end()), out.download()), 1e-5);
        }
      }
    }
  }
}

// ---- byte transpose ------------------------------------------------------------------------

// dst [cols, rows] = src [rows, cols]ᵀ, the plain loop every backend must match byte for byte.
std::vector<uint8_t> naive_transpose(const std::vector<uint8_t>& src, int64_t rows, int64_t cols) {
  std::vector<uint8_t> dst(src.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) dst[static_cast<size_t>(c * rows + r)] = src[static_cast<size_t>(r * cols + c)];
  }
  return dst;
}

// Every byte value, in an order that differs from row to row and column to column, so a
// misplaced byte cannot land on an equal one by chance except rarely.
std::vector<uint8_t> byte_pattern(int64_t rows, int64_t cols, uint32_t seed) {
  std::vector<uint8_t> v(static_cast<size_t>(rows * cols));
  uint32_t x = seed * 2654435761u + 1;
  for (auto& b : v) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<uint8_t>(x >> 24);
  }
  return v;
}

// ---- memory ---------------------------------------------------------------------------------

TEST_P(BackendContract, MemoryStatsCountLiveBytesAndTheirPeak) {
  const MemoryStats before = b_->memory_stats();
  b_->reset_peak_memory();
  EXPECT_EQ(b_->memory_stats().peak_allocated, before.allocated);

  absl::StatusOr<void*> small = b_->allocate(1000);
  absl::StatusOr<void*> large = b_->allocate(3000);
  ASSERT_TRUE(small.ok() && large.ok());
  MemoryStats s = b_->memory_stats();
  EXPECT_EQ(s.allocated, before.allocated + 4000);
  EXPECT_EQ(s.peak_allocated, before.allocated + 4000);
  EXPECT_GE(s.reserved, s.allocated);

  b_->deallocate(*large);
  s = b_->memory_stats();
  EXPECT_EQ(s.allocated, before.allocated + 1000);
  EXPECT_EQ(s.peak_allocated, before.allocated + 4000) << "the peak outlives the block";

  b_->reset_peak_memory();
  EXPECT_EQ(b_->memory_stats().peak_allocated, before.allocated + 1000);
  b_->deallocate(*small);
  b_->deallocate(nullptr);  // a no-op, counted as nothing
  EXPECT_EQ(b_->memory_stats().allocated, before.allocated);
  ASSERT_TRUE(b_->synchronize().ok());
}

// queue_copy_from_host: the host buffer is free on return (each upload below reuses it at
// once), uploads land in the order queued (the later of two to one place wins), work
// queued after reads them without a synchronize in between, and several hundred uploads
// in flight (what a training step queues) plus one large one all arrive.
TEST_P(BackendContract, QueuedUploadsLandInOrderAndLeaveTheHostBufferFree) {
  constexpr int kUploads = 300;
  constexpr int kEach = 64;
  Buffer<float> dst(b_, static_cast<size_t>(kUploads) * kEach);
  std::vector<float> staging(kEach);
  for (int i = 0; i < kUploads; ++i) {
    std::fill(staging.begin(), staging.end(), static_cast<float>(i));
    ASSERT_TRUE(b_->queue_copy_from_host(dst.get() + i * kEach, staging.data(), sizeof(float) * kEach).ok());
    std::fill(staging.begin(), staging.end(), -1.0f);  // free at once: this must not arrive
  }
  // Two uploads to one place: the later wins.
  std::fill(staging.begin(), staging.end(), 1000.0f);
  ASSERT_TRUE(b_->queue_copy_from_host(dst.get(), staging.data(), sizeof(float) * kEach).ok());
  std::fill(staging.begin(), staging.end(), 2000.0f);
  ASSERT_TRUE(b_->queue_copy_from_host(dst.get(), staging.data(), sizeof(float) * kEach).ok());
  // A kernel queued after an upload reads it.
  const std::vector<float> x = gaussian(3 << 18, 17);  // 3 MiB: larger than any small block
  Buffer<float> device_x(b_, x.size());
  ASSERT_TRUE(b_->queue_copy_from_host(device_x.get(), x.data(), sizeof(float) * x.size()).ok());
  Buffer<float> amax(b_, 1);
  ASSERT_TRUE(
      b_->amax(MatrixRef{device_x.get(), DType::kFloat32, 1, static_cast<int64_t>(x.size())}, Granularity::kTensorwise,
               amax.get())
          .ok());
  ASSERT_TRUE(b_->synchronize().ok());

  const std::vector<float> got = dst.download();
  for (int i = 0; i < kUploads; ++i) {
    const float want = i == 0 ? 2000.0f : static_cast<float>(i);
    for (int j = 0; j < kEach; ++j) ASSERT_EQ(got[static_cast<size_t>(i * kEach + j)], want) << "upload " << i;
  }
  EXPECT_EQ(device_x.download(), x);
  float want_amax = 0;
  for (float v : x) want_amax = std::max(want_amax, std::fabs(v));
  EXPECT_EQ(amax.download()[0], want_amax);
  EXPECT_TRUE(b_->queue_copy_from_host(dst.get(), staging.data(), 0).ok()) << "zero bytes are a no-op";
  EXPECT_EQ(b_->queue_copy_from_host(nullptr, staging.data(), 4).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(b_->queue_copy_from_host(dst.get(), nullptr, 4).code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(BackendContract, ZeroByteAllocationsAreDistinctAndCountNothing) {
  const int64_t before = b_->memory_stats().allocated;
  absl::StatusOr<void*> a = b_->allocate(0), c = b_->allocate(0);
  ASSERT_TRUE(a.ok() && c.ok());
  EXPECT_NE(*a, *c);
  EXPECT_EQ(b_->memory_stats().allocated, before);
  b_->deallocate(*a);
  b_->deallocate(*c);
  EXPECT_EQ(b_->memory_stats().allocated, before);
}

// copy_rows moves each row to its pitch and nothing else: the gaps between rows in dst keep
// their bytes, as does everything past the last row.
TEST_P(BackendContract, CopyRowsMovesEachRowToItsPitchAndNothingElse) {
  struct Case {
    size_t dst_pitch, src_pitch, row_bytes, rows;
  };
  // Gaps on either side, none (one contiguous run), a single row, and rows of odd lengths.
  const Case cases[] = {{96, 40, 40, 5}, {40, 96, 40, 5}, {64, 64, 64, 4}, {100, 33, 33, 1}, {257, 129, 7, 9}};
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << c.rows << " rows of " << c.row_bytes << " at pitches " << c.dst_pitch
                                      << " / " << c.src_pitch);
    const size_t src_n = c.src_pitch * c.rows, dst_n = c.dst_pitch * c.rows + 64;
    std::vector<uint8_t> host_src(src_n);
    for (size_t i = 0; i < src_n; ++i) host_src[i] = static_cast<uint8_t>(i * 7 + 3);
    const std::vector<uint8_t> before(dst_n, 0xA5);
    Buffer<uint8_t> src(b_, host_src), dst(b_, before);
    ASSERT_TRUE(b_->copy_rows(dst.get(), c.dst_pitch, src.get(), c.src_pitch, c.row_bytes, c.rows).ok());
    std::vector<uint8_t> want = before;
    for (size_t r = 0; r < c.rows; ++r) {
      std::copy_n(host_src.begin() + static_cast<std::ptrdiff_t>(r * c.src_pitch), c.row_bytes,
                  want.begin() + static_cast<std::ptrdiff_t>(r * c.dst_pitch));
    }
    EXPECT_EQ(dst.download(), want);
    EXPECT_EQ(src.download(), host_src) << "the source changed";
  }
}

TEST_P(BackendContract, CopyRowsRejectsAPitchShorterThanTheRowAndCopiesNothing) {
  const std::vector<uint8_t> before(256, 0x3C);
  Buffer<uint8_t> src(b_, std::vector<uint8_t>(256, 0x11)), dst(b_, before);
  for (const auto& [dst_pitch, src_pitch] : {std::pair<size_t, size_t>{31, 64}, {64, 31}}) {
    const absl::Status s = b_->copy_rows(dst.get(), dst_pitch, src.get(), src_pitch, 32, 4);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("pitch"), std::string::npos) << s;
  }
  EXPECT_EQ(b_->copy_rows(nullptr, 64, src.get(), 64, 32, 2).code(), absl::StatusCode::kInvalidArgument);
  // Nothing to move needs no memory, as copy() of zero bytes.
  EXPECT_TRUE(b_->copy_rows(nullptr, 64, nullptr, 64, 32, 0).ok());
  EXPECT_TRUE(b_->copy_rows(nullptr, 64, nullptr, 64, 0, 3).ok());
  EXPECT_EQ(dst.download(), before);
}

TEST_P(BackendContract, TransposeBytesMatchesANaiveLoopForRaggedShapes) {
  constexpr size_t kGuard = 64;  // bytes past the end of dst that must stay untouched
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {1, 1},   {1, 17},  {17, 1},   {2, 3},    {15, 16}, {16, 16}, {16, 17}, {31, 33}, {32, 32},
      {33, 47}, {64, 64}, {65, 63},  {300, 129}, {129, 300}, {1, 4099}, {4099, 1}, {7, 1000},
      // Multiples of 4 (the GPU moves them as words), whole and partial 64-byte tiles.
      {4, 4},   {68, 36}, {196, 132}, {8, 200}};
  for (const auto& [rows, cols] : shapes) {
    SCOPED_TRACE(::testing::Message() << rows << "x" << cols);
    const auto n = static_cast<size_t>(rows * cols);
    const auto host = byte_pattern(rows, cols, static_cast<uint32_t>(rows * 1000 + cols));
    Buffer<uint8_t> src(b_, host);
    std::vector<uint8_t> init(n + kGuard, 0x5A);
    Buffer<uint8_t> dst(b_, init);
    ASSERT_TRUE(b_->transpose_bytes(src.get(), rows, cols, dst.get()).ok());
    ASSERT_TRUE(b_->synchronize().ok());
    const auto got = dst.download();
    const auto want = naive_transpose(host, rows, cols);
    ASSERT_EQ(std::vector<uint8_t>(got.begin(), got.begin() + static_cast<std::ptrdiff_t>(n)), want);
    EXPECT_EQ(std::vector<uint8_t>(got.begin() + static_cast<std::ptrdiff_t>(n), got.end()),
              std::vector<uint8_t>(kGuard, 0x5A))
        << "wrote past the end of dst";
    EXPECT_EQ(src.download(), host) << "the source changed";

    // Transposing back gives the original bytes.
    Buffer<uint8_t> back(b_, n);
    ASSERT_TRUE(b_->transpose_bytes(dst.get(), cols, rows, back.get()).ok());
    EXPECT_EQ(back.download(), host);
  }
}

TEST_P(BackendContract, TransposeBytesOfEveryCodeIsExact) {
  // All 256 codes (fp8 NaNs, infinities and negative zero included) as 16 x 16 and 8 x 32:
  // a transpose moves bytes and never reinterprets them.
  std::vector<uint8_t> host(256);
  for (int i = 0; i < 256; ++i) host[static_cast<size_t>(i)] = static_cast<uint8_t>(i);
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{16, 16}, {8, 32}, {32, 8}, {1, 256}, {256, 1}}) {
    Buffer<uint8_t> src(b_, host), dst(b_, host.size());
    ASSERT_TRUE(b_->transpose_bytes(src.get(), rows, cols, dst.get()).ok());
    EXPECT_EQ(dst.download(), naive_transpose(host, rows, cols)) << rows << "x" << cols;
  }
}

TEST_P(BackendContract, TransposeBytesOfATallMatrixCoversEveryRow) {
  // More rows than one launch's grid covers: in tiles of 32 (65535 x 32) a byte at a time,
  // and, with rows and columns multiples of 4, in tiles of 64 moved as words (65535 x 64).
  // The GPU kernels loop over the rest; the host backends see long runs of scalar tails.
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{65535 * 32 + 45, 3}, {65535 * 64 + 68, 4}}) {
    SCOPED_TRACE(::testing::Message() << rows << "x" << cols);
    const auto host = byte_pattern(rows, cols, 7);
    Buffer<uint8_t> src(b_, host), dst(b_, host.size());
    ASSERT_TRUE(b_->transpose_bytes(src.get(), rows, cols, dst.get()).ok());
    const auto got = dst.download();
    const auto want = naive_transpose(host, rows, cols);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_TRUE(got == want) << "first difference at "
                             << (std::mismatch(got.begin(), got.end(), want.begin()).first - got.begin());
  }
}

TEST_P(BackendContract, TransposeBytesOfAnEmptyMatrixIsANoOp) {
  const std::vector<uint8_t> sentinel(64, 0xC3);
  Buffer<uint8_t> src(b_, std::vector<uint8_t>(64, 0x11)), dst(b_, sentinel);
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{0, 0}, {0, 17}, {17, 0}}) {
    EXPECT_TRUE(b_->transpose_bytes(src.get(), rows, cols, dst.get()).ok()) << rows << "x" << cols;
    // Like copy() of zero bytes, an empty transpose touches no memory, so it needs none.
    EXPECT_TRUE(b_->transpose_bytes(nullptr, rows, cols, nullptr).ok()) << rows << "x" << cols;
  }
  EXPECT_EQ(dst.download(), sentinel);
}

TEST_P(BackendContract, TransposeBytesRejectsBadArgumentsWithoutTouchingMemory) {
  const int64_t rows = 5, cols = 7;
  const std::vector<uint8_t> sentinel(static_cast<size_t>(rows * cols), 0xC3);
  Buffer<uint8_t> src(b_, byte_pattern(rows, cols, 3)), dst(b_, sentinel);
  auto expect_invalid = [&](absl::Status s, const char* needle) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(std::string(s.message()).find(needle), std::string::npos) << s.message();
  };
  expect_invalid(b_->transpose_bytes(nullptr, rows, cols, dst.get()), "null");
  expect_invalid(b_->transpose_bytes(src.get(), rows, cols, nullptr), "null");
  expect_invalid(b_->transpose_bytes(nullptr, rows, cols, nullptr), "null");
  expect_invalid(b_->transpose_bytes(src.get(), -1, cols, dst.get()), "negative");
  expect_invalid(b_->transpose_bytes(src.get(), rows, -1, dst.get()), "negative");
  expect_invalid(b_->transpose_bytes(src.get(), -3, -4, dst.get()), "negative");
  // A negative dimension is rejected even when the other one is zero (no empty shortcut).
  expect_invalid(b_->transpose_bytes(src.get(), 0, -1, dst.get()), "negative");
  expect_invalid(b_->transpose_bytes(src.get(), -1, 0, dst.get()), "negative");
  ASSERT_TRUE(b_->synchronize().ok());
  EXPECT_EQ(dst.download(), sentinel) << "a rejected call wrote its output";
}

// ---- bad arguments ---------------------------------------------------------------------------

TEST_P(BackendContract, BadArgumentsAreRejectedWithoutTouchingMemory) {
  const int64_t m = 32, n = 32, k = 32;
  const std::vector<uint8_t> sentinel(static_cast<size_t>(m * n * 4), 0xAB);
  Buffer<uint8_t> out(b_, sentinel);
  Buffer<uint8_t> a(b_, static_cast<size_t>(m * k)), w(b_, static_cast<size_t>(n * k));
  Buffer<float> one(b_, std::vector<float>{1.0f});
  ScaledGemmArgs good;
  good.m = m;
  good.n = n;
  good.k = k;
  good.a = {a.get(), Format::kE4M3, Granularity::kTensorwise, one.get()};
  good.b = {w.get(), Format::kE4M3, Granularity::kTensorwise, one.get()};
  good.out = out.get();

  auto expect_invalid = [&](ScaledGemmArgs g, const char* needle) {
    const auto s = b_->scaled_gemm(g);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(std::string(s.message()).find(needle), std::string::npos) << s.message();
    EXPECT_EQ(out.download(), sentinel) << "a rejected call wrote its output";
  };
  {
    auto g = good;
    g.a.data = nullptr;
    expect_invalid(g, "A");
  }
  {
    auto g = good;
    g.out = nullptr;
    expect_invalid(g, "out");
  }
  {
    auto g = good;
    g.m = -1;
    expect_invalid(g, "negative");
  }
  {
    auto g = good;
    g.a.format = g.b.format = Format::kE5M2;
    expect_invalid(g, "e5m2");
  }
  {
    auto g = good;
    g.b.granularity = Granularity::kColumnwise;
    expect_invalid(g, "granularity");
  }
  {
    auto g = good;
    g.b.inv_scale = nullptr;
    expect_invalid(g, "inv_scale");
  }
  {
    // K not a multiple of 16: the GPU's fp8 GEMM cannot take it; the CPU can.
    auto g = good;
    g.k = 24;
    g.n = 24;
    if (b_->is_cuda()) {
      expect_invalid(g, "multiple of 16");
    } else {
      EXPECT_TRUE(b_->scaled_gemm(g).ok());
      out.upload(sentinel);
    }
  }
  if (b_->is_cuda()) {
    auto g = good;
    g.a.data = a.get() + 1;  // misaligned
    expect_invalid(g, "aligned");
    Buffer<float> scales(b_, std::vector<float>(8, 1.0f));
    g = good;
    g.b.inv_scale = scales.get() + 1;  // 4 bytes past a 16-byte boundary
    expect_invalid(g, "B inv_scale: is not 16-byte aligned");
  }
  // Casts and amaxes with bad arguments.
  Buffer<float> x(b_, static_cast<size_t>(m * k));
  CastArgs c;
  c.input = {x.get(), DType::kFloat32, m, k};
  c.scale = one.get();
  EXPECT_EQ(b_->cast(c).code(), absl::StatusCode::kInvalidArgument);  // no output
  c.out = out.get();
  c.input.dtype = DType::kE4M3;
  EXPECT_EQ(b_->cast(c).code(), absl::StatusCode::kInvalidArgument);  // fp8 input
  c.input.dtype = DType::kFloat32;
  c.scale = nullptr;
  EXPECT_EQ(b_->cast(c).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(out.download(), sentinel);
  EXPECT_EQ(b_->amax({nullptr, DType::kFloat32, 4, 4}, Granularity::kTensorwise, one.get()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(b_->amax({x.get(), DType::kFloat32, 4, 4}, Granularity::kTensorwise, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  GemmArgs hg;
  hg.m = m;
  hg.n = n;
  hg.k = k;
  hg.a = x.get();
  hg.b = x.get();
  hg.in_dtype = DType::kE4M3;
  hg.out = out.get();
  EXPECT_EQ(b_->gemm(hg).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(out.download(), sentinel);
}

#if defined(FP8_CONTRACT_BACKENDS_HOST)
INSTANTIATE_TEST_SUITE_P(Host, BackendContract, ::testing::Values("reference", "cpu"));
#endif
#if defined(FP8_CONTRACT_BACKENDS_CUDA)
INSTANTIATE_TEST_SUITE_P(Cuda, BackendContract, ::testing::Values("cuda"));
#endif

}  // namespace
}  // namespace fp8
