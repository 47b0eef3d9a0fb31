// Float8Linear against an fp64 reference linear: accuracy (SQNR) per recipe on
// Llama-FFN-shaped layers scaled down for test time, gradient accumulation, delayed
// scaling across steps, the long form from a job spec, and the errors a bad config or a
// bad shape gets.
//
// Built twice: on the CPU backend (unit) and, with FP8_ENGINE_TEST_CUDA, on the CUDA
// backend (gpu; skips where there is none). Tensors reach the layer only through Backend
// memory and copies, as in the product.
#include "worker/engine/float8/linear.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/jobspec/loader.h"
#include "fp8/fp8.h"
#include "gtest/gtest.h"
#include "tests/engine/float8/cast_counts.h"
#include "tests/kernels/backend_test_util.h"
#include "tests/kernels/forwarding_backend.h"
#include "worker/engine/float8/config.h"

namespace fp8::engine {
namespace {

using Recipe = v1::Fp8Spec::Recipe;

// Fails the test with the status's message when `expr` is not OK.
#define ASSERT_OK(expr)                   \
  do {                                    \
    const absl::Status status_ = (expr);  \
    ASSERT_TRUE(status_.ok()) << status_; \
  } while (0)

// ---- the backend under test -----------------------------------------------------------------

// The two builds of this file name their suites apart, so that ctest lists both.
#if defined(FP8_ENGINE_TEST_CUDA)
#define FLOAT8_LINEAR_TEST Float8LinearCudaTest
#define RECIPE_ACCURACY RecipeAccuracyCuda
#define BF16_ACCURACY Bf16ActivationsCuda
#else
#define FLOAT8_LINEAR_TEST Float8LinearTest
#define RECIPE_ACCURACY RecipeAccuracy
#define BF16_ACCURACY Bf16Activations
#endif

Backend* backend_under_test() {
#if defined(FP8_ENGINE_TEST_CUDA)
  static std::unique_ptr<Backend> cuda = [] {
    absl::StatusOr<std::unique_ptr<Backend>> b = make_cuda_backend();
    return b.ok() ? std::move(*b) : nullptr;
  }();
  return cuda.get();
#else
  return &cpu_backend();
#endif
}

class FLOAT8_LINEAR_TEST : public ::testing::Test {
 protected:
  void SetUp() override {
    if (backend_under_test() == nullptr) GTEST_SKIP() << "no CUDA backend: " << make_cuda_backend().status();
  }
  Backend& backend() { return *backend_under_test(); }
};

// ---- tensors ----------------------------------------------------------------------------------

// Values in backend memory, fp32 or bf16 (uploaded from fp32, rounded to nearest even).
class Tensor {
 public:
  Tensor(Backend& b, const std::vector<float>& host, DType dtype = DType::kFloat32)
      : backend_(b), size_(host.size()), dtype_(dtype) {
    data_ = *backend_.allocate(bytes());
    upload(host);
  }
  Tensor(Backend& b, size_t n, float fill = 0.0f, DType dtype = DType::kFloat32)
      : Tensor(b, std::vector<float>(n, fill), dtype) {}
  ~Tensor() { backend_.deallocate(data_); }
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;

  // fp32 tensors only (weights, biases and their gradients are fp32).
  float* data() const {
    EXPECT_EQ(dtype_, DType::kFloat32);
    return static_cast<float*>(data_);
  }
  void* raw() const { return data_; }
  void upload(const std::vector<float>& host) {
    ASSERT_EQ(host.size(), size_);
    if (dtype_ == DType::kFloat32) {
      ASSERT_OK(backend_.copy_from_host(data_, host.data(), bytes()));
      return;
    }
    std::vector<uint16_t> bits(size_);
    for (size_t i = 0; i < size_; ++i) bits[i] = float_to_bf16(host[i]);
    ASSERT_OK(backend_.copy_from_host(data_, bits.data(), bytes()));
  }
  // Widened to fp32 (exact).
  std::vector<float> download() const {
    std::vector<float> host(size_);
    if (dtype_ == DType::kFloat32) {
      EXPECT_TRUE(backend_.copy_to_host(host.data(), data_, bytes()).ok());
      return host;
    }
    std::vector<uint16_t> bits(size_);
    EXPECT_TRUE(backend_.copy_to_host(bits.data(), data_, bytes()).ok());
    for (size_t i = 0; i < size_; ++i) host[i] = bf16_to_float(bits[i]);
    return host;
  }

 private:
  size_t bytes() const { return size_ * dtype_size(dtype_); }
  Backend& backend_;
  size_t size_;
  DType dtype_;
  void* data_ = nullptr;
};

std::vector<float> normal(size_t n, float stddev, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<float> scaled(std::vector<float> v, float factor) {
  for (float& x : v) x *= factor;
  return v;
}

float max_abs(const std::vector<float>& v) {
  float m = 0.0f;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}

// ---- the fp64 reference -----------------------------------------------------------------------

struct Shape {
  int64_t m, k, n;  // tokens, in_features, out_features
};

std::string shape_name(const Shape& s) {
  return std::to_string(s.m) + "x" + std::to_string(s.k) + "x" + std::to_string(s.n);
}

struct Reference {
  std::vector<double> output, grad_input, grad_weight, grad_bias;
};

std::vector<double> widened(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

// The three GEMMs in fp64 (OpenBLAS dgemm: an independent path from the fp32 and fp8
// GEMMs under test, and fast in a sanitizer build too).
Reference reference_linear(const Shape& s, const std::vector<float>& x, const std::vector<float>& w,
                           const std::vector<float>& bias, const std::vector<float>& g) {
  const int m = static_cast<int>(s.m), k = static_cast<int>(s.k), n = static_cast<int>(s.n);
  const std::vector<double> xd = widened(x), wd = widened(w), gd = widened(g);
  Reference r;
  r.output.assign(static_cast<size_t>(m) * n, 0.0);  // x [m, k] · w [n, k]ᵀ
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0, xd.data(), k, wd.data(), k, 0.0, r.output.data(),
              n);
  for (size_t i = 0; i < r.output.size() && !bias.empty(); ++i) r.output[i] += bias[i % static_cast<size_t>(n)];
  r.grad_input.assign(static_cast<size_t>(m) * k, 0.0);  // g [m, n] · w [n, k]
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, k, n, 1.0, gd.data(), n, wd.data(), k, 0.0,
              r.grad_input.data(), k);
  r.grad_weight.assign(static_cast<size_t>(n) * k, 0.0);  // gᵀ [n, m] · x [m, k]
  cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, k, m, 1.0, gd.data(), n, xd.data(), k, 0.0,
              r.grad_weight.data(), k);
  r.grad_bias.assign(static_cast<size_t>(n), 0.0);
  for (size_t i = 0; i < gd.size(); ++i) r.grad_bias[i % static_cast<size_t>(n)] += gd[i];
  return r;
}

// 20·log10(‖ref‖ / ‖ref − got‖), in dB.
double sqnr(const std::vector<double>& ref, const std::vector<float>& got) {
  double signal = 0.0, noise = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    signal += ref[i] * ref[i];
    noise += (ref[i] - got[i]) * (ref[i] - got[i]);
  }
  return noise == 0.0 ? INFINITY : 10.0 * std::log10(signal / noise);
}

// max |ref − got| relative to max |ref|.
double max_relative_error(const std::vector<double>& ref, const std::vector<float>& got) {
  double err = 0.0, top = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    err = std::max(err, std::fabs(ref[i] - got[i]));
    top = std::max(top, std::fabs(ref[i]));
  }
  return err / top;
}

// One layer's worth of data with its reference, built once per shape (the fp64 reference
// is the slow part of this test).
struct Problem {
  Shape shape;
  std::vector<float> x, w, bias, g;
  Reference ref;
};

Problem make_problem(const Shape& s, uint32_t seed) {
  Problem p{s, {}, {}, {}, {}, {}};
  const size_t m = static_cast<size_t>(s.m), k = static_cast<size_t>(s.k), n = static_cast<size_t>(s.n);
  p.x = normal(m * k, 1.0f, seed);
  p.w = normal(n * k, 1.0f / std::sqrt(static_cast<float>(s.k)), seed + 1);  // Llama-style init scale
  p.bias = normal(n, 0.1f, seed + 2);
  p.g = normal(m * n, 1e-3f, seed + 3);  // gradients are small: scaling must cope
  p.ref = reference_linear(s, p.x, p.w, p.bias, p.g);
  return p;
}

const Problem& cached_problem(const Shape& s) {
  static std::map<std::tuple<int64_t, int64_t, int64_t>, Problem> cache;
  auto key = std::tuple{s.m, s.k, s.n};
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, make_problem(s, 1234)).first;
  return it->second;
}

// What one forward + backward of a layer produced, downloaded.
struct Results {
  std::vector<float> output, grad_input, grad_weight, grad_bias;
};

// One training step on `layer` (grad_weight and grad_bias start at zero), then finish_step.
// Activations travel in the layer's dtypes (x and g are rounded to bf16 where it takes bf16).
Results run_step(Backend& b, Float8Linear& layer, const Shape& s, const std::vector<float>& x,
                 const std::vector<float>& w, const std::vector<float>& bias, const std::vector<float>& g) {
  const size_t m = static_cast<size_t>(s.m), k = static_cast<size_t>(s.k), n = static_cast<size_t>(s.n);
  const LinearActivations a = layer.info().activations;
  Tensor tx(b, x, a.input), tw(b, w), tb(b, bias), tg(b, g, a.output);
  Tensor out(b, m * n, 0.0f, a.output), gx(b, m * k, 0.0f, a.input), gw(b, n * k), gb(b, n);
  absl::Status st = layer.forward(tx.raw(), s.m, tw.data(), tb.data(), out.raw());
  EXPECT_TRUE(st.ok()) << st;
  st = layer.backward(tg.raw(), gx.raw(), gw.data(), gb.data());
  EXPECT_TRUE(st.ok()) << st;
  st = layer.finish_step();
  EXPECT_TRUE(st.ok()) << st;
  return {out.download(), gx.download(), gw.download(), gb.download()};
}

std::unique_ptr<Float8Linear> make_layer(Backend& b, const Shape& s, const Float8LinearConfig& c,
                                         const LinearActivations& a = {}) {
  absl::StatusOr<std::unique_ptr<Float8Linear>> layer = Float8Linear::create(b, s.k, s.n, c, a);
  EXPECT_TRUE(layer.ok()) << layer.status();
  return layer.ok() ? std::move(*layer) : nullptr;
}

Float8LinearConfig recipe(Recipe r, int history = 16) {
  absl::StatusOr<Float8LinearConfig> c = recipe_config(r, history);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : Float8LinearConfig{};
}

// ---- accuracy per recipe ------------------------------------------------------------------------

// Llama FFN projections (w1/w3: dim -> ffn_dim, w2: ffn_dim -> dim) at 1/8 of Llama-7B's
// 4096 -> 11008, with 256 tokens.
const Shape kFfnUp{256, 512, 1376};
const Shape kFfnDown{256, 1376, 512};

struct RecipeCase {
  Recipe recipe;
  const char* name;
  Shape shape;
};

void PrintTo(const RecipeCase& c, std::ostream* os) { *os << c.name << " " << shape_name(c.shape); }

class RECIPE_ACCURACY : public FLOAT8_LINEAR_TEST, public ::testing::WithParamInterface<RecipeCase> {};

TEST_P(RECIPE_ACCURACY, MatchesTheReferenceLinear) {
  const RecipeCase& c = GetParam();
  const Problem& p = cached_problem(c.shape);
  std::unique_ptr<Float8Linear> layer = make_layer(backend(), c.shape, recipe(c.recipe));
  ASSERT_NE(layer, nullptr);

  if (c.recipe == v1::Fp8Spec::DELAYED) {
    // A few steps of history from fresh data of the same distribution first, so the
    // measured step runs on delayed scales rather than on the first step's dynamic ones.
    for (uint32_t step = 0; step < 3; ++step) {
      run_step(backend(), *layer, c.shape, normal(p.x.size(), 1.0f, 100 + step), p.w, p.bias,
               normal(p.g.size(), 1e-3f, 200 + step));
    }
    ASSERT_EQ(layer->delayed().state(0)->history().size(), 3u);
  }
  const Results r = run_step(backend(), *layer, c.shape, p.x, p.w, p.bias, p.g);

  if (c.recipe == v1::Fp8Spec::NONE) {
    EXPECT_LE(max_relative_error(p.ref.output, r.output), 1e-5);
    EXPECT_LE(max_relative_error(p.ref.grad_input, r.grad_input), 1e-5);
    EXPECT_LE(max_relative_error(p.ref.grad_weight, r.grad_weight), 1e-5);
    EXPECT_LE(max_relative_error(p.ref.grad_bias, r.grad_bias), 1e-5);
    return;
  }
  const double out = sqnr(p.ref.output, r.output);
  const double gi = sqnr(p.ref.grad_input, r.grad_input);
  const double gw = sqnr(p.ref.grad_weight, r.grad_weight);
  std::printf("SQNR %-20s %-13s output %.1f dB, grad_input %.1f dB, grad_weight %.1f dB\n", c.name,
              shape_name(c.shape).c_str(), out, gi, gw);
  RecordProperty("sqnr_output_db", std::to_string(out));
  RecordProperty("sqnr_grad_input_db", std::to_string(gi));
  RecordProperty("sqnr_grad_weight_db", std::to_string(gw));
  EXPECT_GE(out, 20.0);
  EXPECT_GE(gi, 20.0);
  EXPECT_GE(gw, 20.0);
  // The bias gradient is a plain fp32 column sum of grad_output.
  EXPECT_LE(max_relative_error(p.ref.grad_bias, r.grad_bias), 1e-5);
}

