// The Llama model (worker/engine/model) as a whole:
//  * forward_backward's gradient of every parameter against central differences of the
//    model's own loss (recipe none, fp32), for untied and tied embeddings, with GQA;
//  * gradient accumulation and grad_scale; evaluate() against forward_backward();
//  * a tensorwise-fp8 model against the high-precision one;
//  * the fp8 module filter (fp8.include / fp8.exclude, dimensions that fp8 GEMMs cannot
//    take, pad_inner_dim);
//  * deterministic initialisation; malformed batches.
#include "worker/engine/model/llama.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/engine/float8/cast_counts.h"
#include "worker/engine/data/token_batch.h"
#include "worker/engine/optim/adamw.h"
#include "worker/engine/tensor/device.h"

namespace fp8::engine {
namespace {

using ::testing::HasSubstr;

// Set FP8_LLAMA_TEST_VERBOSE=1 to print the gradient check's per-parameter errors.
bool verbose() { return std::getenv("FP8_LLAMA_TEST_VERBOSE") != nullptr; }

// vocab 32, dim 16, 2 layers, 4 heads over 2 kv heads (GQA, head_dim 4), ffn 32.
LlamaConfig tiny_config(bool tie_embeddings = false) {
  LlamaConfig c;
  c.vocab_size = 32;
  c.dim = 16;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.ffn_dim = 32;
  c.max_seq_len = 8;
  c.tie_embeddings = tie_embeddings;
  return c;
}

// Every linear dimension a multiple of 16 (kv_dim = 2 · 8), so every layer can be fp8.
LlamaConfig fp8_friendly_config() {
  LlamaConfig c;
  c.vocab_size = 64;
  c.dim = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.ffn_dim = 64;
  c.max_seq_len = 16;
  return c;
}

v1::Fp8Spec spec(v1::Fp8Spec::Recipe recipe, std::vector<std::string> exclude = {}) {
  v1::Fp8Spec s;
  s.set_recipe(recipe);
  for (std::string& e : exclude) s.add_exclude(std::move(e));
  return s;
}

std::unique_ptr<LlamaModel> make_model(const LlamaConfig& c, const v1::Fp8Spec& fp8, uint64_t seed = 1) {
  absl::StatusOr<std::unique_ptr<LlamaModel>> m = LlamaModel::create(Device::cpu(), c, fp8, seed);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(*m) : nullptr;
}

// `rows` random windows of seq + 1 tokens: inputs are the first seq, targets the last.
data::TokenBatch make_batch(int64_t rows, int64_t seq, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(vocab - 1));
  data::TokenBatch b;
  b.resize(rows, seq);
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<int32_t> window(static_cast<size_t>(seq + 1));
    for (int32_t& t : window) t = token(rng);
    for (int64_t i = 0; i < seq; ++i) {
      b.inputs[static_cast<size_t>(r * seq + i)] = window[static_cast<size_t>(i)];
      b.targets[static_cast<size_t>(r * seq + i)] = window[static_cast<size_t>(i + 1)];
    }
    b.window_starts[static_cast<size_t>(r)] = r * (seq + 1);
  }
  return b;
}

std::vector<float> values_of(const Tensor& t) {
  absl::StatusOr<std::vector<float>> v = t.download<float>();
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *v : std::vector<float>();
}

// Every parameter's gradient, in parameter order.
std::vector<std::vector<float>> gradients(const LlamaModel& model) {
  std::vector<std::vector<float>> g;
  for (const Parameter& p : model.parameters().all()) g.push_back(values_of(p.grad));
  return g;
}

// Every parameter's value, in parameter order.
std::vector<std::vector<float>> parameter_values(const LlamaModel& model) {
  std::vector<std::vector<float>> v;
  for (const Parameter& p : model.parameters().all()) v.push_back(values_of(p.value));
  return v;
}

double max_abs(const std::vector<float>& v) {
  double m = 0.0;
  for (float x : v) m = std::max(m, static_cast<double>(std::abs(x)));
  return m;
}

// Replaces the initialisation (N(0, 0.02²), where the model is nearly linear and, e.g.,
// silu(g)·u ≈ g·u/2 is symmetric in w1 and w3) with values that exercise every
// nonlinearity at O(1): matrices uniform with unit-variance outputs, norm gains around
// one, a wide embedding table.
void randomize_parameters(LlamaModel& model, uint32_t seed) {
  std::mt19937 rng(seed);
  for (Parameter& p : model.parameters().all()) {
    std::vector<float> v(static_cast<size_t>(p.value.numel()));
    double lo, hi;
    if (p.value.rank() == 1) {  // norm gains
      lo = 0.7;
      hi = 1.3;
    } else if (p.name == "tok_embeddings") {
      lo = -1.0;
      hi = 1.0;
    } else {
      const double a = std::sqrt(3.0 / static_cast<double>(p.value.dim(1)));
      lo = -a;
      hi = a;
    }
    std::uniform_real_distribution<double> u(lo, hi);
    for (float& x : v) x = static_cast<float>(u(rng));
    ASSERT_TRUE(p.value.upload<float>(v).ok());
  }
}

// Central differences of the model's fp32 loss (evaluate()) with respect to entry `i` of
// `p`, with the fourth-order stencil (8·(L(x+h) − L(x−h)) − (L(x+2h) − L(x−2h))) / 12h.
double numeric_derivative(LlamaModel& model, const data::TokenBatch& batch, Parameter& p, size_t i, double h) {
  float* x = p.value.data<float>() + i;
  const float saved = *x;
  auto loss_at = [&](double offset) {
    *x = static_cast<float>(saved + offset);
    absl::StatusOr<float> l = model.evaluate(batch);
    EXPECT_TRUE(l.ok()) << l.status();
    return l.ok() ? static_cast<double>(*l) : 0.0;
  };
  const double d1 = loss_at(h) - loss_at(-h);
  const double d2 = loss_at(2 * h) - loss_at(-2 * h);
  *x = saved;
  return (8.0 * d1 - d2) / (12.0 * h);
}

struct GradientCheckResult {
  double worst_entry = 0.0;       // max over parameters of the worst sampled entry's error
  std::string worst_entry_param;  // ... and its parameter
  double worst_direction = 0.0;   // max over parameters of the directional check's error
  std::string worst_direction_param;
};

