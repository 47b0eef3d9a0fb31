// Behaviour specific to the CUDA backend, beyond the contract every backend keeps
// (backend_contract_test.cc): how it reports a missing GPU, cuBLASLt's alignment and
// shape rules, its own streams, and the code paths only the GPU has (the fp32 -> bf16
// GEMM through a temporary, k = 0, launches past the 65535-block grid limit). Tests that
// need a GPU skip, saying why, where there is none.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/string_view.h"
#include "fp8/fp8.h"
#include "tests/kernels/backend_test_util.h"

#if defined(FP8_HAVE_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace fp8 {
namespace {

using testing::Buffer;
using testing::gaussian;

// absl's string_view (what Status::message() returns) is not std::string_view in this absl.
bool contains(absl::string_view s, absl::string_view needle) { return s.find(needle) != absl::string_view::npos; }

// ---- without a GPU ---------------------------------------------------------------------------

TEST(CudaBackendAvailability, NoGpuIsReportedAsUnavailableWithTheReason) {
  auto b = make_cuda_backend(0, nullptr);
  if (b.ok()) GTEST_SKIP() << "a CUDA GPU is present: " << (*b)->name();
  EXPECT_EQ(b.status().code(), absl::StatusCode::kUnavailable) << b.status();
  const std::string message(b.status().message());
  if (cuda_compiled()) {
    // e.g. "no CUDA GPU available: cudaGetDeviceCount failed with cudaErrorNoDevice ..."
    EXPECT_TRUE(contains(message, "GPU")) << message;
  } else {
    EXPECT_TRUE(contains(message, "CUDA")) << message;
  }
}

TEST(CudaBackendAvailability, DeviceIndexOutOfRangeIsUnavailable) {
  for (int device : {-1, 1 << 20}) {
    const auto b = make_cuda_backend(device, nullptr);
    ASSERT_FALSE(b.ok()) << device;
    EXPECT_EQ(b.status().code(), absl::StatusCode::kUnavailable) << b.status();
  }
}

// ---- with a GPU -------------------------------------------------------------------------------

class CudaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto b = make_cuda_backend(0, nullptr);
    if (!b.ok()) GTEST_SKIP() << "no CUDA GPU: " << b.status().message();
    backend_ = std::move(*b);
    b_ = backend_.get();
  }

  Backend& ref() { return reference_backend(); }

  std::unique_ptr<Backend> backend_;
  Backend* b_ = nullptr;
};

TEST_F(CudaBackendTest, NamesItsDevice) {
  EXPECT_TRUE(b_->is_cuda());
  EXPECT_EQ(b_->name().rfind("cuda:0 (", 0), 0u) << b_->name();
}

TEST_F(CudaBackendTest, AllocationsAre256ByteAligned) {
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{3}, size_t{1000}, size_t{1} << 20}) {
    auto p = b_->allocate(bytes);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_NE(*p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(*p) % 256, 0u) << bytes;
    b_->deallocate(*p);
  }
}

