#include "worker/engine/hf/llama_decoder.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/parallel.h"
#include "kernels/ops/model_arith.h"
#include "kernels/ops/rope_table.h"
#include "worker/engine/hf/llama_names.h"

namespace fp8::hf {

namespace {

// y[rows] = W[rows, cols] · x[cols], rows split across the CPU threads.
void matvec(const float* w, const float* x, int64_t rows, int64_t cols, float* y) {
  const int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(cols, 1));
  fp8::cpu::parallel_for(rows, grain, [&](int64_t, int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* wr = w + r * cols;
      double sum = 0;
      for (int64_t j = 0; j < cols; ++j) sum += static_cast<double>(wr[j]) * x[j];
      y[r] = static_cast<float>(sum);
    }
  });
}

void rmsnorm(const float* x, const float* weight, int64_t dim, float eps, float* out) {
  double sum = 0;
  for (int64_t j = 0; j < dim; ++j) sum += static_cast<double>(x[j]) * x[j];
  const float inv = static_cast<float>(1.0 / std::sqrt(sum / static_cast<double>(dim) + static_cast<double>(eps)));
  for (int64_t j = 0; j < dim; ++j) out[j] = x[j] * inv * weight[j];
}

// Rotates each head's adjacent pairs by the position's angles (kernels/ops/rope.cc).
void rope(const ops::RopeTable& table, int64_t pos, int64_t heads, int64_t head_dim, float* x) {
  const float* cos_row = table.cos_row(pos);
  const float* sin_row = table.sin_row(pos);
  for (int64_t h = 0; h < heads; ++h) {
    float* v = x + h * head_dim;
    for (int64_t i = 0; i < head_dim / 2; ++i) {
      ops::rotate_pair(v[2 * i], v[2 * i + 1], cos_row[i], sin_row[i], &v[2 * i], &v[2 * i + 1]);
    }
  }
}

}  // namespace

LlamaDecoder::LlamaDecoder(const CheckpointModel& model) : c_(model.config) {}

absl::StatusOr<LlamaDecoder> LlamaDecoder::create(const CheckpointModel& model) {
  LlamaDecoder d(model);
  const engine::LlamaConfig& c = model.config;
  auto tensor = [&](const std::string& name, std::vector<int64_t> shape) -> absl::StatusOr<const float*> {
    const NamedTensor* t = model.find(name);
    if (t == nullptr || t->shape != shape) {
      return absl::InvalidArgumentError(
          absl::StrCat("the model has no parameter ", name, " shaped as its config says"));
    }
    return t->values.data();
  };
  absl::StatusOr<const float*> p = tensor("tok_embeddings", {c.vocab_size, c.dim});
  if (!p.ok()) return p.status();
  d.embeddings_ = *p;
  if (!(p = tensor("norm", {c.dim})).ok()) return p.status();
  d.final_norm_ = *p;
  if (c.tie_embeddings) {
    d.output_ = d.embeddings_;
  } else {
    if (!(p = tensor("output", {c.vocab_size, c.dim})).ok()) return p.status();
    d.output_ = *p;
  }
  const int64_t kv_dim = c.n_kv_heads * c.head_dim();
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string b = absl::StrCat("layers.", i, ".");
    Block block{};
    const std::pair<const float**, std::pair<std::string, std::vector<int64_t>>> wanted[] = {
        {&block.attention_norm, {"attention_norm", {c.dim}}},
        {&block.wq, {"attention.wq", {c.dim, c.dim}}},
        {&block.wk, {"attention.wk", {kv_dim, c.dim}}},
        {&block.wv, {"attention.wv", {kv_dim, c.dim}}},
        {&block.wo, {"attention.wo", {c.dim, c.dim}}},
        {&block.ffn_norm, {"ffn_norm", {c.dim}}},
        {&block.w1, {"feed_forward.w1", {c.ffn_dim, c.dim}}},
        {&block.w2, {"feed_forward.w2", {c.dim, c.ffn_dim}}},
        {&block.w3, {"feed_forward.w3", {c.ffn_dim, c.dim}}},
    };
    for (const auto& [slot, what] : wanted) {
      if (!(p = tensor(b + what.first, what.second)).ok()) return p.status();
      *slot = *p;
    }
    d.blocks_.push_back(block);
  }
  d.keys_.resize(static_cast<size_t>(c.n_layers));
  d.values_.resize(static_cast<size_t>(c.n_layers));
  d.rope_ = std::make_shared<const ops::RopeTable>(c.max_seq_len, c.head_dim(), c.rope_theta);
  d.x_.resize(c.dim);
  d.h_.resize(c.dim);
  d.q_.resize(c.dim);
  d.k_.resize(kv_dim);
  d.v_.resize(kv_dim);
  d.attn_.resize(c.dim);
  d.scores_.resize(c.max_seq_len);
  d.gate_.resize(c.ffn_dim);
  d.up_.resize(c.ffn_dim);
  d.logits_.resize(c.vocab_size);
  return d;
}