// Compares forward_backward's gradient with central differences:
//  * at `samples` entries of every parameter: |analytic − numeric| / max |analytic| of
//    that parameter;
//  * along the analytic gradient's own direction ĝ for every parameter (all entries at
//    once): the derivative of the loss along ĝ must be |g|, relative error.
GradientCheckResult check_gradients(LlamaModel& model, const data::TokenBatch& batch, size_t samples, double h) {
  GradientCheckResult r;
  EXPECT_TRUE(model.parameters().zero_grads().ok());
  absl::StatusOr<float> loss = model.forward_backward(batch, 1.0f);
  EXPECT_TRUE(loss.ok()) << loss.status();
  const std::vector<std::vector<float>> g = gradients(model);
  std::mt19937 rng(7);
  size_t k = 0;
  for (Parameter& p : model.parameters().all()) {
    const std::vector<float>& gp = g[k++];
    const double scale = max_abs(gp);
    EXPECT_GT(scale, 0.0) << p.name << " has an all-zero gradient";
    if (scale == 0.0) continue;

    // Sampled entries: the largest one, then random others.
    std::vector<size_t> idx(gp.size());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
    std::shuffle(idx.begin(), idx.end(), rng);
    const size_t largest = static_cast<size_t>(
        std::max_element(gp.begin(), gp.end(), [](float a, float b) { return std::abs(a) < std::abs(b); }) -
        gp.begin());
    idx.insert(idx.begin(), largest);
    idx.resize(std::min(idx.size(), samples));
    double worst = 0.0;
    for (size_t i : idx) {
      const double numeric = numeric_derivative(model, batch, p, i, h);
      worst = std::max(worst, std::abs(gp[i] - numeric) / scale);
    }
    if (worst > r.worst_entry) {
      r.worst_entry = worst;
      r.worst_entry_param = p.name;
    }

    // Along ĝ: L(θ + t·ĝ) for a step t of size h.
    double norm = 0.0;
    for (float x : gp) norm += static_cast<double>(x) * x;
    norm = std::sqrt(norm);
    const std::vector<float> saved = values_of(p.value);
    auto loss_along = [&](double t) {
      std::vector<float> moved(saved.size());
      for (size_t i = 0; i < saved.size(); ++i) moved[i] = static_cast<float>(saved[i] + t * gp[i] / norm);
      EXPECT_TRUE(p.value.upload<float>(moved).ok());
      absl::StatusOr<float> l = model.evaluate(batch);
      EXPECT_TRUE(l.ok()) << l.status();
      return l.ok() ? static_cast<double>(*l) : 0.0;
    };
    const double d1 = loss_along(h) - loss_along(-h), d2 = loss_along(2 * h) - loss_along(-2 * h);
    EXPECT_TRUE(p.value.upload<float>(saved).ok());
    const double directional = (8.0 * d1 - d2) / (12.0 * h);
    const double direction_error = std::abs(directional - norm) / norm;
    if (direction_error > r.worst_direction) {
      r.worst_direction = direction_error;
      r.worst_direction_param = p.name;
    }
    if (verbose()) {
      std::cout << p.name << ": |g|max " << scale << ", |g| " << norm << ", entries " << worst << ", along g "
                << direction_error << "\n";
    }
  }
  // The differences must not have left anything behind.
  EXPECT_TRUE(model.parameters().zero_grads().ok());
  absl::StatusOr<float> again = model.forward_backward(batch, 1.0f);
  EXPECT_TRUE(again.ok());
  if (loss.ok() && again.ok()) {
    EXPECT_EQ(*again, *loss);
  }
  return r;
}

// Tolerances, relative to each parameter's largest gradient entry (per entry) and to
// |g| (along ĝ). Measured: at most ~6e-4 per entry and ~1.3e-4 along ĝ (fp32 rounding of
// the loss over a step of 1e-2). Wiring mistakes, checked by breaking the model on
// purpose (a dropped residual in either branch, w1 and w3 swapped in the forward or the
// backward, wk's input gradient not accumulated, RoPE's backward skipped for k, a norm's
// backward fed the wrong input, a block's backward given its output instead of its
// input), give at least 0.6 per entry and 0.08 along ĝ.
constexpr double kEntryTolerance = 5e-3;
constexpr double kDirectionTolerance = 2e-3;
constexpr double kStep = 1e-2;

void run_gradient_check(bool tie_embeddings, const data::TokenBatch& batch) {
  std::unique_ptr<LlamaModel> model = make_model(tiny_config(tie_embeddings), spec(v1::Fp8Spec::NONE));
  ASSERT_NE(model, nullptr);
  randomize_parameters(*model, 11);
  const GradientCheckResult r = check_gradients(*model, batch, /*samples=*/24, kStep);
  EXPECT_LT(r.worst_entry, kEntryTolerance) << "worst entry in " << r.worst_entry_param;
  EXPECT_LT(r.worst_direction, kDirectionTolerance) << "worst direction in " << r.worst_direction_param;
}

TEST(LlamaGradient, MatchesFiniteDifferences) { run_gradient_check(/*tie_embeddings=*/false, make_batch(2, 8, 32, 5)); }

TEST(LlamaGradient, MatchesFiniteDifferencesWithTiedEmbeddings) {
  run_gradient_check(/*tie_embeddings=*/true, make_batch(2, 8, 32, 5));
}

// Sequences shorter than max_seq_len, three rows, and targets to ignore (the mean is over
// the others).
TEST(LlamaGradient, MatchesFiniteDifferencesWithIgnoredTargets) {
  data::TokenBatch batch = make_batch(3, 5, 32, 6);
  for (size_t i : {0u, 4u, 7u, 14u}) batch.targets[i] = kIgnoreTarget;
  run_gradient_check(/*tie_embeddings=*/false, batch);
}

// ---- accumulation, grad_scale, evaluate ---------------------------------------------------

// |a − b| ≤ tol · max |b| entrywise, per parameter.
void expect_gradients_near(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b,
                           double tol, const LlamaModel& model, const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t k = 0; k < a.size(); ++k) {
    ASSERT_EQ(a[k].size(), b[k].size());
    const double scale = max_abs(b[k]);
    double worst = 0.0;
    for (size_t i = 0; i < a[k].size(); ++i) worst = std::max(worst, std::abs(double{a[k][i]} - b[k][i]));
    EXPECT_LE(worst, tol * scale) << what << ": " << model.parameters().all()[k].name;
  }
}

std::vector<std::vector<float>> scaled(std::vector<std::vector<float>> g, float factor) {
  for (auto& v : g) {
    for (float& x : v) x *= factor;
  }
  return g;
}

TEST(LlamaModel, GradientsAccumulateOverCallsAndFollowGradScale) {
  std::unique_ptr<LlamaModel> model = make_model(tiny_config(), spec(v1::Fp8Spec::NONE));
  ASSERT_NE(model, nullptr);
  randomize_parameters(*model, 3);
  const data::TokenBatch batch = make_batch(2, 8, 32, 9);

  // Fresh parameters have zero gradients.
  for (const auto& g : gradients(*model)) EXPECT_EQ(max_abs(g), 0.0);

  absl::StatusOr<float> l1 = model->forward_backward(batch, 1.0f);
  ASSERT_TRUE(l1.ok()) << l1.status();
  const std::vector<std::vector<float>> once = gradients(*model);
  for (const auto& g : once) EXPECT_GT(max_abs(g), 0.0);

  // A second call adds the same gradient again.
  absl::StatusOr<float> l2 = model->forward_backward(batch, 1.0f);
  ASSERT_TRUE(l2.ok());
  EXPECT_EQ(*l2, *l1);
  expect_gradients_near(gradients(*model), scaled(once, 2.0f), 1e-5, *model, "two calls");

  // grad_scale scales the gradient and not the returned loss.
  for (float factor : {0.25f, 3.0f}) {
    ASSERT_TRUE(model->parameters().zero_grads().ok());
    for (const auto& g : gradients(*model)) ASSERT_EQ(max_abs(g), 0.0);
    absl::StatusOr<float> l = model->forward_backward(batch, factor);
    ASSERT_TRUE(l.ok());
    EXPECT_EQ(*l, *l1);
    expect_gradients_near(gradients(*model), scaled(once, factor), 1e-5, *model, "grad_scale");
  }

  // Micro-batches: the accumulated gradient of two batches at grad_scale 1/2 is the mean
  // of their separate gradients.
  const data::TokenBatch other = make_batch(2, 8, 32, 10);
  ASSERT_TRUE(model->parameters().zero_grads().ok());
  ASSERT_TRUE(model->forward_backward(other, 1.0f).ok());
  const std::vector<std::vector<float>> g_other = gradients(*model);
  ASSERT_TRUE(model->parameters().zero_grads().ok());
  ASSERT_TRUE(model->forward_backward(batch, 0.5f).ok());
  ASSERT_TRUE(model->forward_backward(other, 0.5f).ok());
  std::vector<std::vector<float>> mean = once;
  for (size_t k = 0; k < mean.size(); ++k) {
    for (size_t i = 0; i < mean[k].size(); ++i) mean[k][i] = 0.5f * (once[k][i] + g_other[k][i]);
  }
  expect_gradients_near(gradients(*model), mean, 1e-5, *model, "two micro-batches");
  EXPECT_TRUE(model->finish_step().ok());
}