// cuBLASLt and the vectorised kernels need 16-byte aligned pointers. Misaligned (but
// valid) pointers are rejected up front, and nothing is read or written.
TEST_F(CudaBackendTest, MisalignedPointersAreRejectedBeforeAnyDeviceAccess) {
  const int64_t rows = 32, cols = 32;
  const std::vector<uint8_t> sentinel(4096 + 64, 0xAB);
  Buffer<uint8_t> out(b_, sentinel);
  Buffer<float> x(b_, gaussian(static_cast<size_t>(rows * cols) + 16, 1));
  Buffer<float> one(b_, std::vector<float>{1.0f});
  const auto expect_misaligned = [&](const absl::Status& s, const char* what) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << what << ": " << s;
    EXPECT_TRUE(contains(s.message(), "aligned")) << what << ": " << s.message();
  };

  CastArgs c;
  c.input = {x.get() + 1, DType::kFloat32, rows, cols};  // 4-byte aligned only
  c.scale = one.get();
  c.out = out.get();
  expect_misaligned(b_->cast(c), "cast input");
  c.input.data = x.get();
  c.out = out.get() + 8;
  expect_misaligned(b_->cast(c), "cast out");
  c.out = nullptr;
  c.out_t = out.get() + 1;
  expect_misaligned(b_->cast(c), "cast out_t");

  expect_misaligned(b_->amax({x.get() + 2, DType::kFloat32, rows, cols}, Granularity::kRowwise,
                             reinterpret_cast<float*>(out.get())),
                    "amax input");
  QuantizeArgs q;
  q.input = {x.get(), DType::kFloat32, rows, cols};
  q.out = out.get() + 4;
  q.scale_out = one.get();
  expect_misaligned(b_->quantize(q), "quantize out");
  DequantizeArgs d{out.get(), Format::kE4M3, rows, cols, Granularity::kTensorwise, one.get(), DType::kFloat32,
                   out.get() + 2};
  expect_misaligned(b_->dequantize(d), "dequantize out");
  expect_misaligned(b_->convert(x.get() + 1, DType::kFloat32, out.get(), DType::kBFloat16, 64), "convert input");

  ScaledGemmArgs g;
  g.m = g.n = g.k = 32;
  g.a = {out.get(), Format::kE4M3, Granularity::kTensorwise, one.get()};
  g.b = {out.get() + 1, Format::kE4M3, Granularity::kTensorwise, one.get()};
  g.out = out.get();
  expect_misaligned(b_->scaled_gemm(g), "scaled_gemm B");
  GemmArgs h;
  h.m = h.n = h.k = 16;
  h.a = x.get() + 1;
  h.b = x.get();
  h.out = out.get();
  expect_misaligned(b_->gemm(h), "gemm A");

  ASSERT_TRUE(b_->synchronize().ok());
  EXPECT_EQ(out.download(), sentinel);
}

TEST_F(CudaBackendTest, Fp8GemmNeedsKAndNMultiplesOf16ButAnyM) {
  const std::vector<uint8_t> sentinel(64 * 64 * 4, 0xCD);
  Buffer<uint8_t> out(b_, sentinel);
  Buffer<uint8_t> codes(b_, std::vector<uint8_t>(64 * 64, 0x38));  // e4m3 1.0
  Buffer<float> one(b_, std::vector<float>{1.0f});
  ScaledGemmArgs g;
  g.a = {codes.get(), Format::kE4M3, Granularity::kTensorwise, one.get()};
  g.b = {codes.get(), Format::kE4M3, Granularity::kTensorwise, one.get()};
  g.out = out.get();
  for (auto [m, n, k] : {std::tuple{16, 16, 24}, std::tuple{16, 24, 16}}) {
    g.m = m;
    g.n = n;
    g.k = k;
    const auto s = b_->scaled_gemm(g);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_TRUE(contains(s.message(), "multiple of 16")) << s.message();
  }
  ASSERT_TRUE(b_->synchronize().ok());
  EXPECT_EQ(out.download(), sentinel);

  // m is cuBLAS's n: no constraint. All-ones operands: every output is k.
  g.m = 5;
  g.n = 16;
  g.k = 32;
  ASSERT_TRUE(b_->scaled_gemm(g).ok());
  const auto got = out.download();
  for (int64_t i = 0; i < g.m * g.n; ++i) {
    float v;
    std::memcpy(&v, got.data() + 4 * i, 4);
    EXPECT_EQ(v, 32.0f) << i;
  }
}

