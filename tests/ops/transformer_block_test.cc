// A whole Llama-style decoder block composed from the model ops, its hand-written
// backward checked by finite differences of a double-precision re-evaluation:
//
//   h1 = RMSNorm(x)                       q = RoPE(h1·Wqᵀ), k = RoPE(h1·Wkᵀ), v = h1·Wvᵀ
//   x2 = x + Attention(q, k, v)·Woᵀ       h2 = RMSNorm(x2)
//   y  = x2 + (silu(h2·Wgᵀ) ∘ h2·Wuᵀ)·Wdᵀ
//
// The linear layers are plain loops here (in the engine they are fp8 GEMMs). If every op's
// backward is right but their contracts do not compose (a gradient written where it
// should have been added, a layout mismatch between ops), this is the test that fails.
#include <array>
#include <utility>

#include <gtest/gtest.h>

#include "fp8/model_ops.h"
#include "tests/ops/gradient_check.h"
#include "tests/ops/reference_ops.h"

namespace fp8::ops_test {
namespace {

constexpr int64_t kBatch = 2, kSeq = 5, kDim = 8, kHeads = 2, kKvHeads = 1, kFfn = 12;
constexpr int64_t kHeadDim = kDim / kHeads;
constexpr int64_t kRows = kBatch * kSeq;
constexpr int64_t kQDim = kHeads * kHeadDim, kKvDim = kKvHeads * kHeadDim;
constexpr double kTheta = 10000.0;
constexpr float kNormEps = 1e-5f;
constexpr AttentionShape kAttention{kBatch, kSeq, kHeads, kKvHeads, kHeadDim};
constexpr RopeShape kRopeQ{kBatch, kSeq, kHeads, kHeadDim};
constexpr RopeShape kRopeK{kBatch, kSeq, kKvHeads, kHeadDim};

// The block's parameters (linear weights [out, in], as torch.nn.Linear), or their gradients.
template <typename T>
struct BlockWeights {
  std::vector<T> attn_norm, wq, wk, wv, wo, ffn_norm, w_gate, w_up, w_down;

  std::array<std::pair<const char*, std::vector<T>*>, 9> named() {
    return {{{"attn_norm", &attn_norm},
             {"wq", &wq},
             {"wk", &wk},
             {"wv", &wv},
             {"wo", &wo},
             {"ffn_norm", &ffn_norm},
             {"w_gate", &w_gate},
             {"w_up", &w_up},
             {"w_down", &w_down}}};
  }
};

BlockWeights<float> random_weights() {
  auto linear = [](int64_t out, int64_t in, uint32_t seed) {
    return uniform(static_cast<size_t>(out * in), seed, -0.5f, 0.5f);
  };
  auto norm = [](uint32_t seed) { return uniform(static_cast<size_t>(kDim), seed, 0.5f, 1.5f); };
  return {norm(1), linear(kQDim, kDim, 2), linear(kKvDim, kDim, 3), linear(kKvDim, kDim, 4), linear(kDim, kQDim, 5),
          norm(6), linear(kFfn, kDim, 7),  linear(kFfn, kDim, 8),   linear(kDim, kFfn, 9)};
}

BlockWeights<float> zeros_like(BlockWeights<float> w) {
  for (auto& [name, t] : w.named()) std::fill(t->begin(), t->end(), 0.0f);
  return w;
}

BlockWeights<double> to_double(BlockWeights<float> w) {
  BlockWeights<double> d;
  auto from = w.named();
  auto to = d.named();
  for (size_t i = 0; i < from.size(); ++i) *to[i].second = ops_test::to_double(*from[i].second);
  return d;
}

// ---- the reference: the block's forward in double --------------------------------------

Vec reference_block(const Vec& x, const BlockWeights<double>& w) {
  const Vec h1 = ref::rmsnorm(x, w.attn_norm, kRows, kDim, kNormEps);
  const Vec q = ref::rope(ref::linear(h1, w.wq, kRows, kDim, kQDim), kRopeQ, kTheta);
  const Vec k = ref::rope(ref::linear(h1, w.wk, kRows, kDim, kKvDim), kRopeK, kTheta);
  const Vec v = ref::linear(h1, w.wv, kRows, kDim, kKvDim);
  const Vec attn = ref::attention(q, k, v, kAttention).out;
  const Vec x2 = ref::add(x, ref::linear(attn, w.wo, kRows, kQDim, kDim));
  const Vec h2 = ref::rmsnorm(x2, w.ffn_norm, kRows, kDim, kNormEps);
  const Vec act = ref::swiglu(ref::linear(h2, w.w_gate, kRows, kDim, kFfn), ref::linear(h2, w.w_up, kRows, kDim, kFfn));
  return ref::add(x2, ref::linear(act, w.w_down, kRows, kFfn, kDim));
}

// ---- the block in fp32 from the model ops -------------------------------------------------

// y = x · wᵀ
std::vector<float> linear(const std::vector<float>& x, const std::vector<float>& w, int64_t in, int64_t out) {
  const int64_t rows = static_cast<int64_t>(x.size()) / in;
  std::vector<float> y(static_cast<size_t>(rows * out), 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      for (int64_t i = 0; i < in; ++i) y[r * out + o] += x[r * in + i] * w[o * in + i];
    }
  }
  return y;
}

// grad_x += grad_y · w;  grad_w += grad_yᵀ · x
void linear_backward(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& grad_y,
                     int64_t in, int64_t out, std::vector<float>* grad_x, std::vector<float>* grad_w) {
  const int64_t rows = static_cast<int64_t>(x.size()) / in;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      const float g = grad_y[r * out + o];
      for (int64_t i = 0; i < in; ++i) {
        (*grad_x)[r * in + i] += g * w[o * in + i];
        (*grad_w)[o * in + i] += g * x[r * in + i];
      }
    }
  }
}