std::vector<RecipeCase> recipe_cases() {
  std::vector<RecipeCase> cases;
  for (const Shape& s : {kFfnUp, kFfnDown}) {
    cases.push_back({v1::Fp8Spec::TENSORWISE, "tensorwise", s});
    cases.push_back({v1::Fp8Spec::ROWWISE, "rowwise", s});
    cases.push_back({v1::Fp8Spec::ROWWISE_WITH_GW_HP, "rowwise_with_gw_hp", s});
    cases.push_back({v1::Fp8Spec::DELAYED, "delayed", s});
    cases.push_back({v1::Fp8Spec::NONE, "none", s});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Recipes, RECIPE_ACCURACY, ::testing::ValuesIn(recipe_cases()),
                         [](const ::testing::TestParamInfo<RecipeCase>& info) {
                           return std::string(info.param.name) + "_" + shape_name(info.param.shape);
                         });

// ---- bf16 activations -----------------------------------------------------------------------------
//
// A bf16 layer is compared with the fp32 layer fed the same bf16-rounded x and g, so that
// the two differ only by what bf16 activations change: output and grad_input rounded to
// bf16, and high-precision GEMMs run in bf16 (the weight rounded to bf16).

constexpr LinearActivations kBf16Activations{DType::kBFloat16, DType::kBFloat16};

std::vector<float> bf16_rounded(std::vector<float> v) {
  for (float& x : v) x = bf16_to_float(float_to_bf16(x));
  return v;
}

// Rounding a value to bf16 moves it by at most 2^-8 of itself; a bf16 GEMM's rounded
// weight adds noise of the same order. Relative to the largest value of the fp32 layer's
// result, two such roundings.
constexpr double kBf16Tolerance = 1.0 / 128;
// Where the fp32 layer's SQNR is below this, fp8 dominates its error and bf16 activations
// must cost at most kBf16SqnrCostDb; above it (high-precision results) bf16's own
// rounding dominates and the bf16 layer must reach kBf16SqnrFloorDb.
constexpr double kFp8DominatesBelowDb = 40.0;
constexpr double kBf16SqnrCostDb = 1.0;
constexpr double kBf16SqnrFloorDb = 40.0;

struct Bf16Problem {
  std::vector<float> x, g;  // the problem's, rounded to bf16
  Reference ref;            // of the rounded x and g
};

const Bf16Problem& cached_bf16_problem(const Shape& s) {
  static std::map<std::tuple<int64_t, int64_t, int64_t>, Bf16Problem> cache;
  auto key = std::tuple{s.m, s.k, s.n};
  auto it = cache.find(key);
  if (it == cache.end()) {
    const Problem& p = cached_problem(s);
    Bf16Problem q{bf16_rounded(p.x), bf16_rounded(p.g), {}};
    q.ref = reference_linear(s, q.x, p.w, p.bias, q.g);
    it = cache.emplace(key, std::move(q)).first;
  }
  return it->second;
}

// Checks one result of a bf16 layer against the fp32 layer's on the same inputs, and both
// against the fp64 reference.
void expect_bf16_close(const char* what, const std::vector<double>& ref, const std::vector<float>& f32,
                       const std::vector<float>& bf16, const std::string& label) {
  const double err = max_relative_error(widened(f32), bf16);
  const double sqnr_f32 = sqnr(ref, f32), sqnr_bf16 = sqnr(ref, bf16);
  std::printf("bf16 %-32s %-11s SQNR fp32 %6.1f dB, bf16 %6.1f dB; max |bf16 - fp32| / max |fp32| %.2e\n",
              label.c_str(), what, sqnr_f32, sqnr_bf16, err);
  EXPECT_LE(err, kBf16Tolerance) << what;
  if (sqnr_f32 < kFp8DominatesBelowDb) {
    EXPECT_GE(sqnr_bf16, sqnr_f32 - kBf16SqnrCostDb) << what;
  } else {
    EXPECT_GE(sqnr_bf16, kBf16SqnrFloorDb) << what;
  }
}

class BF16_ACCURACY : public FLOAT8_LINEAR_TEST, public ::testing::WithParamInterface<RecipeCase> {};

TEST_P(BF16_ACCURACY, MatchesTheFp32LayerOnTheSameInputs) {
  const RecipeCase& c = GetParam();
  const Problem& p = cached_problem(c.shape);
  const Bf16Problem& q = cached_bf16_problem(c.shape);
  std::unique_ptr<Float8Linear> f32 = make_layer(backend(), c.shape, recipe(c.recipe));
  std::unique_ptr<Float8Linear> bf16 = make_layer(backend(), c.shape, recipe(c.recipe), kBf16Activations);
  ASSERT_NE(f32, nullptr);
  ASSERT_NE(bf16, nullptr);
  EXPECT_EQ(bf16->info().activations.input, DType::kBFloat16);
  EXPECT_EQ(bf16->info().activations.output, DType::kBFloat16);

  if (c.recipe == v1::Fp8Spec::DELAYED) {
    // The same history on both, as in MatchesTheReferenceLinear.
    for (uint32_t step = 0; step < 3; ++step) {
      const std::vector<float> x = bf16_rounded(normal(p.x.size(), 1.0f, 100 + step));
      const std::vector<float> g = bf16_rounded(normal(p.g.size(), 1e-3f, 200 + step));
      run_step(backend(), *f32, c.shape, x, p.w, p.bias, g);
      run_step(backend(), *bf16, c.shape, x, p.w, p.bias, g);
    }
    EXPECT_EQ(bf16->save_scaling_state().value(), f32->save_scaling_state().value());
  }
  const Results a = run_step(backend(), *f32, c.shape, q.x, p.w, p.bias, q.g);
  const Results b = run_step(backend(), *bf16, c.shape, q.x, p.w, p.bias, q.g);
  const std::string label = std::string(c.name) + " " + shape_name(c.shape);
  expect_bf16_close("output", q.ref.output, a.output, b.output, label);
  expect_bf16_close("grad_input", q.ref.grad_input, a.grad_input, b.grad_input, label);
  expect_bf16_close("grad_weight", q.ref.grad_weight, a.grad_weight, b.grad_weight, label);
  // The bias gradient sums the same grad_output values in fp32 either way.
  EXPECT_LE(max_relative_error(widened(a.grad_bias), b.grad_bias), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Recipes, BF16_ACCURACY, ::testing::ValuesIn(recipe_cases()),
                         [](const ::testing::TestParamInfo<RecipeCase>& info) {
                           return std::string(info.param.name) + "_" + shape_name(info.param.shape);
                         });

// ---- gradient accumulation ----------------------------------------------------------------------

TEST_F(FLOAT8_LINEAR_TEST, BackwardAccumulatesWeightAndBiasGradientsAndWritesInputGradient) {
  const Shape s{32, 64, 48};
  const size_t m = 32, k = 64, n = 48;
  std::unique_ptr<Float8Linear> layer = make_layer(backend(), s, recipe(v1::Fp8Spec::TENSORWISE));
  ASSERT_NE(layer, nullptr);
  const std::vector<float> w = normal(n * k, 0.1f, 1), bias = normal(n, 0.1f, 2);
  const std::vector<float> x1 = normal(m * k, 1.0f, 3), g1 = normal(m * n, 1.0f, 4);
  const std::vector<float> x2 = normal(m * k, 2.0f, 5), g2 = normal(m * n, 0.5f, 6);
  const Results one = run_step(backend(), *layer, s, x1, w, bias, g1);
  const Results two = run_step(backend(), *layer, s, x2, w, bias, g2);

  // Both micro-batches into the same gradients; grad_input starts as garbage.
  Tensor tw(backend(), w), tb(backend(), bias), tx1(backend(), x1), tx2(backend(), x2);
  Tensor tg1(backend(), g1), tg2(backend(), g2);
  Tensor out(backend(), m * n), gx(backend(), m * k, 123.0f), gw(backend(), n * k), gb(backend(), n);
  ASSERT_OK(layer->forward(tx1.data(), s.m, tw.data(), tb.data(), out.data()));
  ASSERT_OK(layer->backward(tg1.data(), gx.data(), gw.data(), gb.data()));
  ASSERT_OK(layer->forward(tx2.data(), s.m, tw.data(), tb.data(), out.data()));
  ASSERT_OK(layer->backward(tg2.data(), gx.data(), gw.data(), gb.data()));
  ASSERT_OK(layer->finish_step());

  const std::vector<float> acc_w = gw.download(), acc_b = gb.download(), last_gx = gx.download();
  for (size_t i = 0; i < acc_w.size(); ++i) {
    const float sum = one.grad_weight[i] + two.grad_weight[i];
    ASSERT_NEAR(acc_w[i], sum, 1e-5f * (1.0f + std::fabs(sum))) << i;
  }
  for (size_t i = 0; i < acc_b.size(); ++i) {
    const float sum = one.grad_bias[i] + two.grad_bias[i];
    ASSERT_NEAR(acc_b[i], sum, 1e-5f * (1.0f + std::fabs(sum))) << i;
  }
  EXPECT_EQ(last_gx, two.grad_input);
}

// BackwardOptions: grad_input's GEMM adds to what the buffer holds (beta = 1), for sibling
// layers that sum their input gradients in one buffer, and grad_weight's overwrites its
// buffer (NaN here) as the step's first producer of it; nothing else changes. In fp32 the
// sum is rounded once; in bf16 the written gradient was rounded to bf16 as well.
TEST_F(FLOAT8_LINEAR_TEST, BackwardStoresEachGradientAsAsked) {
  const Shape s{32, 64, 48};
  const size_t m = 32, k = 64, n = 48;
  const std::vector<float> w = normal(n * k, 0.1f, 11), x = normal(m * k, 1.0f, 12), g = normal(m * n, 1.0f, 13);
  const std::vector<float> prior = bf16_rounded(normal(m * k, 0.5f, 14));
  for (const Recipe r : {v1::Fp8Spec::NONE, v1::Fp8Spec::TENSORWISE, v1::Fp8Spec::ROWWISE}) {
    for (const DType act : {DType::kFloat32, DType::kBFloat16}) {
      SCOPED_TRACE(::testing::Message() << v1::Fp8Spec::Recipe_Name(r) << " " << dtype_name(act));
      const LinearActivations a{act, act};
      std::unique_ptr<Float8Linear> layer = make_layer(backend(), s, recipe(r), a);
      ASSERT_NE(layer, nullptr);
      const Results written = run_step(backend(), *layer, s, x, w, std::vector<float>(n, 0.0f), g);

      Tensor tx(backend(), x, act), tw(backend(), w), tg(backend(), g, act);
      Tensor out(backend(), m * n, 0.0f, act), gx(backend(), prior, act), gw(backend(), n * k, std::nanf(""));
      ASSERT_OK(layer->forward(tx.raw(), s.m, tw.data(), nullptr, out.raw()));
      ASSERT_OK(layer->backward(tg.raw(), gx.raw(), gw.data(), nullptr,
                                {.grad_input = Store::kAccumulate, .grad_weight = Store::kOverwrite}));
      ASSERT_OK(layer->finish_step());
      EXPECT_EQ(gw.download(), written.grad_weight);
      const std::vector<float> sum = gx.download();
      // Two roundings at most (the written gradient's and the sum's), each within 2^-8
      // (bf16) or 2^-24 (fp32) of the value.
      const double rounding = act == DType::kFloat32 ? std::ldexp(1.0, -23) : std::ldexp(1.0, -7);
      for (size_t i = 0; i < sum.size(); ++i) {
        const double want = static_cast<double>(prior[i]) + written.grad_input[i];
        const double bound = rounding * (std::fabs(prior[i]) + std::fabs(written.grad_input[i]));
        ASSERT_LE(std::fabs(sum[i] - want), bound) << i << ": " << sum[i] << " vs " << want;
      }
    }
  }
}

// A residual handed to forward() is added in the output GEMM's epilogue: the output is
// the plain layer's plus the residual, rounded once (so within one rounding of the plain
// output's and one of the sum's), the residual may be the output buffer itself, and the
// backward is the plain layer's bit for bit. In place the host backends give the same bits;
// cuBLASLt may run another kernel when C is D (bf16 outputs one ulp apart, fp32 ones in
// the last bits, with the plan unchanged), so there both sums are held to the rounding
// bound instead, as in BackendContract.GemmsAddAnAddendOnceInTheirEpilogue.
TEST_F(FLOAT8_LINEAR_TEST, ResidualIsAddedInTheOutputGemmAndLeavesTheBackwardAlone) {
  const Shape s{32, 64, 48};
  const size_t m = 32, k = 64, n = 48;
  const std::vector<float> w = normal(n * k, 0.1f, 21), x = normal(m * k, 1.0f, 22), g = normal(m * n, 1.0f, 23);
  const std::vector<float> residual = bf16_rounded(normal(m * n, 2.0f, 24));
  for (const Recipe r : {v1::Fp8Spec::NONE, v1::Fp8Spec::TENSORWISE, v1::Fp8Spec::ROWWISE, v1::Fp8Spec::DELAYED}) {
    for (const DType act : {DType::kFloat32, DType::kBFloat16}) {
      SCOPED_TRACE(::testing::Message() << v1::Fp8Spec::Recipe_Name(r) << " " << dtype_name(act));
      const LinearActivations a{act, act};
      std::unique_ptr<Float8Linear> with = make_layer(backend(), s, recipe(r), a);
      std::unique_ptr<Float8Linear> plain = make_layer(backend(), s, recipe(r), a);
      ASSERT_TRUE(with && plain);
      Tensor tx(backend(), x, act), tw(backend(), w), tg(backend(), g, act), tr(backend(), residual, act);
      Tensor y(backend(), m * n, std::nanf(""), act), y_plain(backend(), m * n, 0.0f, act);
      Tensor in_place(backend(), residual, act);
      Tensor gx(backend(), m * k, 0.0f, act), gx_plain(backend(), m * k, 0.0f, act);
      Tensor gw(backend(), n * k), gw_plain(backend(), n * k);

      ASSERT_OK(with->forward_no_grad(tx.raw(), s.m, tw.data(), nullptr, in_place.raw(), {.residual = in_place.raw()}));
      ASSERT_OK(with->forward(tx.raw(), s.m, tw.data(), nullptr, y.raw(), {.residual = tr.raw()}));
      ASSERT_OK(plain->forward(tx.raw(), s.m, tw.data(), nullptr, y_plain.raw()));
      const std::vector<float> sum = y.download(), product = y_plain.download();
      const std::vector<float> summed_in_place = in_place.download();
      EXPECT_EQ(tr.download(), residual) << "the residual is read, never written";
      if (!backend().is_cuda()) {
        EXPECT_EQ(summed_in_place, sum) << "a residual that is the output buffer itself";
      }
      const double rounding = act == DType::kFloat32 ? std::ldexp(1.0, -23) : std::ldexp(1.0, -7);
      for (size_t i = 0; i < sum.size(); ++i) {
        const double want = static_cast<double>(residual[i]) + product[i];
        const double bound = rounding * (std::fabs(residual[i]) + 2 * std::fabs(product[i])) + 1e-6;
        ASSERT_LE(std::fabs(sum[i] - want), bound) << i << ": " << sum[i] << " vs " << want;
        ASSERT_LE(std::fabs(summed_in_place[i] - want), bound) << i << " in place: " << summed_in_place[i] << " vs "
                                                              << want;
      }

      ASSERT_OK(with->backward(tg.raw(), gx.raw(), gw.data(), nullptr));
      ASSERT_OK(plain->backward(tg.raw(), gx_plain.raw(), gw_plain.data(), nullptr));
      EXPECT_EQ(gx.download(), gx_plain.download());
      EXPECT_EQ(gw.download(), gw_plain.download());
      for (Float8Linear* l : {with.get(), plain.get()}) ASSERT_OK(l->finish_step());
    }
  }
}

// ---- delayed scaling in the layer ------------------------------------------------------------------

TEST_F(FLOAT8_LINEAR_TEST, DelayedScalingUsesThePreviousStepsAmax) {
  const Shape s{64, 128, 96};
  const size_t m = 64, k = 128, n = 96;
  std::unique_ptr<Float8Linear> delayed = make_layer(backend(), s, recipe(v1::Fp8Spec::DELAYED));
  std::unique_ptr<Float8Linear> dynamic = make_layer(backend(), s, recipe(v1::Fp8Spec::TENSORWISE));
  ASSERT_NE(delayed, nullptr);
  ASSERT_NE(dynamic, nullptr);
  EXPECT_EQ(delayed->delayed().names(), (std::vector<std::string>{"input", "weight", "grad_output"}));
  EXPECT_EQ(dynamic->delayed().count(), 0);

  const std::vector<float> w = normal(n * k, 0.1f, 1), bias(n, 0.0f), g = normal(m * n, 1.0f, 2);
  const std::vector<float> x1 = normal(m * k, 1.0f, 3);
  // Step 1: no history yet, so it scales dynamically, and its amaxes become the history.
  const Results first = run_step(backend(), *delayed, s, x1, w, bias, g);
  EXPECT_GE(sqnr(reference_linear(s, x1, w, bias, g).output, first.output), 20.0);
  EXPECT_EQ(delayed->delayed().state(0)->history(), (std::vector<float>{max_abs(x1)}));
  EXPECT_EQ(delayed->delayed().state(1)->history(), (std::vector<float>{max_abs(w)}));
  EXPECT_EQ(delayed->delayed().state(2)->history(), (std::vector<float>{max_abs(g)}));
  EXPECT_EQ(delayed->delayed().state(0)->next_scale(), scale_from_amax(max_abs(x1), Format::kE4M3, false));
  EXPECT_EQ(delayed->delayed().state(2)->next_scale(), scale_from_amax(max_abs(g), Format::kE5M2, false));

  // Step 2: the input grows 8x. Delayed scaling still uses step 1's amax and clips; the
  // dynamic recipe rescales.
  const std::vector<float> x2 = scaled(normal(m * k, 1.0f, 4), 8.0f);
  const Reference ref2 = reference_linear(s, x2, w, bias, g);
  Tensor tx(backend(), x2), tw(backend(), w), out(backend(), m * n);
  ASSERT_OK(delayed->forward(tx.data(), s.m, tw.data(), nullptr, out.data()));
  const double delayed_sqnr = sqnr(ref2.output, out.download());
  absl::StatusOr<std::vector<CastNumerics>> stats = delayed->numerics();
  ASSERT_TRUE(stats.ok()) << stats.status();
  ASSERT_EQ((*stats)[0].tensor, TensorKind::kInput);
  EXPECT_EQ((*stats)[0].amax, max_abs(x2));
  EXPECT_EQ((*stats)[0].scale, scale_from_amax(max_abs(x1), Format::kE4M3, false));
  EXPECT_GT((*stats)[0].range_use, 4.0f) << "the input was clipped by about 8x";

  const double dynamic_sqnr = sqnr(ref2.output, run_step(backend(), *dynamic, s, x2, w, bias, g).output);
  std::printf("input grown 8x: output SQNR delayed %.1f dB, dynamic %.1f dB\n", delayed_sqnr, dynamic_sqnr);
  EXPECT_LT(delayed_sqnr, 10.0);
  EXPECT_GE(dynamic_sqnr, 20.0);

  // Finishing step 2 brings the larger amax into the window.
  Tensor tg(backend(), g), gw(backend(), n * k);
  ASSERT_OK(delayed->backward(tg.data(), nullptr, gw.data(), nullptr));
  ASSERT_OK(delayed->finish_step());
  EXPECT_EQ(delayed->delayed().state(0)->history(), (std::vector<float>{max_abs(x1), max_abs(x2)}));
  EXPECT_EQ(delayed->delayed().state(0)->next_scale(), scale_from_amax(max_abs(x2), Format::kE4M3, false));
}

TEST_F(FLOAT8_LINEAR_TEST, DelayedAmaxOfAStepIsTheMaxOverMicroBatches) {
  const Shape s{32, 64, 48};
  const size_t m = 32, k = 64, n = 48;
  std::unique_ptr<Float8Linear> layer = make_layer(backend(), s, recipe(v1::Fp8Spec::DELAYED));
  ASSERT_NE(layer, nullptr);
  const std::vector<float> w = normal(n * k, 0.1f, 1);
  Tensor tw(backend(), w), out(backend(), m * n), gw(backend(), n * k);
  std::vector<float> x_amax, g_amax;
  // More micro-batches than the slots first hold, so they grow mid-step.
  for (uint32_t micro = 0; micro < 11; ++micro) {
    const std::vector<float> x = normal(m * k, 1.0f + (micro % 4), 10 + micro);
    const std::vector<float> g = normal(m * n, 1.0f + (micro % 3), 40 + micro);
    x_amax.push_back(max_abs(x));
    g_amax.push_back(max_abs(g));
    Tensor tx(backend(), x), tg(backend(), g);
    ASSERT_OK(layer->forward(tx.data(), s.m, tw.data(), nullptr, out.data()));
    ASSERT_OK(layer->backward(tg.data(), nullptr, gw.data(), nullptr));
  }
  ASSERT_OK(layer->finish_step());
  EXPECT_EQ(layer->delayed().state(0)->history(),
            (std::vector<float>{*std::max_element(x_amax.begin(), x_amax.end())}));
  EXPECT_EQ(layer->delayed().state(2)->history(),
            (std::vector<float>{*std::max_element(g_amax.begin(), g_amax.end())}));
}

TEST_F(FLOAT8_LINEAR_TEST, EvaluationForwardMatchesAndLeavesDelayedScalingAlone) {
  const Shape s{32, 64, 48};
  const size_t m = 32, k = 64, n = 48;
  std::unique_ptr<Float8Linear> layer = make_layer(backend(), s, recipe(v1::Fp8Spec::DELAYED));
  ASSERT_NE(layer, nullptr);
  const std::vector<float> w = normal(n * k, 0.1f, 1), x = normal(m * k, 1.0f, 2), g = normal(m * n, 1.0f, 3);
  const std::vector<float> huge = scaled(normal(m * k, 1.0f, 4), 100.0f);
  Tensor tw(backend(), w), tx(backend(), x), tg(backend(), g), th(backend(), huge);
  Tensor train_out(backend(), m * n), eval_out(backend(), m * n), gw(backend(), n * k);

  ASSERT_OK(layer->forward(tx.data(), s.m, tw.data(), nullptr, train_out.data()));
  ASSERT_OK(layer->backward(tg.data(), nullptr, gw.data(), nullptr));
  ASSERT_OK(layer->finish_step());
  // Step 2: an evaluation pass over a much larger input, between forward and backward.
  ASSERT_OK(layer->forward(tx.data(), s.m, tw.data(), nullptr, train_out.data()));
  ASSERT_OK(layer->forward_no_grad(th.data(), s.m, tw.data(), nullptr, eval_out.data()));
  EXPECT_EQ(layer->backward(tg.data(), nullptr, gw.data(), nullptr).code(), absl::StatusCode::kFailedPrecondition)
      << "the evaluation pass replaced what backward() would differentiate";
  ASSERT_OK(layer->forward_no_grad(tx.data(), s.m, tw.data(), nullptr, eval_out.data()));
  EXPECT_EQ(eval_out.download(), train_out.download());
  ASSERT_OK(layer->forward(tx.data(), s.m, tw.data(), nullptr, train_out.data()));
  ASSERT_OK(layer->backward(tg.data(), nullptr, gw.data(), nullptr));
  ASSERT_OK(layer->finish_step());
  // The history saw the training input twice and never the evaluation one.
  EXPECT_EQ(layer->delayed().state(0)->history(), (std::vector<float>{max_abs(x), max_abs(x)}));
}

TEST_F(FLOAT8_LINEAR_TEST, DelayedScalingTakesAmaxesReducedElsewhere) {
  const Shape s{32, 64, 48};
  std::unique_ptr<Float8Linear> layer = make_layer(backend(), s, recipe(v1::Fp8Spec::DELAYED, 4));
  ASSERT_NE(layer, nullptr);
  // What the distributed engine does: its own all-reduced amaxes, one per delayed cast.
  Tensor reduced(backend(), std::vector<float>{2.0f, 4.0f, 8.0f});
  ASSERT_OK(layer->finish_step(reduced.data()));
  EXPECT_EQ(layer->delayed().state(1)->next_scale(), 112.0f);
  EXPECT_EQ(layer->delayed().state(2)->next_scale(), 57344.0f / 8.0f);
  EXPECT_EQ(layer->finish_step(nullptr).code(), absl::StatusCode::kInvalidArgument);
  // Without a forward this step there is nothing to record.
  EXPECT_EQ(layer->finish_step().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(FLOAT8_LINEAR_TEST, ScalingStateSurvivesACheckpoint) {
  const Shape s{32, 64, 48};
  const size_t m = 32, k = 64, n = 48;
  const Float8LinearConfig config = recipe(v1::Fp8Spec::DELAYED, 4);
  std::unique_ptr<Float8Linear> layer = make_layer(backend(), s, config);
  ASSERT_NE(layer, nullptr);
  const std::vector<float> w = normal(n * k, 0.1f, 1), bias(n, 0.0f), g = normal(m * n, 1.0f, 2);
  for (uint32_t step = 0; step < 3; ++step)
    run_step(backend(), *layer, s, normal(m * k, 1.0f + step, 3 + step), w, bias, g);
  const std::vector<float> saved = layer->save_scaling_state().value();

  std::unique_ptr<Float8Linear> resumed = make_layer(backend(), s, config);
  ASSERT_NE(resumed, nullptr);
  ASSERT_OK(resumed->restore_scaling_state(saved));
  for (int i = 0; i < layer->delayed().count(); ++i) {
    EXPECT_EQ(resumed->delayed().state(i)->history(), layer->delayed().state(i)->history());
    EXPECT_EQ(resumed->delayed().state(i)->next_scale(), layer->delayed().state(i)->next_scale());
  }
  // The next step runs identically on both.
  const std::vector<float> x = normal(m * k, 1.0f, 9);
  EXPECT_EQ(run_step(backend(), *resumed, s, x, w, bias, g).output,
            run_step(backend(), *layer, s, x, w, bias, g).output);

  std::vector<float> short_state(saved.begin(), saved.end() - 1);
  EXPECT_EQ(resumed->restore_scaling_state(short_state).code(), absl::StatusCode::kInvalidArgument);
}

// ---- numerics ------------------------------------------------------------------------------------

TEST_F(FLOAT8_LINEAR_TEST, NumericsReportEachCast) {
  const Shape s{32, 64, 48};
  const size_t m = 32, k = 64, n = 48;
  const std::vector<float> x = normal(m * k, 1.0f, 1), w = normal(n * k, 0.1f, 2), g = normal(m * n, 1e-3f, 3);
  const std::vector<float> bias(n, 0.0f);

  std::unique_ptr<Float8Linear> tensorwise = make_layer(backend(), s, recipe(v1::Fp8Spec::TENSORWISE));
  ASSERT_NE(tensorwise, nullptr);
  run_step(backend(), *tensorwise, s, x, w, bias, g);
  absl::StatusOr<std::vector<CastNumerics>> stats = tensorwise->numerics();
  ASSERT_TRUE(stats.ok()) << stats.status();
  // Tensorwise: one fused cast+transpose per tensor serves both of its GEMMs.
  ASSERT_EQ(stats->size(), 3u);
  const struct {
    TensorKind tensor;
    const char* gemms;
    float amax;
    Format format;
  } expected[] = {{TensorKind::kInput, "output+grad_weight", max_abs(x), Format::kE4M3},
                  {TensorKind::kWeight, "output+grad_input", max_abs(w), Format::kE4M3},
                  {TensorKind::kGradOutput, "grad_input+grad_weight", max_abs(g), Format::kE5M2}};
  for (size_t i = 0; i < 3; ++i) {
    const CastNumerics& c = (*stats)[i];
    EXPECT_EQ(c.tensor, expected[i].tensor);
    EXPECT_EQ(c.gemms, expected[i].gemms);
    EXPECT_EQ(c.amax, expected[i].amax);
    EXPECT_EQ(c.scale, scale_from_amax(expected[i].amax, expected[i].format, false));
    EXPECT_LE(c.range_use, 1.0f + 1e-6f);
    EXPECT_GE(c.range_use, 0.999f);
  }

  // Axiswise: the two orientations scale along different axes, so each tensor is cast twice.
  std::unique_ptr<Float8Linear> rowwise = make_layer(backend(), s, recipe(v1::Fp8Spec::ROWWISE));
  ASSERT_NE(rowwise, nullptr);
  run_step(backend(), *rowwise, s, x, w, bias, g);
  stats = rowwise->numerics();
  ASSERT_TRUE(stats.ok()) << stats.status();
  ASSERT_EQ(stats->size(), 6u);
  EXPECT_EQ((*stats)[0].gemms, "output");
  EXPECT_EQ((*stats)[1].gemms, "grad_weight");
  for (const CastNumerics& c : *stats) {
    // Power-of-2 scales round down, so the largest value uses between half and all of the range.
    EXPECT_GT(c.range_use, 0.5f);
    EXPECT_LE(c.range_use, 1.0f);
  }
}

// ---- measuring saturation and underflow ----------------------------------------------------------

// Bitwise equality (EXPECT_EQ on floats would call -0 == +0).
::testing::AssertionResult same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << "sizes " << a.size() << " vs " << b.size();
  if (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0) {
    return ::testing::AssertionSuccess();
  }
  for (size_t i = 0;; ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
      return ::testing::AssertionFailure() << "first difference at " << i << ": " << a[i] << " vs " << b[i];
    }
  }
}

// What count_cast_range must find for a tensorwise cast of `x` with `scale`, counted on
// the host with the same predicates (format_test checks them against float_to_fp8).
CastRangeCounts host_range_counts(const std::vector<float>& x, float scale, Format f) {
  CastRangeCounts c;
  for (float v : x) {
    c.saturated += fp8_saturates(v * scale, f);
    c.underflow += fp8_underflows(v, v * scale, f);
  }
  return c;
}

const CastNumerics* find_cast(const std::vector<CastNumerics>& all, TensorKind t) {
  for (const CastNumerics& c : all) {
    if (c.tensor == t) return &c;
  }
  return nullptr;
}

TEST_F(FLOAT8_LINEAR_TEST, MeasuringChangesNoResultForAnyRecipe) {
  const Shape s{64, 128, 96};
  const size_t m = 64, k = 128, n = 96;
  for (Recipe r : {v1::Fp8Spec::TENSORWISE, v1::Fp8Spec::ROWWISE, v1::Fp8Spec::ROWWISE_WITH_GW_HP,
                   v1::Fp8Spec::DELAYED}) {
    SCOPED_TRACE(v1::Fp8Spec::Recipe_Name(r));
    std::unique_ptr<Float8Linear> plain = make_layer(backend(), s, recipe(r));
    std::unique_ptr<Float8Linear> measured = make_layer(backend(), s, recipe(r));
    ASSERT_NE(plain, nullptr);
    ASSERT_NE(measured, nullptr);
    measured->set_measuring(true);
    const std::vector<float> w = normal(n * k, 0.1f, 1), bias = normal(n, 0.1f, 2);
    // grad_output stays the same, so that only the input can outgrow its delayed history.
    const std::vector<float> g = normal(m * n, 1e-3f, 3);
    for (uint32_t step = 0; step < 3; ++step) {
      // The input grows 8x in the last step: delayed scaling clips it, and the count sees it.
      const std::vector<float> x = scaled(normal(m * k, 1.0f, 10 + step), step == 2 ? 8.0f : 1.0f);
      const Results a = run_step(backend(), *plain, s, x, w, bias, g);
      const Results b = run_step(backend(), *measured, s, x, w, bias, g);
      EXPECT_TRUE(same_bits(a.output, b.output)) << "step " << step;
      EXPECT_TRUE(same_bits(a.grad_input, b.grad_input)) << "step " << step;
      EXPECT_TRUE(same_bits(a.grad_weight, b.grad_weight)) << "step " << step;
      EXPECT_TRUE(same_bits(a.grad_bias, b.grad_bias)) << "step " << step;
    }
    EXPECT_TRUE(same_bits(plain->save_scaling_state().value(), measured->save_scaling_state().value()));

    absl::StatusOr<std::vector<CastNumerics>> off = plain->numerics();
    absl::StatusOr<std::vector<CastNumerics>> on = measured->numerics();
    ASSERT_TRUE(off.ok()) << off.status();
    ASSERT_TRUE(on.ok()) << on.status();
    ASSERT_EQ(off->size(), on->size());
    for (size_t i = 0; i < on->size(); ++i) {
      const CastNumerics &o = (*off)[i], &c = (*on)[i];
      SCOPED_TRACE(c.gemms);
      EXPECT_EQ(o.amax, c.amax);
      EXPECT_EQ(o.scale, c.scale);
      EXPECT_EQ(o.range_use, c.range_use);
      EXPECT_FALSE(o.measured);
      EXPECT_EQ(o.saturated_ratio, 0.0f);
      EXPECT_EQ(o.underflow_ratio, 0.0f);
      EXPECT_TRUE(c.measured);
      EXPECT_EQ(c.elements, c.tensor == TensorKind::kInput    ? s.m * s.k
                            : c.tensor == TensorKind::kWeight ? s.n * s.k
                                                              : s.m * s.n);
      EXPECT_GE(c.saturated_ratio, 0.0f);
      EXPECT_LE(c.saturated_ratio, 1.0f);
      EXPECT_GE(c.underflow_ratio, 0.0f);
      EXPECT_LE(c.underflow_ratio, 1.0f);
      // Only the delayed input that grew 8x past its history clips; dynamic scales never do.
      const bool clips = r == v1::Fp8Spec::DELAYED && c.tensor == TensorKind::kInput;
      EXPECT_EQ(c.saturated > 0, clips) << c.saturated;
    }
  }
}

// An input of |x| in [0.1, 1] with max exactly 1, so that delayed scaling's next input scale
// is 448 exactly: then x·448 lands where we choose.
std::vector<float> unit_input(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.1f, 1.0f);
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = (i % 2 == 0 ? 1.0f : -1.0f) * u(rng);
  x[0] = 1.0f;
  return x;
}

TEST_F(FLOAT8_LINEAR_TEST, DelayedScalingCountsExactlyTheValuesItClipsAndFlushes) {
  const Shape s{64, 128, 96};
  const size_t m = 64, k = 128, n = 96;
  std::unique_ptr<Float8Linear> layer = make_layer(backend(), s, recipe(v1::Fp8Spec::DELAYED));
  ASSERT_NE(layer, nullptr);
  layer->set_measuring(true);
  const std::vector<float> w = normal(n * k, 0.1f, 1), bias(n, 0.0f), g = normal(m * n, 1e-3f, 2);
  const std::vector<float> x1 = unit_input(m * k, 3);

  // Step 1 has no history: it scales dynamically, which never saturates.
  run_step(backend(), *layer, s, x1, w, bias, g);
  absl::StatusOr<std::vector<CastNumerics>> stats = layer->numerics();
  ASSERT_TRUE(stats.ok()) << stats.status();
  ASSERT_EQ(stats->size(), 3u);
  for (const CastNumerics& c : *stats) EXPECT_EQ(c.saturated, 0) << tensor_kind_name(c.tensor);

  // Step 2: the input scale is 448 (from step 1's amax of 1). Plant values on both sides of
  // each boundary, 1 in 50 elements each.
  std::vector<float> x2 = x1;
  int64_t clipped = 0, flushed = 0;
  for (size_t i = 1; i < x2.size(); i += 50) {
    x2[i] = -2.0f;  // 896: clipped
    x2[i + 1] = 1.03f;  // 461.4: below 464 = max + half an ulp, rounds to 448, not clipped
    x2[i + 2] = 1.04f;  // 465.9: clipped
    x2[i + 3] = 1e-6f;  // 4.5e-4 <= 2^-10, half the smallest subnormal: flushed
    x2[i + 4] = -3e-6f;  // 1.3e-3: rounds to the smallest subnormal, 2^-9
    x2[i + 5] = 0.0f;   // zeros are exact
    clipped += 2;
    flushed += 1;
  }
  run_step(backend(), *layer, s, x2, w, bias, g);
  stats = layer->numerics();
  ASSERT_TRUE(stats.ok()) << stats.status();
  const CastNumerics* input = find_cast(*stats, TensorKind::kInput);
  ASSERT_NE(input, nullptr);
  EXPECT_EQ(input->scale, 448.0f);
  EXPECT_TRUE(input->measured);
  EXPECT_EQ(input->elements, s.m * s.k);
  EXPECT_EQ(input->saturated, clipped);
  EXPECT_EQ(input->underflow, flushed);
  EXPECT_FLOAT_EQ(input->saturated_ratio, static_cast<float>(clipped) / static_cast<float>(m * k));
  EXPECT_FLOAT_EQ(input->underflow_ratio, static_cast<float>(flushed) / static_cast<float>(m * k));
  EXPECT_GT(input->range_use, 1.0f);
  // The weight and grad_output did not change: nothing clips; what flushes is what the
  // host counts at the scale they used.
  for (TensorKind t : {TensorKind::kWeight, TensorKind::kGradOutput}) {
    const CastNumerics* c = find_cast(*stats, t);
    ASSERT_NE(c, nullptr);
    const CastRangeCounts want =
        host_range_counts(t == TensorKind::kWeight ? w : g, c->scale, c->config.format());
    EXPECT_EQ(c->saturated, 0) << tensor_kind_name(t);
    EXPECT_EQ(c->underflow, static_cast<int64_t>(want.underflow)) << tensor_kind_name(t);
  }

  // Dynamic recipes rescale to the planted outliers: nothing clips, by construction. With
  // tensorwise scale 448 / 2, both tiny values flush.
  for (Recipe r : {v1::Fp8Spec::TENSORWISE, v1::Fp8Spec::ROWWISE, v1::Fp8Spec::ROWWISE_WITH_GW_HP}) {
    SCOPED_TRACE(v1::Fp8Spec::Recipe_Name(r));
    std::unique_ptr<Float8Linear> dynamic = make_layer(backend(), s, recipe(r));
    ASSERT_NE(dynamic, nullptr);
    dynamic->set_measuring(true);
    run_step(backend(), *dynamic, s, x2, w, bias, g);
    absl::StatusOr<std::vector<CastNumerics>> d = dynamic->numerics();
    ASSERT_TRUE(d.ok()) << d.status();
    for (const CastNumerics& c : *d) {
      EXPECT_TRUE(c.measured);
      EXPECT_EQ(c.saturated, 0) << tensor_kind_name(c.tensor) << " " << c.gemms;
      if (c.tensor == TensorKind::kInput) {
        EXPECT_GT(c.underflow, 0) << c.gemms;
      }
    }
    if (r == v1::Fp8Spec::TENSORWISE) {
      const CastNumerics* in = find_cast(*d, TensorKind::kInput);
      ASSERT_NE(in, nullptr);
      EXPECT_EQ(in->scale, 224.0f);
      EXPECT_EQ(in->underflow, 2 * flushed);
    }
  }
}

TEST_F(FLOAT8_LINEAR_TEST, CastsRunWhileNotMeasuringReportUnmeasured) {
  const Shape s{64, 128, 96};
  const size_t m = 64, k = 128, n = 96;
  std::unique_ptr<Float8Linear> layer = make_layer(backend(), s, recipe(v1::Fp8Spec::TENSORWISE));
  ASSERT_NE(layer, nullptr);
  const std::vector<float> x = normal(m * k, 1.0f, 1), w = normal(n * k, 0.1f, 2), g = normal(m * n, 1e-3f, 3);
  const std::vector<float> bias(n, 0.0f);
  layer->set_measuring(true);
  Tensor tx(backend(), x), tw(backend(), w), tg(backend(), g), out(backend(), m * n), gw(backend(), n * k);
  ASSERT_OK(layer->forward(tx.data(), s.m, tw.data(), nullptr, out.data()));
  layer->set_measuring(false);
  ASSERT_OK(layer->backward(tg.data(), nullptr, gw.data(), nullptr));
  ASSERT_OK(layer->finish_step());
  absl::StatusOr<std::vector<CastNumerics>> stats = layer->numerics();
  ASSERT_TRUE(stats.ok()) << stats.status();
  ASSERT_EQ(stats->size(), 3u);
  EXPECT_TRUE(find_cast(*stats, TensorKind::kInput)->measured);
  EXPECT_TRUE(find_cast(*stats, TensorKind::kWeight)->measured);
  EXPECT_FALSE(find_cast(*stats, TensorKind::kGradOutput)->measured);
  // The next forward, unmeasured, replaces the input's and weight's counts too.
  ASSERT_OK(layer->forward_no_grad(tx.data(), s.m, tw.data(), nullptr, out.data()));
  stats = layer->numerics();
  ASSERT_TRUE(stats.ok()) << stats.status();
  for (const CastNumerics& c : *stats) EXPECT_FALSE(c.measured) << tensor_kind_name(c.tensor);
}

// ---- configs from a job spec ---------------------------------------------------------------------

constexpr char kLongFormJob[] = R"(
name: long-form
model: {dim: 64, n_layers: 1, n_heads: 4, max_seq_len: 64}
data: {path: corpus.txt}
train: {steps: 1, batch_size: 4, lr: 1e-3}
fp8:
  recipe: tensorwise
  gemms:
    output:
      input: {dtype: e4m3, granularity: tensorwise}
      weight: {dtype: e4m3, granularity: tensorwise}
    grad_input:
      grad_output: {dtype: e5m2}
      weight: {dtype: e4m3}
    grad_weight:
      grad_output: {dtype: high_precision}
      input: {dtype: high_precision}
)";