// discard_grads() is zero_grads() without the zeroing: whatever the buffers held (NaN
// here), the step's first producer of each gradient overwrites it, later micro-batches add,
// and define_grads() leaves gradients equal to those of zero_grads(), for every recipe and
// with the embedding table tied to the output projection (the projection's GEMM writes
// its gradient first, the embedding's scatter then adds).
TEST(LlamaModel, DiscardedGradientsAreOverwrittenByTheirFirstProducer) {
  const data::TokenBatch first = make_batch(2, 8, 32, 21), second = make_batch(2, 8, 32, 22);
  for (const bool tie : {false, true}) {
    for (const auto recipe : {v1::Fp8Spec::NONE, v1::Fp8Spec::TENSORWISE, v1::Fp8Spec::ROWWISE}) {
      SCOPED_TRACE(testing::Message() << v1::Fp8Spec::Recipe_Name(recipe) << (tie ? " tied" : ""));
      std::unique_ptr<LlamaModel> eager = make_model(tiny_config(tie), spec(recipe));
      std::unique_ptr<LlamaModel> lazy = make_model(tiny_config(tie), spec(recipe));
      ASSERT_TRUE(eager && lazy);
      randomize_parameters(*eager, 4);
      randomize_parameters(*lazy, 4);
      for (int step = 0; step < 2; ++step) {
        // Each micro-batch's gradient on its own, then both accumulated, from zeroed buffers.
        std::vector<std::vector<float>> each[2];
        for (int i = 0; i < 2; ++i) {
          ASSERT_TRUE(eager->parameters().zero_grads().ok());
          ASSERT_TRUE(eager->forward_backward(i == 0 ? first : second, 0.5f).ok());
          each[i] = gradients(*eager);
        }
        ASSERT_TRUE(eager->parameters().zero_grads().ok());
        ASSERT_TRUE(eager->forward_backward(first, 0.5f).ok());
        ASSERT_TRUE(eager->forward_backward(second, 0.5f).ok());
        const auto want = gradients(*eager);

        for (Parameter& p : lazy->parameters().all()) {
          const std::vector<float> garbage(static_cast<size_t>(p.grad.numel()), std::nanf(""));
          ASSERT_TRUE(p.grad.upload<float>(garbage).ok());
        }
        lazy->parameters().discard_grads();
        ASSERT_TRUE(lazy->forward_backward(first, 0.5f).ok());
        ASSERT_TRUE(lazy->forward_backward(second, 0.5f).ok());
        ASSERT_TRUE(lazy->parameters().define_grads().ok());
        const auto got = gradients(*lazy);
        ASSERT_EQ(got.size(), want.size());
        for (size_t k = 0; k < got.size(); ++k) {
          // Equal as numbers: 0 + x and x differ only in the sign of a zero.
          EXPECT_TRUE(std::equal(got[k].begin(), got[k].end(), want[k].begin()))
              << lazy->parameters().all()[k].name << " (step " << step << ")";
        }
        std::vector<std::vector<float>> sum = each[0];
        for (size_t k = 0; k < sum.size(); ++k) {
          for (size_t i = 0; i < sum[k].size(); ++i) sum[k][i] += each[1][k][i];
        }
        expect_gradients_near(got, sum, 1e-5, *lazy, "the two micro-batches' sum");
        for (LlamaModel* m : {eager.get(), lazy.get()}) ASSERT_TRUE(m->finish_step().ok());
      }
    }
  }
}

// define_grads() zeroes the discarded gradients that no op claimed (here: all but the
// first, with no backward at all) and leaves a claimed one to its producer.
TEST(LlamaModel, DefineGradsZeroesOnlyUnclaimedDiscardedGradients) {
  std::unique_ptr<LlamaModel> model = make_model(tiny_config(), spec(v1::Fp8Spec::NONE));
  ASSERT_NE(model, nullptr);
  std::deque<Parameter>& params = model->parameters().all();
  for (Parameter& p : params) {
    const std::vector<float> ones(static_cast<size_t>(p.grad.numel()), 1.0f);
    ASSERT_TRUE(p.grad.upload<float>(ones).ok());
  }
  model->parameters().discard_grads();
  EXPECT_EQ(params.front().claim_grad(), Store::kOverwrite);
  EXPECT_EQ(params.front().claim_grad(), Store::kAccumulate);
  ASSERT_TRUE(model->parameters().define_grads().ok());
  const auto grads = gradients(*model);
  EXPECT_EQ(max_abs(grads.front()), 1.0) << "claimed: left to its producer";
  for (size_t k = 1; k < grads.size(); ++k) EXPECT_EQ(max_abs(grads[k]), 0.0) << params[k].name;
}

TEST(LlamaModel, EvaluateMatchesForwardBackwardAndLeavesGradientsAlone) {
  for (bool tie : {false, true}) {
    SCOPED_TRACE(tie ? "tied embeddings" : "untied");
    std::unique_ptr<LlamaModel> model = make_model(tiny_config(tie), spec(v1::Fp8Spec::NONE));
    ASSERT_NE(model, nullptr);
    randomize_parameters(*model, 4);
    const data::TokenBatch batch = make_batch(2, 8, 32, 21);

    // Before any training pass, and after one.
    absl::StatusOr<float> before = model->evaluate(batch);
    ASSERT_TRUE(before.ok()) << before.status();
    absl::StatusOr<float> trained = model->forward_backward(batch, 1.0f);
    ASSERT_TRUE(trained.ok());
    const std::vector<std::vector<float>> g = gradients(*model);
    absl::StatusOr<float> after = model->evaluate(batch);
    ASSERT_TRUE(after.ok());
    EXPECT_EQ(*before, *trained);
    EXPECT_EQ(*after, *trained);
    EXPECT_GT(*trained, 0.0f);
    EXPECT_TRUE(std::isfinite(*trained));
    // Bit for bit: evaluate() neither writes nor accumulates gradients.
    EXPECT_EQ(gradients(*model), g);

    // Evaluating another batch shape in between changes nothing either.
    ASSERT_TRUE(model->evaluate(make_batch(1, 5, 32, 22)).ok());
    EXPECT_EQ(gradients(*model), g);
    absl::StatusOr<float> again = model->evaluate(batch);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(*again, *trained);
  }
}