// cuBLASLt has no fp32 x fp32 -> bf16 kernel; the backend goes through an fp32 temporary.
// bf16 x bf16 -> bf16 takes its bias as bf16.
TEST_F(CudaBackendTest, HighPrecisionGemmWithBf16Output) {
  const int64_t m = 40, n = 24, k = 56;
  const auto a = gaussian(static_cast<size_t>(m * k), 10);
  const auto bm = gaussian(static_cast<size_t>(k * n), 11);
  const auto bias = gaussian(static_cast<size_t>(n), 12);
  const auto init = testing::to_bf16(gaussian(static_cast<size_t>(m * n), 13));
  for (DType in : {DType::kFloat32, DType::kBFloat16}) {
    SCOPED_TRACE(dtype_name(in));
    const bool bf = in == DType::kBFloat16;
    const auto ah = testing::to_bf16(a), bh = testing::to_bf16(bm);
    Buffer<float> af(b_, a), bfl(b_, bm), bias_dev(b_, bias);
    Buffer<uint16_t> ab(b_, ah), bb(b_, bh), out(b_, init);
    GemmArgs g;
    g.m = m;
    g.n = n;
    g.k = k;
    g.a = bf ? static_cast<const void*>(ab.get()) : af.get();
    g.b = bf ? static_cast<const void*>(bb.get()) : bfl.get();
    g.in_dtype = in;
    g.out_dtype = DType::kBFloat16;
    g.out = out.get();
    g.alpha = 0.75f;
    g.beta = 0.5f;
    g.bias = bias_dev.get();
    ASSERT_TRUE(b_->gemm(g).ok());

    std::vector<uint16_t> want = init;
    GemmArgs r = g;
    r.a = bf ? static_cast<const void*>(ah.data()) : a.data();
    r.b = bf ? static_cast<const void*>(bh.data()) : bm.data();
    r.out = want.data();
    r.bias = bias.data();
    ASSERT_TRUE(ref().gemm(r).ok());
    const auto wf = testing::from_bf16(want);
    EXPECT_LT(testing::relative_error(std::vector<double>(wf.begin(), wf.end()), testing::from_bf16(out.download())),
              8e-3);
  }
}

// An empty contraction leaves bias (+ the old output) for both GEMMs.
TEST_F(CudaBackendTest, GemmsWithKZeroWriteBiasPlusOutput) {
  const int64_t m = 3, n = 32;
  const auto bias = gaussian(static_cast<size_t>(n), 20);
  const auto init = gaussian(static_cast<size_t>(m * n), 21);
  Buffer<float> bias_dev(b_, bias), out(b_, init), one(b_, std::vector<float>{1.0f});
  Buffer<uint8_t> codes(b_, 16);

  ScaledGemmArgs g;
  g.m = m;
  g.n = n;
  g.k = 0;
  g.a = {codes.get(), Format::kE4M3, Granularity::kTensorwise, one.get()};
  g.b = {codes.get(), Format::kE4M3, Granularity::kTensorwise, one.get()};
  g.out = out.get();
  g.bias = bias_dev.get();
  g.accumulate = true;
  ASSERT_TRUE(b_->scaled_gemm(g).ok());
  auto got = out.download();
  for (int64_t i = 0; i < m * n; ++i) EXPECT_EQ(got[i], init[i] + bias[i % n]) << i;

  out.upload(init);
  GemmArgs h;
  h.m = m;
  h.n = n;
  h.k = 0;
  h.a = h.b = bias_dev.get();
  h.out = out.get();
  h.beta = 2.0f;
  h.bias = bias_dev.get();
  ASSERT_TRUE(b_->gemm(h).ok());
  got = out.download();
  for (int64_t i = 0; i < m * n; ++i) EXPECT_EQ(got[i], 2.0f * init[i] + bias[i % n]) << i;
}

// e4m3 codes of n gaussian values (scale 1), by the reference backend.
std::vector<uint8_t> e4m3_codes(int64_t n, uint32_t seed) {
  const auto v = gaussian(static_cast<size_t>(n), seed);
  std::vector<uint8_t> codes(static_cast<size_t>(n));
  const float one = 1.0f;
  CastArgs c;
  c.input = {v.data(), DType::kFloat32, 1, n};
  c.scale = &one;
  c.out = codes.data();
  EXPECT_TRUE(reference_backend().cast(c).ok());
  return codes;
}