TEST_F(FLOAT8_LINEAR_TEST, LongFormFromAJobSpecBuildsAndRuns) {
  absl::StatusOr<v1::JobSpec> spec = jobspec::load_job_spec_string(kLongFormJob, "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  absl::StatusOr<Float8LinearConfig> config = config_from_spec(spec->fp8());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(describe(config->output.input), "e4m3 tensorwise dynamic");
  EXPECT_EQ(describe(config->grad_input.grad_output), "e5m2 tensorwise dynamic");
  EXPECT_EQ(describe(config->grad_input.weight), "e4m3 tensorwise dynamic");
  EXPECT_EQ(describe(config->grad_weight.grad_output), "high_precision");
  EXPECT_EQ(describe(config->grad_weight.input), "high_precision");
  EXPECT_TRUE(config->output.fast_accum);
  EXPECT_FALSE(config->grad_input.fast_accum);

  const Shape s{64, 128, 96};
  const size_t m = 64, k = 128, n = 96;
  std::unique_ptr<Float8Linear> layer = make_layer(backend(), s, *config);
  ASSERT_NE(layer, nullptr);
  const std::vector<float> x = normal(m * k, 1.0f, 1), w = normal(n * k, 0.1f, 2), g = normal(m * n, 1.0f, 3);
  const std::vector<float> bias = normal(n, 0.1f, 4);
  const Reference ref = reference_linear(s, x, w, bias, g);
  const Results r = run_step(backend(), *layer, s, x, w, bias, g);
  EXPECT_GE(sqnr(ref.output, r.output), 20.0);
  EXPECT_GE(sqnr(ref.grad_input, r.grad_input), 20.0);
  EXPECT_LE(max_relative_error(ref.grad_weight, r.grad_weight), 1e-5) << "grad_weight runs in high precision";
}

TEST_F(FLOAT8_LINEAR_TEST, MixedGemmsRunInHighPrecisionOnTheDequantizedOperand) {
  // One fp8 operand per backward GEMM, including an axiswise one used transposed.
  Float8LinearConfig c = recipe(v1::Fp8Spec::TENSORWISE);
  c.grad_input.weight = CastConfig{};  // high precision
  c.grad_weight.grad_output = {CastDtype::kE4M3, ScaleGranularity::kAxiswise, ScalingMode::kDynamic, true};
  c.grad_weight.input = CastConfig{};
  ASSERT_OK(validate(c));
  EXPECT_FALSE(c.grad_input_runs_in_fp8());
  EXPECT_FALSE(c.grad_weight_runs_in_fp8());

  const Shape s{64, 128, 96};
  const size_t m = 64, k = 128, n = 96;
  std::unique_ptr<Float8Linear> layer = make_layer(backend(), s, c);
  ASSERT_NE(layer, nullptr);
  const std::vector<float> x = normal(m * k, 1.0f, 1), w = normal(n * k, 0.1f, 2), g = normal(m * n, 1.0f, 3);
  const std::vector<float> bias(n, 0.0f);
  const Reference ref = reference_linear(s, x, w, bias, g);
  const Results r = run_step(backend(), *layer, s, x, w, bias, g);
  EXPECT_GE(sqnr(ref.output, r.output), 20.0);
  EXPECT_GE(sqnr(ref.grad_input, r.grad_input), 20.0);
  EXPECT_GE(sqnr(ref.grad_weight, r.grad_weight), 20.0);
  // Quantized, so not exact.
  EXPECT_GT(max_relative_error(ref.grad_input, r.grad_input), 1e-5);
}

// ---- bad configs and bad calls ----------------------------------------------------------------------

// ---- sibling layers sharing one input cast ----------------------------------------------------

// A q/k/v-like group: `source` and `sibling` read one input; `sibling` takes source's input
// casts, `twin` (sibling's config) casts its own. Sibling and twin must agree bit for bit.
struct SiblingCase {
  const char* name;
  Float8LinearConfig config;
  LinearActivations activations;
};

std::vector<SiblingCase> sibling_cases() {
  // A mixed config: grad_weight in high precision on dequantized fp8 copies of the input.
  Float8LinearConfig mixed = recipe(v1::Fp8Spec::TENSORWISE);
  mixed.grad_weight.grad_output = CastConfig{};
  std::vector<SiblingCase> cases;
  for (const LinearActivations& a : {LinearActivations{}, kBf16Activations}) {
    const bool bf16 = a.input == DType::kBFloat16;
    cases.push_back({bf16 ? "tensorwise bf16" : "tensorwise", recipe(v1::Fp8Spec::TENSORWISE), a});
    cases.push_back({bf16 ? "rowwise bf16" : "rowwise", recipe(v1::Fp8Spec::ROWWISE), a});
    cases.push_back({bf16 ? "rowwise_with_gw_hp bf16" : "rowwise_with_gw_hp", recipe(v1::Fp8Spec::ROWWISE_WITH_GW_HP), a});
    cases.push_back({bf16 ? "mixed bf16" : "mixed", mixed, a});
  }
  return cases;
}

TEST_F(FLOAT8_LINEAR_TEST, SiblingsSharingOneInputCastMatchTheirOwnCastsBitForBit) {
  const size_t m = 64, k = 128, n_source = 96, n = 32;
  for (const SiblingCase& c : sibling_cases()) {
    SCOPED_TRACE(c.name);
    std::unique_ptr<Float8Linear> source = make_layer(backend(), {64, 128, 96}, c.config, c.activations);
    std::unique_ptr<Float8Linear> sibling = make_layer(backend(), {64, 128, 32}, c.config, c.activations);
    std::unique_ptr<Float8Linear> twin = make_layer(backend(), {64, 128, 32}, c.config, c.activations);
    ASSERT_TRUE(source && sibling && twin);
    ASSERT_TRUE(sibling->share_input_casts_from(*source));
    for (Float8Linear* l : {source.get(), sibling.get(), twin.get()}) l->set_measuring(true);
    float8_test::CastCounts sibling_counts, twin_counts;
    sibling->set_observer(&sibling_counts);
    twin->set_observer(&twin_counts);
    const DType in = c.activations.input, out = c.activations.output;
    Tensor x(backend(), scaled(normal(m * k, 1.0f, 1), 3.0f), in), other_x(backend(), normal(m * k, 1.0f, 9), in);
    Tensor w_source(backend(), normal(n_source * k, 0.1f, 2)), w(backend(), normal(n * k, 0.1f, 3));
    Tensor g_source(backend(), normal(m * n_source, 1.0f, 4), out), g(backend(), normal(m * n, 1.0f, 5), out);
    Tensor y_source(backend(), m * n_source, 0.0f, out), y_sibling(backend(), m * n, 0.0f, out),
        y_twin(backend(), m * n, 0.0f, out);
    Tensor gx_source(backend(), m * k, 0.0f, in), gx_sibling(backend(), m * k, 0.0f, in),
        gx_twin(backend(), m * k, 0.0f, in);
    Tensor gw_source(backend(), n_source * k), gw_sibling(backend(), n * k), gw_twin(backend(), n * k);

    for (int step = 0; step < 2; ++step) {
      SCOPED_TRACE(step);
      ASSERT_OK(source->forward(x.raw(), m, w_source.data(), nullptr, y_source.raw()));
      ASSERT_OK(sibling->forward(x.raw(), m, w.data(), nullptr, y_sibling.raw()));
      ASSERT_OK(twin->forward(x.raw(), m, w.data(), nullptr, y_twin.raw()));
      EXPECT_EQ(sibling_counts.shared_input_casts, step + 1) << "the sibling cast its input itself";
      EXPECT_EQ(twin_counts.shared_input_casts, 0);
      // Backward in the model's order: the sibling's before the source's.
      ASSERT_OK(sibling->backward(g.raw(), gx_sibling.raw(), gw_sibling.data(), nullptr));
      ASSERT_OK(twin->backward(g.raw(), gx_twin.raw(), gw_twin.data(), nullptr));
      ASSERT_OK(source->backward(g_source.raw(), gx_source.raw(), gw_source.data(), nullptr));
      EXPECT_TRUE(same_bits(y_sibling.download(), y_twin.download()));
      EXPECT_TRUE(same_bits(gx_sibling.download(), gx_twin.download()));
      EXPECT_TRUE(same_bits(gw_sibling.download(), gw_twin.download()));
      for (Float8Linear* l : {source.get(), sibling.get(), twin.get()}) ASSERT_OK(l->finish_step());
    }
    // numerics() reports the shared cast for the sibling's input: what the twin measured.
    absl::StatusOr<std::vector<CastNumerics>> shared = sibling->numerics(), own = twin->numerics();
    ASSERT_TRUE(shared.ok() && own.ok());
    ASSERT_EQ(shared->size(), own->size());
    for (size_t i = 0; i < own->size(); ++i) {
      SCOPED_TRACE((*own)[i].gemms);
      EXPECT_EQ((*shared)[i].amax, (*own)[i].amax);
      EXPECT_EQ((*shared)[i].scale, (*own)[i].scale);
      EXPECT_EQ((*shared)[i].range_use, (*own)[i].range_use);
      EXPECT_EQ((*shared)[i].measured, (*own)[i].measured);
      EXPECT_EQ((*shared)[i].saturated, (*own)[i].saturated);
      EXPECT_EQ((*shared)[i].underflow, (*own)[i].underflow);
    }

    // Another input than the source's last: the sibling casts it itself, with the same results.
    ASSERT_OK(source->forward(x.raw(), m, w_source.data(), nullptr, y_source.raw()));
    ASSERT_OK(sibling->forward(other_x.raw(), m, w.data(), nullptr, y_sibling.raw()));
    ASSERT_OK(twin->forward(other_x.raw(), m, w.data(), nullptr, y_twin.raw()));
    EXPECT_EQ(sibling_counts.shared_input_casts, 2);
    EXPECT_TRUE(same_bits(y_sibling.download(), y_twin.download()));
    ASSERT_OK(sibling->backward(g.raw(), gx_sibling.raw(), gw_sibling.data(), nullptr));
    ASSERT_OK(twin->backward(g.raw(), gx_twin.raw(), gw_twin.data(), nullptr));
    EXPECT_TRUE(same_bits(gx_sibling.download(), gx_twin.download()));
    EXPECT_TRUE(same_bits(gw_sibling.download(), gw_twin.download()));

    // The source casts again (an evaluation forward) before the sibling's backward: the
    // copies the sibling took are gone, and its backward refuses rather than read others.
    ASSERT_OK(source->forward(x.raw(), m, w_source.data(), nullptr, y_source.raw()));
    ASSERT_OK(sibling->forward(x.raw(), m, w.data(), nullptr, y_sibling.raw()));
    ASSERT_OK(source->forward_no_grad(other_x.raw(), m, w_source.data(), nullptr, y_source.raw()));
    const absl::Status refused = sibling->backward(g.raw(), gx_sibling.raw(), gw_sibling.data(), nullptr);
    EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  }
}

// ---- row amaxes (what an RMSNorm or a SwiGLU hands the linear after it) -----------------------

// A layer handed the row amaxes of its input and weight (in the forward) and of its
// grad_output (in the backward) computes every output, gradient and statistic bit for bit
// as one that reads the tensors for them, over steps and in evaluation; the casts that can
// use them (dynamic scaling at tensorwise or rowwise granularity) do, others ignore them.
TEST_F(FLOAT8_LINEAR_TEST, RowAmaxesChangeNoResultAndServeTheDynamicRowCasts) {
  const size_t m = 64, k = 128, n = 96;
  struct Case {
    std::string name;
    Float8LinearConfig config;
    LinearActivations activations;
    bool reads;  // info().needs.row_amax of each tensor
    // Casts that take them per step: with `reads`, every dynamic cast that is not
    // columnwise (one each of the input, the weight and grad_output; rowwise_with_gw_hp
    // casts the weight twice, by its rows for each of its fp8 GEMMs); a delayed cast is
    // dynamic (and takes them) only in its first step, before it has a history.
    int64_t per_step;
    int64_t took_after(int step) const { return reads ? per_step * (step + 1) : per_step; }
  };
  std::vector<Case> cases;
  for (const LinearActivations& a : {LinearActivations{}, kBf16Activations}) {
    const std::string suffix = a.input == DType::kBFloat16 ? " bf16" : "";
    cases.push_back({"tensorwise" + suffix, recipe(v1::Fp8Spec::TENSORWISE), a, true, 3});
    cases.push_back({"rowwise" + suffix, recipe(v1::Fp8Spec::ROWWISE), a, true, 3});
    cases.push_back({"rowwise_with_gw_hp" + suffix, recipe(v1::Fp8Spec::ROWWISE_WITH_GW_HP), a, true, 4});
    cases.push_back({"delayed" + suffix, recipe(v1::Fp8Spec::DELAYED), a, false, 3});
    cases.push_back({"none" + suffix, recipe(v1::Fp8Spec::NONE), a, false, 0});
  }
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::unique_ptr<Float8Linear> hinted = make_layer(backend(), {64, 128, 96}, c.config, c.activations);
    std::unique_ptr<Float8Linear> plain = make_layer(backend(), {64, 128, 96}, c.config, c.activations);
    ASSERT_TRUE(hinted && plain);
    float8_test::CastCounts hinted_counts;
    hinted->set_observer(&hinted_counts);
    EXPECT_EQ(hinted->info().needs.row_amax_of(TensorKind::kInput), c.reads);
    EXPECT_EQ(hinted->info().needs.row_amax_of(TensorKind::kWeight), c.reads);
    EXPECT_EQ(hinted->info().needs.row_amax_of(TensorKind::kGradOutput), c.reads);
    const DType in = c.activations.input, out = c.activations.output;
    Tensor x(backend(), scaled(normal(m * k, 1.0f, 11), 5.0f), in), w(backend(), normal(n * k, 0.1f, 12));
    Tensor g(backend(), normal(m * n, 1.0f, 13), out);
    Tensor y_hinted(backend(), m * n, 0.0f, out), y_plain(backend(), m * n, 0.0f, out);
    Tensor gx_hinted(backend(), m * k, 0.0f, in), gx_plain(backend(), m * k, 0.0f, in);
    Tensor gw_hinted(backend(), n * k), gw_plain(backend(), n * k);
    Tensor row_amax(backend(), m), grad_row_amax(backend(), m), weight_row_amax(backend(), n);
    ASSERT_OK(backend().amax(MatrixRef{w.raw(), DType::kFloat32, static_cast<int64_t>(n), static_cast<int64_t>(k)},
                             Granularity::kRowwise, weight_row_amax.data()));
    ASSERT_OK(backend().amax(MatrixRef{x.raw(), in, static_cast<int64_t>(m), static_cast<int64_t>(k)},
                             Granularity::kRowwise, row_amax.data()));
    ASSERT_OK(backend().amax(MatrixRef{g.raw(), out, static_cast<int64_t>(m), static_cast<int64_t>(n)},
                             Granularity::kRowwise, grad_row_amax.data()));
    for (int step = 0; step < 3; ++step) {
      SCOPED_TRACE(step);
      ASSERT_OK(hinted->forward(x.raw(), m, w.data(), nullptr, y_hinted.raw(),
                                {.input_row_amax = row_amax.data(), .weight_row_amax = weight_row_amax.data()}));
      ASSERT_OK(plain->forward(x.raw(), m, w.data(), nullptr, y_plain.raw()));
      ASSERT_OK(hinted->backward(g.raw(), gx_hinted.raw(), gw_hinted.data(), nullptr,
                                 {.grad_output_row_amax = grad_row_amax.data()}));
      ASSERT_OK(plain->backward(g.raw(), gx_plain.raw(), gw_plain.data(), nullptr));
      EXPECT_TRUE(same_bits(y_hinted.download(), y_plain.download()));
      EXPECT_TRUE(same_bits(gx_hinted.download(), gx_plain.download()));
      EXPECT_TRUE(same_bits(gw_hinted.download(), gw_plain.download()));
      EXPECT_EQ(hinted_counts.row_amax_casts, c.took_after(step));
      for (Float8Linear* l : {hinted.get(), plain.get()}) ASSERT_OK(l->finish_step());
    }
    ASSERT_OK(hinted->forward_no_grad(x.raw(), m, w.data(), nullptr, y_hinted.raw(),
                                      {.input_row_amax = row_amax.data(), .weight_row_amax = weight_row_amax.data()}));
    ASSERT_OK(plain->forward_no_grad(x.raw(), m, w.data(), nullptr, y_plain.raw()));
    EXPECT_TRUE(same_bits(y_hinted.download(), y_plain.download())) << "evaluation forward";
    absl::StatusOr<std::vector<CastNumerics>> a = hinted->numerics(), b = plain->numerics();
    ASSERT_TRUE(a.ok() && b.ok());
    ASSERT_EQ(a->size(), b->size());
    for (size_t i = 0; i < a->size(); ++i) {
      SCOPED_TRACE((*b)[i].gemms);
      EXPECT_EQ((*a)[i].amax, (*b)[i].amax);
      EXPECT_EQ((*a)[i].scale, (*b)[i].scale);
    }
  }
}