TEST(LlamaModel, BatchShapesCanChangeBetweenCalls) {
  std::unique_ptr<LlamaModel> model = make_model(tiny_config(), spec(v1::Fp8Spec::NONE));
  ASSERT_NE(model, nullptr);
  randomize_parameters(*model, 5);
  const data::TokenBatch two = make_batch(2, 8, 32, 31);
  // The first row of `two` alone, and a shorter sequence.
  data::TokenBatch first_row;
  first_row.resize(1, 8);
  std::copy_n(two.inputs.begin(), 8, first_row.inputs.begin());
  std::copy_n(two.targets.begin(), 8, first_row.targets.begin());

  absl::StatusOr<float> l_two = model->forward_backward(two, 1.0f);
  ASSERT_TRUE(l_two.ok());
  absl::StatusOr<float> l_one = model->forward_backward(first_row, 1.0f);
  ASSERT_TRUE(l_one.ok());
  absl::StatusOr<float> l_short = model->forward_backward(make_batch(3, 3, 32, 32), 1.0f);
  ASSERT_TRUE(l_short.ok());
  absl::StatusOr<float> l_two_again = model->forward_backward(two, 1.0f);
  ASSERT_TRUE(l_two_again.ok());
  EXPECT_EQ(*l_two_again, *l_two);
  // Rows are independent sequences: row 0's loss does not depend on row 1, so the mean over
  // both rows differs from row 0's alone only through row 1's tokens.
  absl::StatusOr<float> l_one_eval = model->evaluate(first_row);
  ASSERT_TRUE(l_one_eval.ok());
  EXPECT_EQ(*l_one_eval, *l_one);
  data::TokenBatch second_row;
  second_row.resize(1, 8);
  std::copy_n(two.inputs.begin() + 8, 8, second_row.inputs.begin());
  std::copy_n(two.targets.begin() + 8, 8, second_row.targets.begin());
  absl::StatusOr<float> l_second = model->evaluate(second_row);
  ASSERT_TRUE(l_second.ok());
  EXPECT_NEAR(*l_two, 0.5 * (*l_one + *l_second), 1e-5 * *l_two);
}

TEST(LlamaModel, IgnoredTargetsCarryNoLossOrGradient) {
  std::unique_ptr<LlamaModel> model = make_model(tiny_config(), spec(v1::Fp8Spec::NONE));
  ASSERT_NE(model, nullptr);
  randomize_parameters(*model, 6);
  data::TokenBatch batch = make_batch(2, 8, 32, 41);
  std::fill(batch.targets.begin(), batch.targets.end(), kIgnoreTarget);
  absl::StatusOr<float> loss = model->forward_backward(batch, 1.0f);
  ASSERT_TRUE(loss.ok()) << loss.status();
  EXPECT_EQ(*loss, 0.0f);
  for (const auto& g : gradients(*model)) EXPECT_EQ(max_abs(g), 0.0);
}

TEST(LlamaModel, MalformedBatchesAreRejected) {
  std::unique_ptr<LlamaModel> model = make_model(tiny_config(), spec(v1::Fp8Spec::NONE));
  ASSERT_NE(model, nullptr);
  const data::TokenBatch good = make_batch(2, 8, 32, 1);

  data::TokenBatch short_inputs = good;
  short_inputs.inputs.pop_back();
  data::TokenBatch short_targets = good;
  short_targets.targets.pop_back();
  data::TokenBatch no_rows = good;
  no_rows.rows = 0;
  for (const data::TokenBatch* b : {&short_inputs, &short_targets, &no_rows}) {
    absl::StatusOr<float> l = model->forward_backward(*b, 1.0f);
    ASSERT_FALSE(l.ok());
    EXPECT_EQ(l.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(l.status().message()), HasSubstr("malformed batch"));
    EXPECT_FALSE(model->evaluate(*b).ok());
  }

  // Longer than max_seq_len.
  absl::StatusOr<float> too_long = model->forward_backward(make_batch(1, 9, 32, 2), 1.0f);
  ASSERT_FALSE(too_long.ok());
  EXPECT_THAT(std::string(too_long.status().message()), HasSubstr("max_seq_len"));

  // Tokens and targets outside the vocabulary.
  data::TokenBatch bad_token = good;
  bad_token.inputs[3] = 32;
  EXPECT_FALSE(model->forward_backward(bad_token, 1.0f).ok());
  EXPECT_FALSE(model->evaluate(bad_token).ok());
  data::TokenBatch bad_target = good;
  bad_target.targets[5] = 40;
  EXPECT_FALSE(model->forward_backward(bad_target, 1.0f).ok());

  // None of this touched the gradients, and the model still works.
  for (const auto& g : gradients(*model)) EXPECT_EQ(max_abs(g), 0.0);
  EXPECT_TRUE(model->forward_backward(good, 1.0f).ok());
}

TEST(LlamaModel, CreateFailsOnADeviceWithoutModelKernels) {
  Device bare("bare", &cpu_backend(), nullptr);
  absl::StatusOr<std::unique_ptr<LlamaModel>> m = LlamaModel::create(bare, tiny_config(), spec(v1::Fp8Spec::NONE), 1);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kFailedPrecondition);
}

// ---- fp8 -------------------------------------------------------------------------------------

double cosine(const std::vector<float>& a, const std::vector<float>& b) {
  double ab = 0.0, aa = 0.0, bb = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    ab += double{a[i]} * b[i];
    aa += double{a[i]} * a[i];
    bb += double{b[i]} * b[i];
  }
  return ab / std::sqrt(aa * bb);
}

TEST(LlamaFp8, TensorwiseLossAndGradientsAreCloseToHighPrecision) {
  const LlamaConfig c = fp8_friendly_config();
  std::unique_ptr<LlamaModel> hp = make_model(c, spec(v1::Fp8Spec::NONE), 17);
  std::unique_ptr<LlamaModel> f8 = make_model(c, spec(v1::Fp8Spec::TENSORWISE), 17);
  ASSERT_NE(hp, nullptr);
  ASSERT_NE(f8, nullptr);
  for (const LinearUnit* u : f8->linears()) ASSERT_TRUE(u->selection.fp8) << u->name;
  const data::TokenBatch batch = make_batch(2, 16, c.vocab_size, 3);

  // At initialisation (same seed: the same weights).
  absl::StatusOr<float> l_hp = hp->forward_backward(batch, 1.0f);
  absl::StatusOr<float> l_f8 = f8->forward_backward(batch, 1.0f);
  ASSERT_TRUE(l_hp.ok()) << l_hp.status();
  ASSERT_TRUE(l_f8.ok()) << l_f8.status();
  EXPECT_NEAR(*l_f8, *l_hp, 0.02 * *l_hp);
  EXPECT_NE(*l_f8, *l_hp) << "the fp8 model computed exactly the high-precision loss: are its GEMMs fp8?";
  ASSERT_TRUE(f8->finish_step().ok());

  // With O(1) weights the fp8 rounding matters more; the loss stays within a few percent
  // and every gradient points the same way.
  randomize_parameters(*hp, 8);
  randomize_parameters(*f8, 8);
  ASSERT_TRUE(hp->parameters().zero_grads().ok());
  ASSERT_TRUE(f8->parameters().zero_grads().ok());
  l_hp = hp->forward_backward(batch, 1.0f);
  l_f8 = f8->forward_backward(batch, 1.0f);
  ASSERT_TRUE(l_hp.ok());
  ASSERT_TRUE(l_f8.ok());
  EXPECT_NEAR(*l_f8, *l_hp, 0.02 * *l_hp);
  const auto g_hp = gradients(*hp), g_f8 = gradients(*f8);
  for (size_t k = 0; k < g_hp.size(); ++k) {
    const double cos = cosine(g_hp[k], g_f8[k]);
    if (verbose()) std::cout << hp->parameters().all()[k].name << ": cosine " << cos << "\n";
    EXPECT_GT(cos, 0.9) << hp->parameters().all()[k].name;
  }
  // evaluate() of the fp8 model is its training forward's loss too.
  absl::StatusOr<float> eval_f8 = f8->evaluate(batch);
  ASSERT_TRUE(eval_f8.ok());
  EXPECT_EQ(*eval_f8, *l_f8);
  EXPECT_TRUE(f8->finish_step().ok());
}