std::vector<float> zeros(int64_t n) { return std::vector<float>(static_cast<size_t>(n), 0.0f); }

// What the forward saves for the backward.
struct Activations {
  std::vector<float> x, h1, inv_rms1, q, k, v, attn, lse, x2, h2, inv_rms2, gate, up, act, y;
};

Activations block_forward(ModelOps& ops, const std::vector<float>& x, const BlockWeights<float>& w) {
  Activations a;
  a.x = x;
  a.h1 = zeros(kRows * kDim);
  a.inv_rms1 = zeros(kRows);
  EXPECT_TRUE(
      ops.rmsnorm_forward(x.data(), w.attn_norm.data(), kRows, kDim, kNormEps, a.h1.data(), a.inv_rms1.data()).ok());
  a.q = linear(a.h1, w.wq, kDim, kQDim);
  a.k = linear(a.h1, w.wk, kDim, kKvDim);
  a.v = linear(a.h1, w.wv, kDim, kKvDim);
  EXPECT_TRUE(ops.rope_forward(kRopeQ, kTheta, a.q.data(), a.q.data()).ok());
  EXPECT_TRUE(ops.rope_forward(kRopeK, kTheta, a.k.data(), a.k.data()).ok());
  a.attn = zeros(kRows * kQDim);
  a.lse = zeros(kBatch * kHeads * kSeq);
  EXPECT_TRUE(ops.attention_forward(kAttention, a.q.data(), a.k.data(), a.v.data(), a.attn.data(), a.lse.data()).ok());
  const auto attn_out = linear(a.attn, w.wo, kQDim, kDim);
  a.x2 = zeros(kRows * kDim);
  EXPECT_TRUE(ops.add(x.data(), attn_out.data(), kRows * kDim, a.x2.data()).ok());
  a.h2 = zeros(kRows * kDim);
  a.inv_rms2 = zeros(kRows);
  EXPECT_TRUE(
      ops.rmsnorm_forward(a.x2.data(), w.ffn_norm.data(), kRows, kDim, kNormEps, a.h2.data(), a.inv_rms2.data()).ok());
  a.gate = linear(a.h2, w.w_gate, kDim, kFfn);
  a.up = linear(a.h2, w.w_up, kDim, kFfn);
  a.act = zeros(kRows * kFfn);
  EXPECT_TRUE(ops.swiglu_forward(a.gate.data(), a.up.data(), kRows * kFfn, a.act.data()).ok());
  const auto ffn_out = linear(a.act, w.w_down, kFfn, kDim);
  a.y = zeros(kRows * kDim);
  EXPECT_TRUE(ops.add(a.x2.data(), ffn_out.data(), kRows * kDim, a.y.data()).ok());
  return a;
}