// The rowwise recipe casts each tensor by its rows for one GEMM and by its columns,
// transposed, for another: one quantize makes both (on a GPU, two reads of the tensor
// instead of four). Recipes whose second cast differs in granularity (rowwise_with_gw_hp's
// tensorwise weight for grad_input) or that have none keep their casts apart.
TEST_F(FLOAT8_LINEAR_TEST, RowwiseCastsOfATensorRunAsOneQuantize) {
  const size_t m = 64, k = 128, n = 96;
  const std::pair<Recipe, int64_t> cases[] = {{v1::Fp8Spec::ROWWISE, 3},
                                              {v1::Fp8Spec::ROWWISE_WITH_GW_HP, 0},
                                              {v1::Fp8Spec::TENSORWISE, 0},
                                              {v1::Fp8Spec::DELAYED, 0}};
  for (const LinearActivations& a : {LinearActivations{}, kBf16Activations}) {
    for (const auto& [r, per_step] : cases) {
      SCOPED_TRACE(::testing::Message() << v1::Fp8Spec::Recipe_Name(r) << " " << dtype_name(a.input));
      std::unique_ptr<Float8Linear> layer = make_layer(backend(), {64, 128, 96}, recipe(r), a);
      ASSERT_NE(layer, nullptr);
      float8_test::CastCounts counts;
      layer->set_observer(&counts);
      Tensor x(backend(), normal(m * k, 1.0f, 21), a.input), w(backend(), normal(n * k, 0.1f, 22));
      Tensor g(backend(), normal(m * n, 1.0f, 23), a.output), y(backend(), m * n, 0.0f, a.output);
      Tensor gx(backend(), m * k, 0.0f, a.input), gw(backend(), n * k);
      for (int64_t step = 1; step <= 2; ++step) {
        ASSERT_OK(layer->forward(x.raw(), m, w.data(), nullptr, y.raw()));
        ASSERT_OK(layer->backward(g.raw(), gx.raw(), gw.data(), nullptr));
        ASSERT_OK(layer->finish_step());
        EXPECT_EQ(counts.tensors_cast_both_ways, per_step * step) << "after step " << step;
      }
    }
  }
}