TEST(LlamaFp8, EvaluateLeavesDelayedScalingAlone) {
  // Two delayed-scaling models take the same training step; one also evaluates other
  // batches in between. Their scaling state, and so their next step, must be identical.
  const LlamaConfig c = fp8_friendly_config();
  std::unique_ptr<LlamaModel> a = make_model(c, spec(v1::Fp8Spec::DELAYED), 5);
  std::unique_ptr<LlamaModel> b = make_model(c, spec(v1::Fp8Spec::DELAYED), 5);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  randomize_parameters(*a, 12);
  randomize_parameters(*b, 12);
  const data::TokenBatch train = make_batch(2, 16, c.vocab_size, 1), next = make_batch(2, 16, c.vocab_size, 2);
  for (int step = 0; step < 2; ++step) {
    ASSERT_TRUE(a->forward_backward(train, 1.0f).ok());
    ASSERT_TRUE(b->forward_backward(train, 1.0f).ok());
    for (uint32_t seed : {100u, 101u, 102u}) {
      absl::StatusOr<float> l = a->evaluate(make_batch(4, 16, c.vocab_size, seed + 10 * step));
      ASSERT_TRUE(l.ok()) << l.status();
    }
    ASSERT_TRUE(a->finish_step().ok());
    ASSERT_TRUE(b->finish_step().ok());
  }
  for (size_t i = 0; i < a->linears().size(); ++i) {
    EXPECT_EQ(a->linears()[i]->layer->save_scaling_state().value(),
              b->linears()[i]->layer->save_scaling_state().value())
        << a->linears()[i]->name;
  }
  absl::StatusOr<float> la = a->forward_backward(next, 1.0f), lb = b->forward_backward(next, 1.0f);
  ASSERT_TRUE(la.ok());
  ASSERT_TRUE(lb.ok());
  EXPECT_EQ(*la, *lb);
  EXPECT_EQ(gradients(*a), gradients(*b));
}