// CudaBackendOptions::refuse_gemm_c makes a backend treat every GEMM's C as refused, as cuBLASLt does
// where the chosen kernel does not take it: an accumulation then goes through an fp32
// product and an add pass, an addend into D first. The sums stay those of the reference.
TEST_F(CudaBackendTest, GemmsWhoseCIsRefusedTakeTheFallbackRoutes) {
  CudaBackendOptions options;
  options.refuse_gemm_c = true;
  auto refusing = make_cuda_backend(0, nullptr, options);
  ASSERT_TRUE(refusing.ok()) << refusing.status();
  Backend* b = refusing->get();

  const int64_t m = 48, n = 32, k = 64;
  const auto a_codes = e4m3_codes(m * k, 30), b_codes = e4m3_codes(n * k, 31);
  std::vector<float> a_inv(static_cast<size_t>(m)), b_inv(static_cast<size_t>(n));
  for (size_t i = 0; i < a_inv.size(); ++i) a_inv[i] = 0.25f + 0.125f * static_cast<float>(i % 7);
  for (size_t i = 0; i < b_inv.size(); ++i) b_inv[i] = 0.5f + 0.25f * static_cast<float>(i % 3);
  const auto bias = gaussian(static_cast<size_t>(n), 32);
  const auto init = gaussian(static_cast<size_t>(m * n), 33, 4.0f);
  Buffer<uint8_t> a_dev(b, a_codes), b_dev(b, b_codes);
  Buffer<float> a_inv_dev(b, a_inv), b_inv_dev(b, b_inv), bias_dev(b, bias);

  for (bool rowwise : {false, true}) {
    for (DType t : {DType::kFloat32, DType::kBFloat16}) {
      for (bool addend : {false, true}) {
        SCOPED_TRACE(::testing::Message() << (rowwise ? "rowwise " : "tensorwise ") << dtype_name(t)
                                          << (addend ? " +addend" : " +accumulate"));
        const Granularity g = rowwise ? Granularity::kRowwise : Granularity::kTensorwise;
        const auto start = testing::stored_bytes(init, t);
        Buffer<uint8_t> out(b, start), addend_dev(b, start);
        ScaledGemmArgs d;
        d.m = m;
        d.n = n;
        d.k = k;
        d.a = {a_dev.get(), Format::kE4M3, g, a_inv_dev.get()};
        d.b = {b_dev.get(), Format::kE4M3, g, b_inv_dev.get()};
        d.out_dtype = t;
        d.out = out.get();
        d.bias = bias_dev.get();
        d.accumulate = !addend;
        d.addend = addend ? addend_dev.get() : nullptr;
        ASSERT_TRUE(b->scaled_gemm(d).ok());

        std::vector<uint8_t> want = start;
        ScaledGemmArgs r = d;
        r.a = {a_codes.data(), Format::kE4M3, g, a_inv.data()};
        r.b = {b_codes.data(), Format::kE4M3, g, b_inv.data()};
        r.out = want.data();
        r.bias = bias.data();
        r.addend = addend ? start.data() : nullptr;
        ASSERT_TRUE(ref().scaled_gemm(r).ok());
        const auto w = testing::widened(want, t);
        EXPECT_LT(testing::relative_error(std::vector<double>(w.begin(), w.end()), testing::widened(out.download(), t)),
                  t == DType::kFloat32 ? 5e-4 : 8e-3);
      }
    }
  }

  // The high-precision GEMM's beta goes the same way.
  const auto x = testing::to_bf16(gaussian(static_cast<size_t>(m * k), 34));
  const auto y = testing::to_bf16(gaussian(static_cast<size_t>(k * n), 35));
  const auto start = testing::to_bf16(init);
  Buffer<uint16_t> x_dev(b, x), y_dev(b, y), out(b, start);
  GemmArgs h;
  h.m = m;
  h.n = n;
  h.k = k;
  h.a = x_dev.get();
  h.b = y_dev.get();
  h.in_dtype = DType::kBFloat16;
  h.out_dtype = DType::kBFloat16;
  h.out = out.get();
  h.beta = 0.5f;
  h.bias = bias_dev.get();
  ASSERT_TRUE(b->gemm(h).ok());
  std::vector<uint16_t> want = start;
  GemmArgs r = h;
  r.a = x.data();
  r.b = y.data();
  r.out = want.data();
  r.bias = bias.data();
  ASSERT_TRUE(ref().gemm(r).ok());
  const auto w = testing::from_bf16(want);
  EXPECT_LT(testing::relative_error(std::vector<double>(w.begin(), w.end()), testing::from_bf16(out.download())),
            8e-3);
}