// Returns grad_x; adds the weights' gradients into *grads.
std::vector<float> block_backward(ModelOps& ops, const Activations& a, const BlockWeights<float>& w,
                                  const std::vector<float>& grad_y, BlockWeights<float>* grads) {
  // y = x2 + ffn(x2): the residual passes grad_y to x2 unchanged, and the FFN adds to it.
  std::vector<float> grad_x2 = grad_y;
  auto grad_act = zeros(kRows * kFfn);
  linear_backward(a.act, w.w_down, grad_y, kFfn, kDim, &grad_act, &grads->w_down);
  auto grad_gate = zeros(kRows * kFfn), grad_up = zeros(kRows * kFfn);
  EXPECT_TRUE(
      ops.swiglu_backward(a.gate.data(), a.up.data(), grad_act.data(), kRows * kFfn, grad_gate.data(), grad_up.data())
          .ok());
  auto grad_h2 = zeros(kRows * kDim);
  linear_backward(a.h2, w.w_gate, grad_gate, kDim, kFfn, &grad_h2, &grads->w_gate);
  linear_backward(a.h2, w.w_up, grad_up, kDim, kFfn, &grad_h2, &grads->w_up);
  auto grad_x2_from_norm = zeros(kRows * kDim);
  EXPECT_TRUE(ops.rmsnorm_backward(a.x2.data(), w.ffn_norm.data(), a.inv_rms2.data(), grad_h2.data(), kRows, kDim,
                                   grad_x2_from_norm.data(), grads->ffn_norm.data())
                  .ok());
  EXPECT_TRUE(ops.accumulate(grad_x2_from_norm.data(), kRows * kDim, grad_x2.data()).ok());

  // x2 = x + attention(x): the same again.
  auto grad_attn = zeros(kRows * kQDim);
  linear_backward(a.attn, w.wo, grad_x2, kQDim, kDim, &grad_attn, &grads->wo);
  auto grad_q = zeros(kRows * kQDim), grad_k = zeros(kRows * kKvDim), grad_v = zeros(kRows * kKvDim);
  EXPECT_TRUE(ops.attention_backward(kAttention, a.q.data(), a.k.data(), a.v.data(), a.attn.data(), a.lse.data(),
                                     grad_attn.data(), grad_q.data(), grad_k.data(), grad_v.data())
                  .ok());
  EXPECT_TRUE(ops.rope_backward(kRopeQ, kTheta, grad_q.data(), grad_q.data()).ok());
  EXPECT_TRUE(ops.rope_backward(kRopeK, kTheta, grad_k.data(), grad_k.data()).ok());
  auto grad_h1 = zeros(kRows * kDim);
  linear_backward(a.h1, w.wq, grad_q, kDim, kQDim, &grad_h1, &grads->wq);
  linear_backward(a.h1, w.wk, grad_k, kDim, kKvDim, &grad_h1, &grads->wk);
  linear_backward(a.h1, w.wv, grad_v, kDim, kKvDim, &grad_h1, &grads->wv);
  auto grad_x_from_norm = zeros(kRows * kDim);
  EXPECT_TRUE(ops.rmsnorm_backward(a.x.data(), w.attn_norm.data(), a.inv_rms1.data(), grad_h1.data(), kRows, kDim,
                                   grad_x_from_norm.data(), grads->attn_norm.data())
                  .ok());
  auto grad_x = zeros(kRows * kDim);
  EXPECT_TRUE(ops.add(grad_x2.data(), grad_x_from_norm.data(), kRows * kDim, grad_x.data()).ok());
  return grad_x;
}

TEST(TransformerBlock, ForwardMatchesReference) {
  const auto x = uniform(static_cast<size_t>(kRows * kDim), 10);
  const auto w = random_weights();
  const Activations a = block_forward(cpu_model_ops(), x, w);
  EXPECT_LT(scaled_max_error(a.y, reference_block(ops_test::to_double(x), to_double(w))), 1e-5);
}

TEST(TransformerBlock, GradientsOfInputAndEveryWeightMatchFiniteDifferences) {
  const auto x = uniform(static_cast<size_t>(kRows * kDim), 11);
  const auto w = random_weights();
  const auto loss_weights = uniform(static_cast<size_t>(kRows * kDim), 12);  // L = Σ loss_weights ∘ y
  const Activations a = block_forward(cpu_model_ops(), x, w);
  BlockWeights<float> grads = zeros_like(w);
  const auto grad_x = block_backward(cpu_model_ops(), a, w, loss_weights, &grads);

  const Vec xd = ops_test::to_double(x);
  const BlockWeights<double> wd = to_double(w);
  expect_gradient_near(
      grad_x, numeric_gradient([&](const Vec& xx) { return weighted_sum(reference_block(xx, wd), loss_weights); }, xd),
      "input x");
  auto grad_tensors = grads.named();
  for (size_t i = 0; i < grad_tensors.size(); ++i) {
    auto perturbed = wd;
    std::vector<double>* tensor = perturbed.named()[i].second;
    const Vec numeric = numeric_gradient(
        [&](const Vec& t) {
          *tensor = t;
          return weighted_sum(reference_block(xd, perturbed), loss_weights);
        },
        *tensor);
    expect_gradient_near(*grad_tensors[i].second, numeric, grad_tensors[i].first);
  }
}

}  // namespace
}  // namespace fp8::ops_test