TEST(LlamaFp8, QueuedTrainingPassesLeaveTheirLossesOnTheDevice) {
  // queue_forward_backward copies each micro-batch's loss into device memory of the
  // caller's instead of reading it: the losses and gradients are forward_backward's.
  const LlamaConfig c = fp8_friendly_config();
  std::unique_ptr<LlamaModel> read = make_model(c, spec(v1::Fp8Spec::TENSORWISE), 5);
  std::unique_ptr<LlamaModel> queued = make_model(c, spec(v1::Fp8Spec::TENSORWISE), 5);
  ASSERT_TRUE(read && queued);
  absl::StatusOr<Tensor> losses = Tensor::zeros(Device::cpu(), ElementType::kFloat32, {3});
  ASSERT_TRUE(losses.ok());
  std::vector<float> want;
  for (uint32_t micro = 0; micro < 3; ++micro) {
    const data::TokenBatch batch = make_batch(2, 16, c.vocab_size, 40 + micro);
    absl::StatusOr<float> l = read->forward_backward(batch, 1.0f / 3);
    ASSERT_TRUE(l.ok());
    want.push_back(*l);
    ASSERT_TRUE(queued->queue_forward_backward(batch, 1.0f / 3, losses->data<float>() + micro).ok());
  }
  absl::StatusOr<std::vector<float>> got = losses->download<float>();
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, want);
  EXPECT_EQ(gradients(*queued), gradients(*read));
  EXPECT_EQ(queued->queue_forward_backward(make_batch(2, 16, c.vocab_size, 1), 1.0f, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(LlamaFp8, ProjectionsOfOneNormedInputCastItOnceFromRowAmaxesOfTheOpBefore) {
  // wk and wv take wq's casts of the attention's normed input, w3 takes w1's of the
  // feed-forward's (dynamic scaling), unless the module filter casts them differently;
  // delayed scaling keeps one scale per layer, so each casts its own.
  const LlamaConfig c = fp8_friendly_config();
  const data::TokenBatch batch = make_batch(2, 16, c.vocab_size, 3);
  //
  // The layer that does cast a normed input takes its amax from the RMSNorm's row amaxes
  // (its observer's row_amax_casts) instead of reading the input again: wq (or the first
  // fp8 projection), w1 and the output projection, with dynamic scaling; w2 takes the
  // SwiGLU's and wo the attention's. In the backward, the grad_output casts of w2 and wo
  // take the row amaxes of the RMSNorm backward that made grad_hidden, w1's and w3's those
  // of the SwiGLU's, and wq's and wk's those of RoPE's backward (wv's gradient comes from
  // the attention as is).
  struct Case {
    v1::Fp8Spec fp8;
    std::vector<std::string> sharing;        // linear names (without "layers.N.") that take casts
    std::vector<std::string> row_amax;       // those that cast from the norm's row amaxes
    std::vector<std::string> grad_row_amax;  // those whose grad_output casts take row amaxes
  };
  const std::vector<std::string> first_readers = {"attention.wq", "attention.wo", "feed_forward.w1", "feed_forward.w2",
                                                  "output"};
  const std::vector<std::string> grad_readers = {"feed_forward.w2", "feed_forward.w1", "feed_forward.w3",
                                                 "attention.wo",    "attention.wq",    "attention.wk"};
  const std::vector<std::string> grad_readers_but_wq = {"feed_forward.w2", "feed_forward.w1", "feed_forward.w3",
                                                        "attention.wo", "attention.wk"};
  const std::vector<Case> cases = {
      {spec(v1::Fp8Spec::TENSORWISE), {"attention.wk", "attention.wv", "feed_forward.w3"}, first_readers, grad_readers},
      {spec(v1::Fp8Spec::ROWWISE), {"attention.wk", "attention.wv", "feed_forward.w3"}, first_readers, grad_readers},
      {spec(v1::Fp8Spec::TENSORWISE, {"*.attention.wq"}),
       {"attention.wv", "feed_forward.w3"},  // wv takes wk's
       {"attention.wk", "attention.wo", "feed_forward.w1", "feed_forward.w2", "output"},
       grad_readers_but_wq},
      {spec(v1::Fp8Spec::DELAYED), {}, {}, {}},
      {spec(v1::Fp8Spec::NONE), {}, {}, {}},
  };
  auto listed = [](const std::vector<std::string>& names, const std::string& name) {
    return std::find(names.begin(), names.end(), name) != names.end() ? 1 : 0;
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.fp8.ShortDebugString());
    std::unique_ptr<LlamaModel> m = make_model(c, k.fp8, 5);
    ASSERT_NE(m, nullptr);
    std::vector<float8_test::CastCounts> counts(m->linears().size());
    for (size_t i = 0; i < counts.size(); ++i) m->mutable_linears()[i]->layer->set_observer(&counts[i]);
    ASSERT_TRUE(m->forward_backward(batch, 1.0f).ok());
    ASSERT_TRUE(m->finish_step().ok());
    for (size_t i = 0; i < counts.size(); ++i) {
      const LinearUnit* u = m->linears()[i];
      const std::string name = u->name.substr(u->name.find('.', u->name.find('.') + 1) + 1);
      EXPECT_EQ(counts[i].shared_input_casts, listed(k.sharing, name)) << u->name;
      EXPECT_EQ(counts[i].row_amax_casts, listed(k.row_amax, name) + listed(k.grad_row_amax, name)) << u->name;
    }
  }
}

// The Trainer's loop with and without the weights' row amaxes from AdamW's update: the
// same losses and parameters bit for bit, the weight casts of the first taking them from
// the second step on (the first step's weights come from initialisation, with none); a
// model told they are stale casts as before.
TEST(LlamaFp8, WeightRowAmaxesFromTheUpdateChangeNothingAndServeTheWeightCasts) {
  const LlamaConfig c = fp8_friendly_config();
  const data::TokenBatch batch = make_batch(2, 16, c.vocab_size, 31);
  for (const auto recipe : {v1::Fp8Spec::TENSORWISE, v1::Fp8Spec::ROWWISE, v1::Fp8Spec::DELAYED}) {
    SCOPED_TRACE(v1::Fp8Spec::Recipe_Name(recipe));
    std::unique_ptr<LlamaModel> hinted = make_model(c, spec(recipe), 7), plain = make_model(c, spec(recipe), 7);
    ASSERT_TRUE(hinted && plain);
    // Each model's layers all report to one counter.
    float8_test::CastCounts hinted_counts, plain_counts;
    for (LinearUnit* u : hinted->mutable_linears()) u->layer->set_observer(&hinted_counts);
    for (LinearUnit* u : plain->mutable_linears()) u->layer->set_observer(&plain_counts);
    absl::StatusOr<ModelOps*> ops = hinted->device().model_ops();
    ASSERT_TRUE(ops.ok()) << ops.status();
    absl::StatusOr<AdamW> opt_hinted = AdamW::create(**ops, hinted->parameters(), AdamWHyperparams{});
    absl::StatusOr<AdamW> opt_plain = AdamW::create(**ops, plain->parameters(), AdamWHyperparams{});
    ASSERT_TRUE(opt_hinted.ok() && opt_plain.ok());
    absl::StatusOr<std::vector<LlamaModel::WeightRowAmaxes>> outputs = hinted->weight_row_amax_outputs();
    ASSERT_TRUE(outputs.ok()) << outputs.status();
    // Dynamic weight casts take them; delayed ones measure while casting.
    EXPECT_EQ(outputs->size(), recipe == v1::Fp8Spec::DELAYED ? 0u : hinted->linears().size());
    for (const auto& o : *outputs) ASSERT_TRUE(opt_hinted->write_row_amaxes(*o.weight, o.out).ok());
    auto casts_from_row_amaxes = [&](const LlamaModel& m) {
      return &m == hinted.get() ? hinted_counts.row_amax_casts : plain_counts.row_amax_casts;
    };
    const int64_t steps = 3;
    for (int64_t step = 0; step < steps; ++step) {
      for (LlamaModel* m : {hinted.get(), plain.get()}) ASSERT_TRUE(m->parameters().zero_grads().ok());
      absl::StatusOr<float> a = hinted->forward_backward(batch, 1.0f), b = plain->forward_backward(batch, 1.0f);
      ASSERT_TRUE(a.ok() && b.ok());
      EXPECT_EQ(*a, *b) << "step " << step;
      for (LlamaModel* m : {hinted.get(), plain.get()}) ASSERT_TRUE(m->finish_step().ok());
      ASSERT_TRUE(opt_hinted->step(1e-2f).ok());
      ASSERT_TRUE(opt_plain->step(1e-2f).ok());
      hinted->set_weight_row_amaxes_current(true);
    }
    const auto want = parameter_values(*plain), got = parameter_values(*hinted);
    for (size_t k = 0; k < want.size(); ++k) EXPECT_EQ(got[k], want[k]) << plain->parameters().all()[k].name;
    EXPECT_EQ(casts_from_row_amaxes(*hinted) - casts_from_row_amaxes(*plain),
              static_cast<int64_t>(outputs->size()) * (steps - 1));

    // Told they are stale (weights changed another way), the casts read the weights again.
    hinted->set_weight_row_amaxes_current(false);
    const int64_t hinted_before = casts_from_row_amaxes(*hinted), plain_before = casts_from_row_amaxes(*plain);
    ASSERT_TRUE(hinted->forward_backward(batch, 1.0f).ok());
    ASSERT_TRUE(plain->forward_backward(batch, 1.0f).ok());
    EXPECT_EQ(casts_from_row_amaxes(*hinted) - hinted_before, casts_from_row_amaxes(*plain) - plain_before);
  }
}

TEST(LlamaFp8, ModelFinishStepEqualsEachLayerFinishingOnItsOwn) {
  // finish_step() reads every layer's amaxes in one packed read: the histories, scales and
  // next steps must be exactly those of each layer reading its own (Float8Linear::finish_step()).
  const LlamaConfig c = fp8_friendly_config();
  std::unique_ptr<LlamaModel> packed = make_model(c, spec(v1::Fp8Spec::DELAYED), 5);
  std::unique_ptr<LlamaModel> own = make_model(c, spec(v1::Fp8Spec::DELAYED), 5);
  ASSERT_NE(packed, nullptr);
  ASSERT_NE(own, nullptr);
  randomize_parameters(*packed, 12);
  randomize_parameters(*own, 12);
  for (uint32_t step = 0; step < 3; ++step) {
    for (uint32_t micro = 0; micro < 2; ++micro) {  // amaxes: max over micro-batches
      const data::TokenBatch batch = make_batch(2, 16, c.vocab_size, 10 * step + micro);
      absl::StatusOr<float> lp = packed->forward_backward(batch, 0.5f), lo = own->forward_backward(batch, 0.5f);
      ASSERT_TRUE(lp.ok() && lo.ok());
      ASSERT_EQ(*lp, *lo) << "step " << step;
    }
    ASSERT_TRUE(packed->finish_step().ok());
    for (const LinearUnit* u : own->linears()) ASSERT_TRUE(u->layer->finish_step().ok()) << u->name;
  }
  int delayed = 0;
  for (size_t i = 0; i < packed->linears().size(); ++i) {
    delayed += packed->linears()[i]->layer->delayed().count();
    EXPECT_EQ(packed->linears()[i]->layer->save_scaling_state().value(),
              own->linears()[i]->layer->save_scaling_state().value())
        << packed->linears()[i]->name;
  }
  EXPECT_GT(delayed, 0);
  EXPECT_EQ(gradients(*packed), gradients(*own));
}

// ---- the module filter -----------------------------------------------------------------------

std::vector<std::string> linear_names(const LlamaModel& m) {
  std::vector<std::string> names;
  for (const LinearUnit* u : m.linears()) names.push_back(u->name);
  return names;
}

TEST(LlamaModuleFilter, LinearsInOrder) {
  std::unique_ptr<LlamaModel> m = make_model(tiny_config(), spec(v1::Fp8Spec::NONE));
  ASSERT_NE(m, nullptr);
  const std::vector<std::string> want = {
      "layers.0.attention.wq",      "layers.0.attention.wk",      "layers.0.attention.wv",
      "layers.0.attention.wo",      "layers.0.feed_forward.w1",   "layers.0.feed_forward.w3",
      "layers.0.feed_forward.w2",   "layers.1.attention.wq",      "layers.1.attention.wk",
      "layers.1.attention.wv",      "layers.1.attention.wo",      "layers.1.feed_forward.w1",
      "layers.1.feed_forward.w3",   "layers.1.feed_forward.w2",   "output"};
  EXPECT_EQ(linear_names(*m), want);
  for (const LinearUnit* u : m->linears()) {
    // Each unit's weight is the parameter of its name, shaped [out, in] like its layer.
    const Parameter* p = m->parameters().find(u->name);
    ASSERT_NE(p, nullptr) << u->name;
    EXPECT_EQ(u->weight, p);
    EXPECT_EQ(u->weight->value.dim(0), u->layer->info().out_features);
    EXPECT_EQ(u->weight->value.dim(1), u->layer->info().in_features);
    EXPECT_FALSE(u->selection.fp8);
    EXPECT_EQ(u->selection.reason, "recipe none");
    EXPECT_FALSE(u->layer->info().config.any_fp8_gemm()) << u->name;
  }
}

TEST(LlamaModuleFilter, OutputExcludedOthersFp8) {
  std::unique_ptr<LlamaModel> m = make_model(fp8_friendly_config(), spec(v1::Fp8Spec::TENSORWISE, {"output"}));
  ASSERT_NE(m, nullptr);
  ASSERT_EQ(m->linears().size(), 15u);
  for (const LinearUnit* u : m->linears()) {
    if (u->name == "output") {
      EXPECT_FALSE(u->selection.fp8);
      EXPECT_EQ(u->selection.reason, "excluded by fp8.include/fp8.exclude");
      EXPECT_FALSE(u->layer->info().config.any_fp8_gemm());
    } else {
      EXPECT_TRUE(u->selection.fp8) << u->name << ": " << u->selection.reason;
      EXPECT_TRUE(u->selection.reason.empty()) << u->name;
      // Tensorwise: all three GEMMs in fp8, and the layer runs what was selected.
      EXPECT_TRUE(u->selection.config.output_runs_in_fp8()) << u->name;
      EXPECT_TRUE(u->selection.config.grad_input_runs_in_fp8()) << u->name;
      EXPECT_TRUE(u->selection.config.grad_weight_runs_in_fp8()) << u->name;
      EXPECT_TRUE(u->layer->info().config.output_runs_in_fp8()) << u->name;
    }
  }
  const data::TokenBatch batch = make_batch(2, 16, 64, 1);
  EXPECT_TRUE(m->forward_backward(batch, 1.0f).ok());
  EXPECT_TRUE(m->finish_step().ok());
}

TEST(LlamaModuleFilter, IncludeAndExcludeGlobs) {
  v1::Fp8Spec s = spec(v1::Fp8Spec::TENSORWISE, {"layers.1.*"});
  s.add_include("*.feed_forward.*");
  s.add_include("output");
  std::unique_ptr<LlamaModel> m = make_model(fp8_friendly_config(), s);
  ASSERT_NE(m, nullptr);
  for (const LinearUnit* u : m->linears()) {
    const bool want = u->name == "output" || (u->name.find("layers.0.feed_forward.") == 0);
    EXPECT_EQ(u->selection.fp8, want) << u->name;
  }
}

TEST(LlamaModuleFilter, DimensionsNotMultiplesOf16StayHighPrecision) {
  // dim 16 over 4 heads with 2 kv heads: wk and wv are 16 -> 8; ffn 40: w1, w3 are
  // 16 -> 40 and w2 40 -> 16. With exclude [] the output (16 -> 32) is fp8.
  LlamaConfig c = tiny_config();
  c.ffn_dim = 40;
  std::unique_ptr<LlamaModel> m = make_model(c, spec(v1::Fp8Spec::TENSORWISE));
  ASSERT_NE(m, nullptr);
  for (const LinearUnit* u : m->linears()) {
    const std::string& n = u->name;
    const bool kv = n.ends_with("attention.wk") || n.ends_with("attention.wv");
    const bool ffn = n.find("feed_forward") != std::string::npos;
    if (kv) {
      EXPECT_FALSE(u->selection.fp8) << n;
      EXPECT_EQ(u->selection.reason, "16 -> 8 is not a multiple of 16") << n;
    } else if (ffn) {
      EXPECT_FALSE(u->selection.fp8) << n;
      EXPECT_THAT(u->selection.reason, HasSubstr("is not a multiple of 16")) << n;
      EXPECT_THAT(u->selection.reason, HasSubstr("40")) << n;
    } else {
      EXPECT_TRUE(u->selection.fp8) << n << ": " << u->selection.reason;
    }
    if (!u->selection.fp8) {
      EXPECT_FALSE(u->layer->info().config.any_fp8_gemm()) << n;
    }
  }
  // The mixed model trains.
  const data::TokenBatch batch = make_batch(2, 8, 32, 2);
  absl::StatusOr<float> loss = m->forward_backward(batch, 1.0f);
  ASSERT_TRUE(loss.ok()) << loss.status();
  EXPECT_TRUE(std::isfinite(*loss));

  // pad_inner_dim: every layer fp8.
  v1::Fp8Spec padded = spec(v1::Fp8Spec::TENSORWISE);
  padded.set_pad_inner_dim(true);
  std::unique_ptr<LlamaModel> p = make_model(c, padded);
  ASSERT_NE(p, nullptr);
  for (const LinearUnit* u : p->linears()) {
    EXPECT_TRUE(u->selection.fp8) << u->name << ": " << u->selection.reason;
  }
}

TEST(LlamaModuleFilter, TiedOutputSharesTheEmbeddingTable) {
  LlamaConfig c = fp8_friendly_config();
  c.tie_embeddings = true;
  std::unique_ptr<LlamaModel> m = make_model(c, spec(v1::Fp8Spec::TENSORWISE, {"output"}));
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->parameters().find("output"), nullptr);
  const Parameter* table = m->parameters().find("tok_embeddings");
  ASSERT_NE(table, nullptr);
  ASSERT_FALSE(m->linears().empty());
  const LinearUnit* out = m->linears().back();
  EXPECT_EQ(out->name, "output");
  EXPECT_EQ(out->weight, table);
  EXPECT_FALSE(out->selection.fp8);
  EXPECT_EQ(m->parameters().element_count(), c.parameter_count());
}