// More than 65535 row tiles: the transpose kernel loops over grid rows.
TEST_F(CudaBackendTest, CastOfATallMatrixMatchesReference) {
  const int64_t rows = 64 * 65535 + 100, cols = 3, n = rows * cols;
  auto host = gaussian(static_cast<size_t>(n), 30);
  std::vector<float> scales(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) scales[i] = 1.0f + static_cast<float>(i % 5);
  Buffer<float> x(b_, host), s(b_, scales), amax(b_, static_cast<size_t>(rows));
  Buffer<uint8_t> out(b_, static_cast<size_t>(n)), out_t(b_, static_cast<size_t>(n));
  CastArgs c;
  c.input = {x.get(), DType::kFloat32, rows, cols};
  c.granularity = Granularity::kRowwise;
  c.scale = s.get();
  c.out = out.get();
  c.out_t = out_t.get();
  c.amax_out = amax.get();
  ASSERT_TRUE(b_->cast(c).ok());

  std::vector<uint8_t> want(static_cast<size_t>(n)), want_t(static_cast<size_t>(n));
  std::vector<float> want_amax(static_cast<size_t>(rows));
  CastArgs r = c;
  r.input.data = host.data();
  r.scale = scales.data();
  r.out = want.data();
  r.out_t = want_t.data();
  r.amax_out = want_amax.data();
  ASSERT_TRUE(ref().cast(r).ok());
  EXPECT_TRUE(out.download() == want);
  EXPECT_TRUE(out_t.download() == want_t);
  EXPECT_TRUE(amax.download() == want_amax);
}

#if defined(FP8_HAVE_CUDA)
// Work goes to the stream the backend was made with; synchronize() waits for it.
TEST_F(CudaBackendTest, QueuesOnTheCallersStream) {
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  {
    auto made = make_cuda_backend(0, stream);
    ASSERT_TRUE(made.ok()) << made.status();
    Backend* b = made->get();
    const int64_t rows = 256, cols = 512;
    const auto host = gaussian(static_cast<size_t>(rows * cols), 40);
    Buffer<float> x(b, host), scale(b, 1);
    Buffer<uint8_t> out(b, static_cast<size_t>(rows * cols)), out_t(b, static_cast<size_t>(rows * cols));
    QuantizeArgs q;
    q.input = {x.get(), DType::kFloat32, rows, cols};
    q.out = out.get();
    q.out_t = out_t.get();
    q.scale_out = scale.get();
    ASSERT_TRUE(b->quantize(q).ok());
    ASSERT_TRUE(b->synchronize().ok());

    std::vector<uint8_t> want(static_cast<size_t>(rows * cols)), want_t(want.size());
    std::vector<float> want_scale(1);
    QuantizeArgs r = q;
    r.input.data = host.data();
    r.out = want.data();
    r.out_t = want_t.data();
    r.scale_out = want_scale.data();
    ASSERT_TRUE(ref().quantize(r).ok());
    EXPECT_EQ(out.download(), want);
    EXPECT_EQ(out_t.download(), want_t);
    EXPECT_EQ(scale.download(), want_scale);
  }
  ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}
#endif

}  // namespace
}  // namespace fp8