TEST_F(FLOAT8_LINEAR_TEST, OnlyLayersThatCastTheirInputAlikeShareIt) {
  const Float8LinearConfig tensorwise = recipe(v1::Fp8Spec::TENSORWISE);
  std::unique_ptr<Float8Linear> source = make_layer(backend(), {64, 128, 96}, tensorwise);
  ASSERT_NE(source, nullptr);
  struct Case {
    const char* why;
    std::unique_ptr<Float8Linear> layer;
  };
  std::vector<Case> cases;
  cases.push_back({"delayed scaling: each layer's scale is its own",
                   make_layer(backend(), {64, 128, 32}, recipe(v1::Fp8Spec::DELAYED))});
  cases.push_back({"another input cast", make_layer(backend(), {64, 128, 32}, recipe(v1::Fp8Spec::ROWWISE))});
  cases.push_back({"another input width", make_layer(backend(), {64, 256, 32}, tensorwise)});
  cases.push_back({"another input dtype", make_layer(backend(), {64, 128, 32}, tensorwise, kBf16Activations)});
  cases.push_back({"no fp8 cast of the input", make_layer(backend(), {64, 128, 32}, recipe(v1::Fp8Spec::NONE))});
  for (Case& c : cases) {
    SCOPED_TRACE(c.why);
    ASSERT_NE(c.layer, nullptr);
    EXPECT_FALSE(c.layer->share_input_casts_from(*source));
  }
  EXPECT_FALSE(source->share_input_casts_from(*source)) << "a layer is not its own sibling";
  std::unique_ptr<Float8Linear> sibling = make_layer(backend(), {64, 128, 32}, tensorwise);
  std::unique_ptr<Float8Linear> third = make_layer(backend(), {64, 128, 32}, tensorwise);
  ASSERT_TRUE(sibling->share_input_casts_from(*source));
  EXPECT_FALSE(third->share_input_casts_from(*sibling)) << "a layer sharing another's casts is no source";
  EXPECT_TRUE(third->share_input_casts_from(*source));
}