// ---- initialisation ---------------------------------------------------------------------------

TEST(LlamaInit, ParametersNamesShapesAndDecay) {
  for (bool tie : {false, true}) {
    const LlamaConfig c = tiny_config(tie);
    std::unique_ptr<LlamaModel> m = make_model(c, spec(v1::Fp8Spec::NONE));
    ASSERT_NE(m, nullptr);
    EXPECT_EQ(m->parameters().element_count(), c.parameter_count());
    std::vector<std::string> names;
    for (const Parameter& p : m->parameters().all()) {
      names.push_back(p.name);
      EXPECT_EQ(p.grad.shape(), p.value.shape()) << p.name;
      EXPECT_EQ(p.weight_decay, p.value.rank() == 2) << p.name;
    }
    std::vector<std::string> want = {"tok_embeddings"};
    for (int i = 0; i < 2; ++i) {
      const std::string l = "layers." + std::to_string(i) + ".";
      for (const char* n : {"attention_norm", "attention.wq", "attention.wk", "attention.wv", "attention.wo",
                            "ffn_norm", "feed_forward.w1", "feed_forward.w2", "feed_forward.w3"}) {
        want.push_back(l + n);
      }
    }
    want.push_back("norm");
    if (!tie) want.push_back("output");
    EXPECT_EQ(names, want);
    EXPECT_EQ(m->parameters().find("layers.1.attention.wk")->value.shape(), (TensorShape{8, 16}));
    EXPECT_EQ(m->parameters().find("layers.0.feed_forward.w2")->value.shape(), (TensorShape{16, 32}));
  }
}