absl::StatusOr<std::span<const float>> LlamaDecoder::feed(int32_t token) {
  if (token < 0 || token >= c_.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat("token ", token, " is outside the vocabulary of ", c_.vocab_size));
  }
  if (position_ >= c_.max_seq_len) {
    return absl::InvalidArgumentError(absl::StrCat("the context is full: max_seq_len is ", c_.max_seq_len));
  }
  const int64_t pos = position_;
  const int64_t hd = c_.head_dim();
  const int64_t kv_dim = c_.n_kv_heads * hd;
  const int64_t group = c_.n_heads / c_.n_kv_heads;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  // The cache grows with the context, not to max_seq_len at once: an imported model may
  // allow a context far longer than any prompt given to it.
  const auto needed = static_cast<size_t>((pos + 1) * kv_dim);
  if (keys_[0].size() < needed) {
    const size_t grown = std::min(static_cast<size_t>(c_.max_seq_len * kv_dim), std::max(needed, 2 * keys_[0].size()));
    for (size_t l = 0; l < blocks_.size(); ++l) {
      keys_[l].resize(grown);
      values_[l].resize(grown);
    }
  }
  std::copy_n(embeddings_ + token * c_.dim, c_.dim, x_.begin());
  for (size_t l = 0; l < blocks_.size(); ++l) {
    const Block& b = blocks_[l];
    rmsnorm(x_.data(), b.attention_norm, c_.dim, c_.norm_eps, h_.data());
    matvec(b.wq, h_.data(), c_.dim, c_.dim, q_.data());
    matvec(b.wk, h_.data(), kv_dim, c_.dim, k_.data());
    matvec(b.wv, h_.data(), kv_dim, c_.dim, v_.data());
    rope(*rope_, pos, c_.n_heads, hd, q_.data());
    rope(*rope_, pos, c_.n_kv_heads, hd, k_.data());
    std::copy(k_.begin(), k_.end(), keys_[l].begin() + pos * kv_dim);
    std::copy(v_.begin(), v_.end(), values_[l].begin() + pos * kv_dim);
    // Causal attention of this position over the cached ones, head by head.
    for (int64_t h = 0; h < c_.n_heads; ++h) {
      const float* q = q_.data() + h * hd;
      const int64_t kv_offset = (h / group) * hd;
      float max = -INFINITY;
      for (int64_t t = 0; t <= pos; ++t) {
        const float* k = keys_[l].data() + t * kv_dim + kv_offset;
        double dot = 0;
        for (int64_t j = 0; j < hd; ++j) dot += static_cast<double>(q[j]) * k[j];
        scores_[t] = static_cast<float>(dot) * scale;
        max = std::max(max, scores_[t]);
      }
      double sum = 0;
      for (int64_t t = 0; t <= pos; ++t) sum += (scores_[t] = std::exp(scores_[t] - max));
      float* out = attn_.data() + h * hd;
      for (int64_t j = 0; j < hd; ++j) {
        double acc = 0;
        for (int64_t t = 0; t <= pos; ++t) {
          acc += static_cast<double>(scores_[t]) * values_[l][t * kv_dim + kv_offset + j];
        }
        out[j] = static_cast<float>(acc / sum);
      }
    }
    matvec(b.wo, attn_.data(), c_.dim, c_.dim, h_.data());
    for (int64_t j = 0; j < c_.dim; ++j) x_[j] += h_[j];
    rmsnorm(x_.data(), b.ffn_norm, c_.dim, c_.norm_eps, h_.data());
    matvec(b.w1, h_.data(), c_.ffn_dim, c_.dim, gate_.data());
    matvec(b.w3, h_.data(), c_.ffn_dim, c_.dim, up_.data());
    for (int64_t j = 0; j < c_.ffn_dim; ++j) gate_[j] = ops::swiglu(gate_[j], up_[j]);
    matvec(b.w2, gate_.data(), c_.dim, c_.ffn_dim, h_.data());
    for (int64_t j = 0; j < c_.dim; ++j) x_[j] += h_[j];
  }
  rmsnorm(x_.data(), final_norm_, c_.dim, c_.norm_eps, h_.data());
  matvec(output_, h_.data(), c_.vocab_size, c_.dim, logits_.data());
  ++position_;
  return std::span<const float>(logits_);
}

}  // namespace fp8::hf