void expect_rejected(const absl::Status& s, const std::string& where, const std::string& why) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find(where), std::string::npos) << s;
  EXPECT_NE(s.message().find(why), std::string::npos) << s;
}

TEST_F(FLOAT8_LINEAR_TEST, BadConfigsAreRejectedWithTheOperandNamed) {
  v1::Fp8Spec e5m2_twice;
  e5m2_twice.set_recipe(v1::Fp8Spec::TENSORWISE);
  e5m2_twice.mutable_gemms()->mutable_grad_input()->mutable_weight()->set_dtype(v1::CastConfig::E5M2);
  expect_rejected(config_from_spec(e5m2_twice).status(), "fp8.gemms.grad_input", "e5m2 x e5m2");

  v1::Fp8Spec axiswise_delayed;
  axiswise_delayed.set_recipe(v1::Fp8Spec::DELAYED);
  axiswise_delayed.mutable_gemms()->mutable_output()->mutable_input()->set_granularity(v1::CastConfig::AXISWISE);
  expect_rejected(config_from_spec(axiswise_delayed).status(), "fp8.gemms.output.input", "tensorwise");

  v1::Fp8Spec no_history;
  no_history.set_recipe(v1::Fp8Spec::DELAYED);
  no_history.set_amax_history_len(0);
  expect_rejected(config_from_spec(no_history).status(), "fp8.amax_history_len", "[1, 4096]");

  // A config built in code gets the same checks at construction.
  Float8LinearConfig c = recipe(v1::Fp8Spec::TENSORWISE);
  c.grad_weight.input.dtype = CastDtype::kE5M2;
  expect_rejected(Float8Linear::create(backend(), 64, 64, c).status(), "fp8.gemms.grad_weight", "e5m2 x e5m2");
  expect_rejected(Float8Linear::create(backend(), 0, 64, recipe(v1::Fp8Spec::NONE)).status(), "Float8Linear",
                  "positive");
}

TEST_F(FLOAT8_LINEAR_TEST, BadCallsAreRejected) {
  const Shape s{32, 64, 48};
  std::unique_ptr<Float8Linear> layer = make_layer(backend(), s, recipe(v1::Fp8Spec::TENSORWISE));
  ASSERT_NE(layer, nullptr);
  Tensor g(backend(), 32 * 48), gw(backend(), 48 * 64), x(backend(), 32 * 64), out(backend(), 32 * 48);
  EXPECT_EQ(layer->backward(g.data(), nullptr, gw.data(), nullptr).code(), absl::StatusCode::kFailedPrecondition);
  expect_rejected(layer->forward(x.data(), 0, gw.data(), nullptr, out.data()), "forward", "tokens");
  expect_rejected(layer->forward(nullptr, 32, gw.data(), nullptr, out.data()), "forward", "null");
}

// ---- bf16 activations: the output projection, mixed dtypes, scaling state, bad dtypes -------------

// A model's output projection: bf16 hidden states in, fp32 logits out, and an fp32
// gradient from the loss. With recipe none every GEMM runs in bf16: exactly the fp64 linear
// of the bf16-rounded input, weight and grad_output, up to fp32 accumulation (grad_output
// is converted to bf16 for both backward GEMMs, as autocast would).
TEST_F(FLOAT8_LINEAR_TEST, OutputProjectionWithRecipeNoneRunsEveryGemmInBf16) {
  const Shape s{64, 128, 96};
  const size_t m = 64, k = 128, n = 96;
  const std::vector<float> x = bf16_rounded(normal(m * k, 1.0f, 1)), w = normal(n * k, 0.1f, 2);
  const std::vector<float> bias = normal(n, 0.1f, 3), g = normal(m * n, 1e-3f, 4);
  std::unique_ptr<Float8Linear> layer =
      make_layer(backend(), s, recipe(v1::Fp8Spec::NONE), {DType::kBFloat16, DType::kFloat32});
  ASSERT_NE(layer, nullptr);
  const Results r = run_step(backend(), *layer, s, x, w, bias, g);

  const Reference bf16_ref = reference_linear(s, x, bf16_rounded(w), bias, bf16_rounded(g));
  EXPECT_LE(max_relative_error(bf16_ref.output, r.output), 1e-5);
  EXPECT_LE(max_relative_error(bf16_ref.grad_input, r.grad_input), 1.0 / 256 + 1e-5) << "written in bf16";
  EXPECT_LE(max_relative_error(bf16_ref.grad_weight, r.grad_weight), 1e-5);
  // The bias gradient sums grad_output as it came, in fp32.
  const Reference f32_ref = reference_linear(s, x, w, bias, g);
  EXPECT_LE(max_relative_error(f32_ref.grad_bias, r.grad_bias), 1e-5);
  // bf16 GEMMs really: against the fp32 weight and grad_output the error is bf16-sized.
  EXPECT_GT(max_relative_error(f32_ref.output, r.output), 1e-4);
  EXPECT_GT(max_relative_error(f32_ref.grad_weight, r.grad_weight), 1e-4);
}

// The same with fp8 GEMMs: the casts read bf16 input and fp32 grad_output as they are, so
// everything but grad_input (written in bf16) equals the fp32 layer's on the same values.
TEST_F(FLOAT8_LINEAR_TEST, OutputProjectionWithTensorwiseCastsEachActivationInItsDtype) {
  const Shape s{64, 128, 96};
  const size_t m = 64, k = 128, n = 96;
  const std::vector<float> x = bf16_rounded(normal(m * k, 1.0f, 1)), w = normal(n * k, 0.1f, 2);
  const std::vector<float> bias = normal(n, 0.1f, 3), g = normal(m * n, 1e-3f, 4);
  std::unique_ptr<Float8Linear> f32 = make_layer(backend(), s, recipe(v1::Fp8Spec::TENSORWISE));
  std::unique_ptr<Float8Linear> proj =
      make_layer(backend(), s, recipe(v1::Fp8Spec::TENSORWISE), {DType::kBFloat16, DType::kFloat32});
  ASSERT_NE(f32, nullptr);
  ASSERT_NE(proj, nullptr);
  const Results a = run_step(backend(), *f32, s, x, w, bias, g);
  const Results b = run_step(backend(), *proj, s, x, w, bias, g);
  EXPECT_EQ(b.output, a.output);
  EXPECT_EQ(b.grad_weight, a.grad_weight);
  EXPECT_EQ(b.grad_bias, a.grad_bias);
  EXPECT_LE(max_relative_error(widened(a.grad_input), b.grad_input), 1.0 / 256);
  const Reference ref = reference_linear(s, x, w, bias, g);
  EXPECT_GE(sqnr(ref.output, b.output), 20.0);
  EXPECT_GE(sqnr(ref.grad_input, b.grad_input), 20.0);
  EXPECT_GE(sqnr(ref.grad_weight, b.grad_weight), 20.0);
}

// The other mixed pair: fp32 input (compute dtype fp32) and bf16 output, so a bf16
// grad_output is widened for the fp32 GEMMs.
TEST_F(FLOAT8_LINEAR_TEST, Fp32InputWithBf16OutputWidensGradOutput) {
  const Shape s{64, 128, 96};
  const size_t m = 64, k = 128, n = 96;
  const std::vector<float> x = normal(m * k, 1.0f, 1), w = normal(n * k, 0.1f, 2);
  const std::vector<float> bias = normal(n, 0.1f, 3), g = bf16_rounded(normal(m * n, 1e-3f, 4));
  std::unique_ptr<Float8Linear> f32 = make_layer(backend(), s, recipe(v1::Fp8Spec::NONE));
  std::unique_ptr<Float8Linear> layer =
      make_layer(backend(), s, recipe(v1::Fp8Spec::NONE), {DType::kFloat32, DType::kBFloat16});
  ASSERT_NE(f32, nullptr);
  ASSERT_NE(layer, nullptr);
  const Results a = run_step(backend(), *f32, s, x, w, bias, g);
  const Results b = run_step(backend(), *layer, s, x, w, bias, g);
  EXPECT_LE(max_relative_error(widened(a.output), b.output), 1.0 / 256) << "written in bf16";
  EXPECT_LE(max_relative_error(widened(a.grad_input), b.grad_input), 1e-6);
  EXPECT_LE(max_relative_error(widened(a.grad_weight), b.grad_weight), 1e-6);
  EXPECT_LE(max_relative_error(widened(a.grad_bias), b.grad_bias), 1e-6);
}

// Mixed GEMMs (one fp8 operand) run in bf16 on a bf16 dequantized copy.
TEST_F(FLOAT8_LINEAR_TEST, MixedGemmsWithBf16ActivationsRunOnBf16DequantizedCopies) {
  Float8LinearConfig c = recipe(v1::Fp8Spec::TENSORWISE);
  c.grad_input.weight = CastConfig{};
  c.grad_weight.grad_output = {CastDtype::kE4M3, ScaleGranularity::kAxiswise, ScalingMode::kDynamic, true};
  c.grad_weight.input = CastConfig{};
  const Shape s{64, 128, 96};
  const size_t m = 64, k = 128, n = 96;
  std::unique_ptr<Float8Linear> f32 = make_layer(backend(), s, c);
  std::unique_ptr<Float8Linear> bf16 = make_layer(backend(), s, c, kBf16Activations);
  ASSERT_NE(f32, nullptr);
  ASSERT_NE(bf16, nullptr);
  const std::vector<float> x = bf16_rounded(normal(m * k, 1.0f, 1)), w = normal(n * k, 0.1f, 2);
  const std::vector<float> g = bf16_rounded(normal(m * n, 1.0f, 3)), bias(n, 0.0f);
  const Reference ref = reference_linear(s, x, w, bias, g);
  const Results a = run_step(backend(), *f32, s, x, w, bias, g);
  const Results b = run_step(backend(), *bf16, s, x, w, bias, g);
  expect_bf16_close("output", ref.output, a.output, b.output, "mixed");
  expect_bf16_close("grad_input", ref.grad_input, a.grad_input, b.grad_input, "mixed");
  expect_bf16_close("grad_weight", ref.grad_weight, a.grad_weight, b.grad_weight, "mixed");
}

// Delayed scaling over three steps (the last one's input grows 8x past its history) and
// measured numerics: a bf16 layer keeps the same histories and counts as the fp32 layer
// fed the same values, since its casts read the same values from bf16.
TEST_F(FLOAT8_LINEAR_TEST, DelayedScalingAndNumericsWorkOnBf16Activations) {
  const Shape s{64, 128, 96};
  const size_t m = 64, k = 128, n = 96;
  std::unique_ptr<Float8Linear> f32 = make_layer(backend(), s, recipe(v1::Fp8Spec::DELAYED));
  std::unique_ptr<Float8Linear> bf16 = make_layer(backend(), s, recipe(v1::Fp8Spec::DELAYED), kBf16Activations);
  ASSERT_NE(f32, nullptr);
  ASSERT_NE(bf16, nullptr);
  f32->set_measuring(true);
  bf16->set_measuring(true);
  const std::vector<float> w = normal(n * k, 0.1f, 1), bias = normal(n, 0.1f, 2);
  const std::vector<float> g = bf16_rounded(normal(m * n, 1e-3f, 3));
  std::vector<float> input_amaxes;
  for (uint32_t step = 0; step < 3; ++step) {
    SCOPED_TRACE(::testing::Message() << "step " << step);
    const std::vector<float> x = bf16_rounded(scaled(normal(m * k, 1.0f, 10 + step), step == 2 ? 8.0f : 1.0f));
    input_amaxes.push_back(max_abs(x));
    const Results a = run_step(backend(), *f32, s, x, w, bias, g);
    const Results b = run_step(backend(), *bf16, s, x, w, bias, g);
    EXPECT_LE(max_relative_error(widened(a.output), b.output), kBf16Tolerance);
    EXPECT_LE(max_relative_error(widened(a.grad_input), b.grad_input), kBf16Tolerance);
    EXPECT_EQ(b.grad_weight, a.grad_weight) << "the same fp8 codes, fp32 output";
  }
  EXPECT_EQ(bf16->delayed().state(0)->history(), input_amaxes);
  for (int i = 0; i < bf16->delayed().count(); ++i) {
    EXPECT_EQ(bf16->delayed().state(i)->history().size(), 3u);
    EXPECT_EQ(bf16->delayed().state(i)->history(), f32->delayed().state(i)->history());
  }
  EXPECT_EQ(bf16->save_scaling_state().value(), f32->save_scaling_state().value());

  absl::StatusOr<std::vector<CastNumerics>> want = f32->numerics();
  absl::StatusOr<std::vector<CastNumerics>> got = bf16->numerics();
  ASSERT_TRUE(want.ok()) << want.status();
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), want->size());
  for (size_t i = 0; i < got->size(); ++i) {
    const CastNumerics &o = (*want)[i], &c = (*got)[i];
    SCOPED_TRACE(tensor_kind_name(c.tensor));
    EXPECT_TRUE(c.measured);
    EXPECT_EQ(c.amax, o.amax);
    EXPECT_EQ(c.scale, o.scale);
    EXPECT_EQ(c.elements, o.elements);
    EXPECT_EQ(c.saturated, o.saturated);
    EXPECT_EQ(c.underflow, o.underflow);
  }
  const CastNumerics* input = find_cast(*got, TensorKind::kInput);
  ASSERT_NE(input, nullptr);
  EXPECT_EQ(input->amax, input_amaxes.back());
  EXPECT_GT(input->saturated, 0) << "the input grew 8x past its history";
}