// tiny_config's vocabulary of 32 is padded to 64 rows of tok_embeddings and output. The
// padding's logits never win and never receive loss: filling the output's padding rows
// (so that their logits would dominate every softmax) changes no loss and no gradient
// bit, and the padding rows' own gradients are zero, so the optimizer leaves them at zero.
TEST(LlamaVocabularyPadding, PaddingLogitsNeverWinAndGetNoGradient) {
  for (bool tied : {false, true}) {
    SCOPED_TRACE(tied ? "tied embeddings" : "untied");
    const LlamaConfig c = tiny_config(tied);
    ASSERT_EQ(c.padded_vocab(), 64);
    std::unique_ptr<LlamaModel> zero = make_model(c, spec(v1::Fp8Spec::NONE), 5);
    std::unique_ptr<LlamaModel> filled = make_model(c, spec(v1::Fp8Spec::NONE), 5);
    ASSERT_NE(zero, nullptr);
    ASSERT_NE(filled, nullptr);
    Parameter* output = const_cast<Parameter*>(filled->parameters().find(tied ? "tok_embeddings" : "output"));
    ASSERT_EQ(output->padding_rows, 32);
    std::vector<float> values = values_of(output->value);
    std::fill(values.begin() + 32 * c.dim, values.end(), 3.0f);
    ASSERT_TRUE(output->value.upload<float>(values).ok());

    const data::TokenBatch batch = make_batch(2, c.max_seq_len, c.vocab_size, 9);
    absl::StatusOr<std::vector<float>> logits = zero->logits(batch);
    ASSERT_TRUE(logits.ok()) << logits.status();
    EXPECT_EQ(logits->size(), static_cast<size_t>(2 * c.max_seq_len * c.vocab_size));
    ASSERT_TRUE(zero->parameters().zero_grads().ok());
    ASSERT_TRUE(filled->parameters().zero_grads().ok());
    absl::StatusOr<float> zero_loss = zero->forward_backward(batch, 1.0f);
    absl::StatusOr<float> filled_loss = filled->forward_backward(batch, 1.0f);
    ASSERT_TRUE(zero_loss.ok() && filled_loss.ok());
    EXPECT_EQ(*filled_loss, *zero_loss);
    const auto& params = zero->parameters().all();
    const std::vector<std::vector<float>> gz = gradients(*zero), gf = gradients(*filled);
    for (size_t k = 0; k < params.size(); ++k) {
      EXPECT_EQ(std::memcmp(gz[k].data(), gf[k].data(), gz[k].size() * sizeof(float)), 0) << params[k].name;
      const size_t row = gz[k].size() / static_cast<size_t>(params[k].shape.at(0));
      const size_t real = row * static_cast<size_t>(params[k].shape.at(0) - params[k].padding_rows);
      for (size_t i = real; i < gz[k].size(); ++i) ASSERT_EQ(gz[k][i], 0.0f) << params[k].name << " padding grad";
    }
  }
}

TEST(LlamaInit, DeterministicFromTheSeed) {
  const LlamaConfig c = tiny_config();
  std::unique_ptr<LlamaModel> a = make_model(c, spec(v1::Fp8Spec::NONE), 42);
  std::unique_ptr<LlamaModel> b = make_model(c, spec(v1::Fp8Spec::TENSORWISE), 42);  // the recipe plays no part
  std::unique_ptr<LlamaModel> d = make_model(c, spec(v1::Fp8Spec::NONE), 43);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_NE(d, nullptr);
  const auto& pa = a->parameters().all();
  const auto& pb = b->parameters().all();
  const auto& pd = d->parameters().all();
  ASSERT_EQ(pa.size(), pb.size());
  ASSERT_EQ(pa.size(), pd.size());
  for (size_t k = 0; k < pa.size(); ++k) {
    const std::vector<float> va = values_of(pa[k].value), vb = values_of(pb[k].value), vd = values_of(pd[k].value);
    // Same seed: the same bits.
    ASSERT_EQ(va.size(), vb.size());
    EXPECT_EQ(std::memcmp(va.data(), vb.data(), va.size() * sizeof(float)), 0) << pa[k].name;
    if (pa[k].init == ParameterInit::kOnes) {
      // Norm gains start at exactly one, whatever the seed.
      for (float x : va) ASSERT_EQ(x, 1.0f) << pa[k].name;
      EXPECT_EQ(va, vd) << pa[k].name;
    } else {
      // Another seed: other values (all but a vanishing few entries differ), but for the
      // vocabulary's padding rows (32 pads to 64), zero whatever the seed.
      const size_t real = va.size() / static_cast<size_t>(pa[k].shape.at(0)) *
                          static_cast<size_t>(pa[k].shape.at(0) - pa[k].padding_rows);
      size_t same = 0;
      for (size_t i = 0; i < real; ++i) same += va[i] == vd[i];
      EXPECT_LT(same, real / 100 + 1) << pa[k].name;
      for (size_t i = real; i < va.size(); ++i) ASSERT_EQ(va[i], 0.0f) << pa[k].name << " padding";
    }
  }
  // Parameters of one model draw from different streams.
  EXPECT_NE(values_of(a->parameters().find("layers.0.attention.wq")->value),
            values_of(a->parameters().find("layers.1.attention.wq")->value));
}

TEST(LlamaInit, Distributions) {
  LlamaConfig c = tiny_config();
  c.n_layers = 8;  // scaled init: 0.02 / sqrt(16) = 0.005
  std::unique_ptr<LlamaModel> m = make_model(c, spec(v1::Fp8Spec::NONE), 7);
  ASSERT_NE(m, nullptr);
  // Pool each kind over the layers for a tighter estimate.
  double sum_normal = 0, sq_normal = 0, n_normal = 0, sum_scaled = 0, sq_scaled = 0, n_scaled = 0;
  for (const Parameter& p : m->parameters().all()) {
    const std::vector<float> v = values_of(p.value);
    for (float x : v) {
      ASSERT_TRUE(std::isfinite(x)) << p.name;
      if (p.init == ParameterInit::kNormal) {
        sum_normal += x;
        sq_normal += double{x} * x;
        n_normal += 1;
      } else if (p.init == ParameterInit::kScaledNormal) {
        sum_scaled += x;
        sq_scaled += double{x} * x;
        n_scaled += 1;
      }
    }
    // Which parameters get which init.
    const bool residual_out = p.name.ends_with("attention.wo") || p.name.ends_with("feed_forward.w2");
    const bool norm = p.value.rank() == 1;
    EXPECT_EQ(p.init, norm ? ParameterInit::kOnes : residual_out ? ParameterInit::kScaledNormal
                                                                : ParameterInit::kNormal)
        << p.name;
  }
  const double std_normal = std::sqrt(sq_normal / n_normal), std_scaled = std::sqrt(sq_scaled / n_scaled);
  EXPECT_NEAR(std_normal, 0.02, 0.002) << "over " << n_normal;
  EXPECT_NEAR(std_scaled, 0.005, 0.0005) << "over " << n_scaled;
  EXPECT_NEAR(sum_normal / n_normal, 0.0, 0.002);
  EXPECT_NEAR(sum_scaled / n_scaled, 0.0, 0.0005);
}

}  // namespace
}  // namespace fp8::engine