TEST_F(FLOAT8_LINEAR_TEST, ActivationDtypesOtherThanFp32AndBf16AreRejected) {
  const Float8LinearConfig c = recipe(v1::Fp8Spec::TENSORWISE);
  expect_rejected(Float8Linear::create(backend(), 64, 64, c, {DType::kE4M3, DType::kFloat32}).status(),
                  "activations.input", "must be float32 or bfloat16, got float8_e4m3fn");
  expect_rejected(Float8Linear::create(backend(), 64, 64, c, {DType::kBFloat16, DType::kE5M2}).status(),
                  "activations.output", "must be float32 or bfloat16, got float8_e5m2");
  for (DType in : {DType::kFloat32, DType::kBFloat16}) {
    for (DType out : {DType::kFloat32, DType::kBFloat16}) {
      absl::StatusOr<std::unique_ptr<Float8Linear>> layer = Float8Linear::create(backend(), 64, 64, c, {in, out});
      ASSERT_TRUE(layer.ok()) << layer.status();
      EXPECT_EQ((*layer)->info().activations.input, in);
      EXPECT_EQ((*layer)->info().activations.output, out);
    }
  }
}

#if !defined(FP8_ENGINE_TEST_CUDA)
// (Backend-independent: built into the CPU suite only.)
// A CPU backend that says it is a GPU, to check the GPU shape rules on any machine, and
// counts the calls at which a GPU's host would wait for the device.
class PretendGpuBackend final : public fp8::testing::ForwardingBackend {
 public:
  PretendGpuBackend() : ForwardingBackend(cpu_backend()) {}
  std::string name() const override { return "pretend-gpu"; }
  bool is_cuda() const override { return true; }
  absl::Status copy_to_host(void* d, const void* s, size_t n) override {
    ++host_waits;
    return ForwardingBackend::copy_to_host(d, s, n);
  }
  absl::Status synchronize() override {
    ++host_waits;
    return ForwardingBackend::synchronize();
  }

  int64_t host_waits = 0;  // copy_to_host and synchronize calls
};

TEST(Float8LinearGpuShapes, DimensionsAnFp8GemmCannotTakeAreRejectedUpFront) {
  PretendGpuBackend gpu;
  expect_rejected(Float8Linear::create(gpu, 100, 64, recipe(v1::Fp8Spec::TENSORWISE)).status(), "in_features=100",
                  "multiples of 16");
  expect_rejected(Float8Linear::create(gpu, 64, 40, recipe(v1::Fp8Spec::ROWWISE)).status(), "out_features=40",
                  "multiples of 16");
  // Without an fp8 GEMM any shape goes.
  EXPECT_TRUE(Float8Linear::create(gpu, 100, 40, recipe(v1::Fp8Spec::NONE)).ok());

  // grad_weight contracts over tokens.
  absl::StatusOr<std::unique_ptr<Float8Linear>> layer =
      Float8Linear::create(gpu, 64, 48, recipe(v1::Fp8Spec::TENSORWISE));
  ASSERT_TRUE(layer.ok()) << layer.status();
  Tensor x(gpu, 24 * 64), w(gpu, 48 * 64), out(gpu, 24 * 48);
  expect_rejected((*layer)->forward(x.data(), 24, w.data(), nullptr, out.data()), "tokens=24", "multiple of 16");
  // Fine where grad_weight runs in high precision.
  layer = Float8Linear::create(gpu, 64, 48, recipe(v1::Fp8Spec::ROWWISE_WITH_GW_HP));
  ASSERT_TRUE(layer.ok()) << layer.status();
  EXPECT_TRUE((*layer)->forward(x.data(), 24, w.data(), nullptr, out.data()).ok());
}

// The issue's rule for a GPU step: no host wait inside it. Delayed scaling records the
// step's amaxes and derives the next scales in backend memory; the host reads the
// histories once, after the first step, to learn that each cast has a scale.
TEST(Float8LinearGpuShapes, DelayedStepsWaitForTheDeviceOnlyAfterTheFirst) {
  PretendGpuBackend gpu;
  absl::StatusOr<std::unique_ptr<Float8Linear>> layer =
      Float8Linear::create(gpu, 64, 48, recipe(v1::Fp8Spec::DELAYED));
  ASSERT_TRUE(layer.ok()) << layer.status();
  ASSERT_EQ((*layer)->delayed().count(), 3);
  const size_t tokens = 32;
  const std::vector<float> host_x = normal(tokens * 64, 1.0f, 1);
  Tensor x(gpu, host_x), w(gpu, normal(48 * 64, 0.1f, 2)), out(gpu, tokens * 48),
      g(gpu, normal(tokens * 48, 1e-3f, 3)), gx(gpu, tokens * 64), gw(gpu, 48 * 64);
  std::vector<int64_t> waits;
  for (int step = 0; step < 4; ++step) {
    const int64_t before = gpu.host_waits;
    ASSERT_TRUE((*layer)->forward(x.data(), static_cast<int64_t>(tokens), w.data(), nullptr, out.data()).ok());
    ASSERT_TRUE((*layer)->backward(g.data(), gx.data(), gw.data(), nullptr).ok());
    ASSERT_TRUE((*layer)->finish_step().ok());
    waits.push_back(gpu.host_waits - before);
  }
  EXPECT_GT(waits[0], 0);
  EXPECT_EQ(waits[1], 0);
  EXPECT_EQ(waits[2], 0);
  EXPECT_EQ(waits[3], 0);
  // What the device holds is what the host rule gives.
  absl::StatusOr<DelayedScaling> input = (*layer)->delayed().state(0);
  ASSERT_TRUE(input.ok()) << input.status();
  const float x_amax = max_abs(host_x);
  EXPECT_EQ(input->history(), std::vector<float>(static_cast<size_t>(std::min(4, input->history_len())), x_amax));
  EXPECT_EQ(input->next_scale(), scale_from_amax(x_amax, Format::kE4M3, false));
}

// A report reads what every cast of the layer did in one copy: on a GPU, one wait a layer
// rather than two or three a cast. The values are those of the casts themselves.
TEST(Float8LinearGpuShapes, NumericsReadTheLayerOnce) {
  PretendGpuBackend gpu;
  for (v1::Fp8Spec::Recipe r : {v1::Fp8Spec::TENSORWISE, v1::Fp8Spec::ROWWISE, v1::Fp8Spec::DELAYED}) {
    SCOPED_TRACE(v1::Fp8Spec::Recipe_Name(r));
    absl::StatusOr<std::unique_ptr<Float8Linear>> layer = Float8Linear::create(gpu, 64, 48, recipe(r));
    ASSERT_TRUE(layer.ok()) << layer.status();
    (*layer)->set_measuring(true);
    const size_t tokens = 32;
    const std::vector<float> host_x = normal(tokens * 64, 1.0f, 1);
    Tensor x(gpu, host_x), w(gpu, normal(48 * 64, 0.1f, 2)), out(gpu, tokens * 48),
        g(gpu, normal(tokens * 48, 1e-3f, 3)), gx(gpu, tokens * 64), gw(gpu, 48 * 64);
    ASSERT_TRUE((*layer)->forward(x.data(), static_cast<int64_t>(tokens), w.data(), nullptr, out.data()).ok());
    ASSERT_TRUE((*layer)->backward(g.data(), gx.data(), gw.data(), nullptr).ok());
    const int64_t before = gpu.host_waits;
    absl::StatusOr<std::vector<CastNumerics>> n = (*layer)->numerics();
    ASSERT_TRUE(n.ok()) << n.status();
    EXPECT_EQ(gpu.host_waits - before, 1);
    ASSERT_FALSE(n->empty());
    EXPECT_EQ((*n)[0].tensor, TensorKind::kInput);
    EXPECT_EQ((*n)[0].amax, max_abs(host_x));
    EXPECT_TRUE((*n)[0].measured);
    EXPECT_EQ((*n)[0].elements, static_cast<int64_t>(tokens * 64));
  }
}

// ---- every field of the long form reaches the GEMMs -------------------------------------------

// The layer's config as the long form addresses it: each operand of each GEMM, and each
// GEMM's fast_accum.
std::map<std::string, std::string> long_form_slots(const Float8LinearConfig& c) {
  return {{"output.input", describe(c.output.input)},
          {"output.weight", describe(c.output.weight)},
          {"output.fast_accum", c.output.fast_accum ? "true" : "false"},
          {"grad_input.grad_output", describe(c.grad_input.grad_output)},
          {"grad_input.weight", describe(c.grad_input.weight)},
          {"grad_input.fast_accum", c.grad_input.fast_accum ? "true" : "false"},
          {"grad_weight.grad_output", describe(c.grad_weight.grad_output)},
          {"grad_weight.input", describe(c.grad_weight.input)},
          {"grad_weight.fast_accum", c.grad_weight.fast_accum ? "true" : "false"}};
}

// A CPU backend that writes down every GEMM it is given, by its contracted dimension k:
// for an fp8 GEMM its operands' formats and granularities (as a sorted pair, whichever
// operand the layer passes as A) and fast_accum, for a high-precision one that it ran.
class GemmRecordingBackend final : public fp8::testing::ForwardingBackend {
 public:
  GemmRecordingBackend() : ForwardingBackend(cpu_backend()) {}
  absl::Status scaled_gemm(const ScaledGemmArgs& a) override {
    std::string x = operand(a.a), y = operand(a.b);
    if (y < x) std::swap(x, y);
    gemms[a.k] = absl::StrCat(x, " x ", y, a.fast_accum ? " fast_accum" : "");
    return ForwardingBackend::scaled_gemm(a);
  }
  absl::Status gemm(const GemmArgs& a) override {
    gemms[a.k] = "high precision";
    return ForwardingBackend::gemm(a);
  }
  static std::string operand(const ScaledOperand& o) {
    return absl::StrCat(o.format == Format::kE5M2 ? "e5m2" : "e4m3",
                        o.granularity == Granularity::kRowwise ? " axiswise" : " tensorwise");
  }
  std::map<int64_t, std::string> gemms;
};

// What GemmRecordingBackend must see of one GEMM of `config`.
std::string expected_gemm(const CastConfig& lhs, const CastConfig& rhs, bool fast_accum) {
  if (!lhs.is_fp8() || !rhs.is_fp8()) return "high precision";  // on the dequantized operand
  auto operand = [](const CastConfig& c) {
    return absl::StrCat(c.dtype == CastDtype::kE5M2 ? "e5m2" : "e4m3",
                        c.granularity == ScaleGranularity::kAxiswise ? " axiswise" : " tensorwise");
  };
  std::string x = operand(lhs), y = operand(rhs);
  if (y < x) std::swap(x, y);
  return absl::StrCat(x, " x ", y, fast_accum ? " fast_accum" : "");
}

// Each of the 21 fields of fp8.gemms, written in a job file over the tensorwise recipe,
// changes its own operand (or its GEMM's fast_accum) in the layer's config and nothing
// else, and the layer runs what the config says: the backend's GEMMs get each operand's
// format and granularity and each GEMM's fast_accum (which cuBLASLt acts on; the CPU
// accumulates in fp32 either way), a high-precision operand takes its GEMM off fp8, and a
// delayed operand gets an amax history. (jobspec_fields_test.cc names this test.)
TEST(Float8LinearLongForm, EveryFieldChangesItsOperandOfItsGemmAndNothingElse) {
  struct Field {
    const char* path;   // under fp8.gemms
    const char* value;  // differs from the tensorwise recipe's
    const char* slot;   // what it changes (LongFormSlots)
    const char* want;   // to this
  };
  const Field fields[] = {
      {"output.input.dtype", "e5m2", "output.input", "e5m2 tensorwise dynamic"},
      {"output.input.granularity", "axiswise", "output.input", "e4m3 axiswise dynamic"},
      {"output.input.scaling", "delayed", "output.input", "e4m3 tensorwise delayed"},
      {"output.weight.dtype", "e5m2", "output.weight", "e5m2 tensorwise dynamic"},
      {"output.weight.granularity", "axiswise", "output.weight", "e4m3 axiswise dynamic"},
      {"output.weight.scaling", "delayed", "output.weight", "e4m3 tensorwise delayed"},
      {"output.fast_accum", "false", "output.fast_accum", "false"},
      {"grad_input.grad_output.dtype", "e4m3", "grad_input.grad_output", "e4m3 tensorwise dynamic"},
      {"grad_input.grad_output.granularity", "axiswise", "grad_input.grad_output", "e5m2 axiswise dynamic"},
      {"grad_input.grad_output.scaling", "delayed", "grad_input.grad_output", "e5m2 tensorwise delayed"},
      {"grad_input.weight.dtype", "high_precision", "grad_input.weight", "high_precision"},
      {"grad_input.weight.granularity", "axiswise", "grad_input.weight", "e4m3 axiswise dynamic"},
      {"grad_input.weight.scaling", "delayed", "grad_input.weight", "e4m3 tensorwise delayed"},
      {"grad_input.fast_accum", "true", "grad_input.fast_accum", "true"},
      {"grad_weight.grad_output.dtype", "e4m3", "grad_weight.grad_output", "e4m3 tensorwise dynamic"},
      {"grad_weight.grad_output.granularity", "axiswise", "grad_weight.grad_output", "e5m2 axiswise dynamic"},
      {"grad_weight.grad_output.scaling", "delayed", "grad_weight.grad_output", "e5m2 tensorwise delayed"},
      {"grad_weight.input.dtype", "high_precision", "grad_weight.input", "high_precision"},
      {"grad_weight.input.granularity", "axiswise", "grad_weight.input", "e4m3 axiswise dynamic"},
      {"grad_weight.input.scaling", "delayed", "grad_weight.input", "e4m3 tensorwise delayed"},
      {"grad_weight.fast_accum", "true", "grad_weight.fast_accum", "true"},
  };
  constexpr char kJob[] = R"(name: long-form
model: {dim: 64, n_layers: 1, n_heads: 4, max_seq_len: 64}
data: {path: corpus.txt}
train: {steps: 1, batch_size: 4, lr: 1e-3}
fp8: {recipe: tensorwise}
)";
  auto config_of = [&](const std::vector<std::string>& overrides) -> absl::StatusOr<Float8LinearConfig> {
    absl::StatusOr<v1::JobSpec> spec = jobspec::load_job_spec_string(kJob, "job.yaml", overrides);
    if (!spec.ok()) return spec.status();
    return config_from_spec(spec->fp8());
  };
  const absl::StatusOr<Float8LinearConfig> recipe_only = config_of({});
  ASSERT_TRUE(recipe_only.ok()) << recipe_only.status();
  const std::map<std::string, std::string> before = long_form_slots(*recipe_only);

  constexpr int64_t kIn = 64, kOut = 48, kTokens = 32;  // the three GEMMs' contracted dimensions
  for (const Field& f : fields) {
    const std::string path = absl::StrCat("fp8.gemms.", f.path);
    SCOPED_TRACE(path);
    const absl::StatusOr<Float8LinearConfig> c = config_of({absl::StrCat(path, "=", f.value)});
    ASSERT_TRUE(c.ok()) << c.status();
    std::map<std::string, std::string> want = before;
    ASSERT_TRUE(want.contains(f.slot));
    want[f.slot] = f.want;
    EXPECT_EQ(long_form_slots(*c), want);

    GemmRecordingBackend recording;
    absl::StatusOr<std::unique_ptr<Float8Linear>> layer = Float8Linear::create(recording, kIn, kOut, *c);
    ASSERT_TRUE(layer.ok()) << layer.status();
    Tensor x(recording, normal(kTokens * kIn, 1.0f, 1)), w(recording, normal(kOut * kIn, 0.1f, 2)),
        out(recording, kTokens * kOut), g(recording, normal(kTokens * kOut, 1e-3f, 3)), gx(recording, kTokens * kIn),
        gw(recording, kOut * kIn);
    ASSERT_OK((*layer)->forward(x.data(), kTokens, w.data(), nullptr, out.data()));
    ASSERT_OK((*layer)->backward(g.data(), gx.data(), gw.data(), nullptr));
    ASSERT_OK((*layer)->finish_step());
    const std::map<int64_t, std::string> want_gemms = {
        {kIn, expected_gemm(c->output.input, c->output.weight, c->output.fast_accum)},
        {kOut, expected_gemm(c->grad_input.grad_output, c->grad_input.weight, c->grad_input.fast_accum)},
        {kTokens, expected_gemm(c->grad_weight.grad_output, c->grad_weight.input, c->grad_weight.fast_accum)}};
    EXPECT_EQ(recording.gemms, want_gemms);
    // Only a delayed operand keeps a history: of the tensor it casts.
    const std::string tensor = std::string(f.slot).substr(std::string(f.slot).find('.') + 1);
    EXPECT_EQ((*layer)->delayed().names(),
              std::string(f.value) == "delayed" ? std::vector<std::string>{tensor} : std::vector<std::string>{});
  }
}

// ---- blockwise: 1x128 activation tiles, 128x128 weight blocks (CPU backend only) --------------

// Llama FFN projections at 1/8 of Llama-7B's, their ffn_dim rounded up to a multiple of 128
// as block scaling needs (11008 / 8 = 1376 is not one).
const Shape kBlockFfnUp{256, 512, 1408};
const Shape kBlockFfnDown{256, 1408, 512};

struct BlockVsRow {
  double block[3], row[3];  // output, grad_input, grad_weight SQNR in dB
};

BlockVsRow block_vs_row(const Shape& s, const std::vector<float>& x, const std::vector<float>& w,
                        const std::vector<float>& bias, const std::vector<float>& g, const Reference& ref,
                        const char* label) {
  BlockVsRow v{};
  std::unique_ptr<Float8Linear> blockwise = make_layer(cpu_backend(), s, recipe(v1::Fp8Spec::BLOCKWISE));
  std::unique_ptr<Float8Linear> rowwise = make_layer(cpu_backend(), s, recipe(v1::Fp8Spec::ROWWISE));
  if (blockwise == nullptr || rowwise == nullptr) return v;
  const Results b = run_step(cpu_backend(), *blockwise, s, x, w, bias, g);
  const Results r = run_step(cpu_backend(), *rowwise, s, x, w, bias, g);
  v.block[0] = sqnr(ref.output, b.output);
  v.block[1] = sqnr(ref.grad_input, b.grad_input);
  v.block[2] = sqnr(ref.grad_weight, b.grad_weight);
  v.row[0] = sqnr(ref.output, r.output);
  v.row[1] = sqnr(ref.grad_input, r.grad_input);
  v.row[2] = sqnr(ref.grad_weight, r.grad_weight);
  std::printf("SQNR %-9s %-13s blockwise output %.4f dB, grad_input %.4f dB, grad_weight %.4f dB; "
              "rowwise %.4f, %.4f, %.4f\n",
              label, shape_name(s).c_str(), v.block[0], v.block[1], v.block[2], v.row[0], v.row[1], v.row[2]);
  EXPECT_LE(max_relative_error(ref.grad_bias, b.grad_bias), 1e-5);
  return v;
}

// Block scaling against rowwise on the same data. On Gaussian data a value's fp8 rounding
// error is relative to itself whatever its (power-of-2) scale, short of subnormals, and a
// row's scale and its tiles' mostly round to the same power of two: the two recipes come
// out equal to within rounding noise. Where they differ is outliers: with "massive
// activations" (a few input channels some 10^4 above the rest, their weights as much below,
// so that every channel contributes alike), a row's scale follows the outlier and pushes the
// rest of the row into fp8's subnormals, while a 1x128 tile confines it to its own 128
// channels: the output GEMM is where blockwise must be ahead (the other two match).
TEST(Float8LinearBlockwise, IsAtLeastAsAccurateAsRowwiseOnLlamaFfnShapes) {
  for (const Shape& s : {kBlockFfnUp, kBlockFfnDown}) {
    const std::string at = shape_name(s);
    const Problem& p = cached_problem(s);
    const BlockVsRow plain = block_vs_row(s, p.x, p.w, p.bias, p.g, p.ref, "gaussian");
    for (int i = 0; i < 3; ++i) {
      EXPECT_GE(plain.block[i], 20.0) << at << " gemm " << i;
      EXPECT_GE(plain.block[i], plain.row[i] - 0.01) << at << " gemm " << i;
    }

    std::vector<float> x = p.x, w = p.w;
    constexpr float kOutlier = 8192.0f;
    for (int64_t c = 0; c < s.k; c += 512) {
      for (int64_t r = 0; r < s.m; ++r) x[static_cast<size_t>(r * s.k + c)] *= kOutlier;
      for (int64_t o = 0; o < s.n; ++o) w[static_cast<size_t>(o * s.k + c)] /= kOutlier;
    }
    const Reference ref = reference_linear(s, x, w, p.bias, p.g);
    const BlockVsRow outliers = block_vs_row(s, x, w, p.bias, p.g, ref, "outliers");
    EXPECT_GE(outliers.block[0], outliers.row[0] + 0.1) << at;
    for (int i = 0; i < 3; ++i) {
      EXPECT_GE(outliers.block[i], 20.0) << at << " gemm " << i;
      EXPECT_GE(outliers.block[i], outliers.row[i] - 0.01) << at << " gemm " << i;
    }
  }
}

// Host helpers for the independent computation below (the CPU backend works on host memory).
using fp8::testing::transposed;

struct HostBlockCast {
  std::vector<uint8_t> codes;
  std::vector<float> scale, inv_scale;
  ScaledOperand operand(Granularity g) const { return {codes.data(), Format::kE4M3, g, inv_scale.data()}; }
};

// x [rows, cols] cast e4m3 at block granularity g with power-of-2 scales, as blockwise does.
HostBlockCast host_block_cast(const std::vector<float>& x, int64_t rows, int64_t cols, Granularity g) {
  HostBlockCast c;
  const size_t scales = static_cast<size_t>(scale_count(g, rows, cols));
  c.codes.resize(x.size());
  c.scale.resize(scales);
  c.inv_scale.resize(scales);
  QuantizeArgs q;
  q.input = {x.data(), DType::kFloat32, rows, cols};
  q.granularity = g;
  q.pow2_scale = true;
  q.out = c.codes.data();
  q.scale_out = c.scale.data();
  q.inv_scale_out = c.inv_scale.data();
  EXPECT_TRUE(cpu_backend().quantize(q).ok());
  return c;
}

std::vector<float> host_scaled_gemm(int64_t m, int64_t n, int64_t k, const ScaledOperand& a, const ScaledOperand& b) {
  std::vector<float> out(static_cast<size_t>(m * n));
  ScaledGemmArgs g;
  g.m = m;
  g.n = n;
  g.k = k;
  g.a = a;
  g.b = b;
  g.out = out.data();
  const absl::Status st = cpu_backend().scaled_gemm(g);
  EXPECT_TRUE(st.ok()) << st;
  return out;
}

// A CPU backend that writes down each scaled GEMM's operand granularities by its k.
class BlockGemmRecordingBackend final : public fp8::testing::ForwardingBackend {
 public:
  BlockGemmRecordingBackend() : ForwardingBackend(cpu_backend()) {}
  absl::Status scaled_gemm(const ScaledGemmArgs& a) override {
    gemms[a.k] = absl::StrCat(granularity_name(a.a.granularity), " x ", granularity_name(a.b.granularity));
    return ForwardingBackend::scaled_gemm(a);
  }
  std::map<int64_t, std::string> gemms;
};

// Each GEMM takes the tiles its contraction needs: the output GEMM x 1x128 along in_features
// and W 128x128; grad_input grad_output 1x128 along out_features and Wᵀ 128x128 (the
// transposed weight cast itself); grad_weight grad_outputᵀ and xᵀ 1x128 along the tokens
// (the transposed tensors cast themselves). grad_input and grad_weight equal, bit for bit,
// the scaled GEMMs of casts made independently on the host's transposes.
TEST(Float8LinearBlockwise, EachGemmTakesTheTilesOfItsContraction) {
  const int64_t m = 256, k = 384, n = 128;  // tokens, in_features, out_features
  const Shape s{m, k, n};
  const std::vector<float> x = normal(static_cast<size_t>(m * k), 1.0f, 11);
  const std::vector<float> w = normal(static_cast<size_t>(n * k), 0.05f, 12);
  const std::vector<float> g = normal(static_cast<size_t>(m * n), 1e-3f, 13);
  const std::vector<float> bias(static_cast<size_t>(n), 0.0f);

  BlockGemmRecordingBackend recording;
  std::unique_ptr<Float8Linear> layer = make_layer(recording, s, recipe(v1::Fp8Spec::BLOCKWISE));
  ASSERT_NE(layer, nullptr);
  const Results r = run_step(recording, *layer, s, x, w, bias, g);
  const std::map<int64_t, std::string> want = {{k, "block1x128 x block128x128"},
                                               {n, "block1x128 x block128x128"},
                                               {m, "block1x128 x block1x128"}};
  EXPECT_EQ(recording.gemms, want);

  const HostBlockCast x_tiles = host_block_cast(x, m, k, Granularity::kBlock1x128);
  const HostBlockCast w_blocks = host_block_cast(w, n, k, Granularity::kBlock128x128);
  const HostBlockCast g_tiles = host_block_cast(g, m, n, Granularity::kBlock1x128);
  const HostBlockCast wt_blocks = host_block_cast(transposed(w, n, k), k, n, Granularity::kBlock128x128);
  const HostBlockCast gt_tiles = host_block_cast(transposed(g, m, n), n, m, Granularity::kBlock1x128);
  const HostBlockCast xt_tiles = host_block_cast(transposed(x, m, k), k, m, Granularity::kBlock1x128);
  EXPECT_TRUE(same_bits(r.output, host_scaled_gemm(m, n, k, x_tiles.operand(Granularity::kBlock1x128),
                                                   w_blocks.operand(Granularity::kBlock128x128))));
  EXPECT_TRUE(same_bits(r.grad_input, host_scaled_gemm(m, k, n, g_tiles.operand(Granularity::kBlock1x128),
                                                       wt_blocks.operand(Granularity::kBlock128x128))));
  EXPECT_TRUE(same_bits(r.grad_weight, host_scaled_gemm(n, k, m, gt_tiles.operand(Granularity::kBlock1x128),
                                                        xt_tiles.operand(Granularity::kBlock1x128))));

  // No row-amax shortcut (a row's amax is not a tile's), an fp8 weight from elsewhere taken
  // as one block cast both GEMMs read, and each tensor cast twice, once per orientation.
  const Float8LinearNeeds& needs = layer->info().needs;
  EXPECT_FALSE(needs.row_amax_of(TensorKind::kInput));
  EXPECT_FALSE(needs.row_amax_of(TensorKind::kWeight));
  EXPECT_FALSE(needs.row_amax_of(TensorKind::kGradOutput));
  EXPECT_TRUE(needs.fp8_weight);
  EXPECT_TRUE(needs.weight_codes_shared);
  absl::StatusOr<std::vector<CastNumerics>> stats = layer->numerics();
  ASSERT_TRUE(stats.ok()) << stats.status();
  ASSERT_EQ(stats->size(), 6u);
  for (const CastNumerics& c : *stats) {
    const float top = c.tensor == TensorKind::kInput ? max_abs(x) : c.tensor == TensorKind::kWeight ? max_abs(w) : max_abs(g);
    EXPECT_EQ(c.amax, top) << c.gemms;
    EXPECT_EQ(describe(c.config), "e4m3 block dynamic pow2");
    EXPECT_GT(c.range_use, 0.5f);
    EXPECT_LE(c.range_use, 1.0f);
  }
}

TEST(Float8LinearBlockwise, ShapesAndConfigsItCannotTakeAreRejected) {
  // in_features is the output GEMM's K, out_features grad_input's.
  expect_rejected(Float8Linear::create(cpu_backend(), 192, 128, recipe(v1::Fp8Spec::BLOCKWISE)).status(),
                  "in_features", "multiples of 128");
  expect_rejected(Float8Linear::create(cpu_backend(), 128, 64, recipe(v1::Fp8Spec::BLOCKWISE)).status(),
                  "out_features", "multiples of 128");
  // The tokens are grad_weight's K: the GEMM refuses them.
  std::unique_ptr<Float8Linear> layer = make_layer(cpu_backend(), {64, 128, 128}, recipe(v1::Fp8Spec::BLOCKWISE));
  ASSERT_NE(layer, nullptr);
  Tensor x(cpu_backend(), 64 * 128), w(cpu_backend(), 128 * 128), out(cpu_backend(), 64 * 128),
      gx(cpu_backend(), 64 * 128), gw(cpu_backend(), 128 * 128);
  ASSERT_OK(layer->forward(x.data(), 64, w.data(), nullptr, out.data()));
  EXPECT_FALSE(layer->backward(out.data(), gx.data(), gw.data(), nullptr).ok());

  v1::Fp8Spec delayed;
  delayed.set_recipe(v1::Fp8Spec::BLOCKWISE);
  delayed.mutable_gemms()->mutable_output()->mutable_weight()->set_scaling(v1::CastConfig::DELAYED);
  expect_rejected(config_from_spec(delayed).status(), "fp8.gemms.output.weight", "tensorwise");
  v1::Fp8Spec half_block;
  half_block.set_recipe(v1::Fp8Spec::BLOCKWISE);
  half_block.mutable_gemms()->mutable_grad_weight()->mutable_input()->set_granularity(v1::CastConfig::AXISWISE);
  expect_rejected(config_from_spec(half_block).status(), "fp8.gemms.grad_weight", "block granularity");
  v1::Fp8Spec block_with_hp;
  block_with_hp.set_recipe(v1::Fp8Spec::BLOCKWISE);
  block_with_hp.mutable_gemms()->mutable_grad_input()->mutable_weight()->set_dtype(v1::CastConfig::HIGH_PRECISION);
  expect_rejected(config_from_spec(block_with_hp).status(), "fp8.gemms.grad_input", "block granularity");
}

#endif  // !FP8_ENGINE_TEST_CUDA

}  // namespace
}  // namespace fp8::engine
