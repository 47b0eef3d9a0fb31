#include "worker/engine/hf/device_decoder.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "worker/engine/hf/decoder_weights.h"
#include "worker/engine/status_macros.h"

namespace fp8::hf {

using engine::ElementType;
using engine::Tensor;

namespace {

absl::StatusOr<Tensor> upload(const engine::Device& device, const NamedTensor* t) {
  return Tensor::from_host<float>(device, t->values, t->shape);
}

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceDecoder>> DeviceDecoder::create(const CheckpointModel& model,
                                                                     const engine::Device& device) {
  FP8_ASSIGN_OR_RETURN(ModelOps * ops, device.model_ops());
  FP8_ASSIGN_OR_RETURN(DecoderWeights w, decoder_weights(model));
  const engine::LlamaConfig& c = model.config;
  std::unique_ptr<DeviceDecoder> d(new DeviceDecoder(c, device, *ops));
  FP8_ASSIGN_OR_RETURN(d->embeddings_, upload(device, w.embeddings));
  FP8_ASSIGN_OR_RETURN(d->final_norm_, upload(device, w.final_norm));
  if (!c.tie_embeddings) {
    FP8_ASSIGN_OR_RETURN(d->output_, upload(device, w.output));
  }
  for (const DecoderWeights::Block& b : w.blocks) {
    Block block;
    FP8_ASSIGN_OR_RETURN(block.attention_norm, upload(device, b.attention_norm));
    FP8_ASSIGN_OR_RETURN(block.wq, upload(device, b.wq));
    FP8_ASSIGN_OR_RETURN(block.wk, upload(device, b.wk));
    FP8_ASSIGN_OR_RETURN(block.wv, upload(device, b.wv));
    FP8_ASSIGN_OR_RETURN(block.wo, upload(device, b.wo));
    FP8_ASSIGN_OR_RETURN(block.ffn_norm, upload(device, b.ffn_norm));
    FP8_ASSIGN_OR_RETURN(block.w1, upload(device, b.w1));
    FP8_ASSIGN_OR_RETURN(block.w2, upload(device, b.w2));
    FP8_ASSIGN_OR_RETURN(block.w3, upload(device, b.w3));
    d->blocks_.push_back(std::move(block));
  }
  auto scratch = [&](Tensor& t, ElementType type, int64_t n) -> absl::Status {
    FP8_ASSIGN_OR_RETURN(t, Tensor::empty(device, type, {n}));
    return absl::OkStatus();
  };
  FP8_RETURN_IF_ERROR(scratch(d->tokens_, ElementType::kInt32, kChunk));
  for (Tensor* t : {&d->x_, &d->mid_, &d->h_, &d->q_, &d->attn_}) {
    FP8_RETURN_IF_ERROR(scratch(*t, ElementType::kFloat32, kChunk * c.dim));
  }
  for (Tensor* t : {&d->gate_, &d->up_, &d->swiglu_}) {
    FP8_RETURN_IF_ERROR(scratch(*t, ElementType::kFloat32, kChunk * c.ffn_dim));
  }
  FP8_RETURN_IF_ERROR(scratch(d->inv_rms_, ElementType::kFloat32, kChunk));
  FP8_RETURN_IF_ERROR(scratch(d->logits_device_, ElementType::kFloat32, c.vocab_size));
  d->logits_.resize(static_cast<size_t>(c.vocab_size));
  return d;
}

absl::Status DeviceDecoder::linear(int64_t rows, const void* x, const Tensor& w, float* y, const void* residual) {
  GemmArgs g;
  g.m = rows;
  g.n = w.dim(0);
  g.k = w.dim(1);
  g.a = x;
  g.b = w.raw();
  g.trans_b = true;  // w is stored [out, in]
  g.out = y;
  if (residual != nullptr) {
    g.addend = residual;
    g.beta = 1.0f;
  }
  return device_.backend().gemm(g);
}

absl::Status DeviceDecoder::reserve(int64_t rows) {
  if (rows <= cache_rows_) return absl::OkStatus();
  const int64_t grown = std::min(c_.max_seq_len, std::max(rows, 2 * cache_rows_));
  const int64_t kv_dim = c_.n_kv_heads * c_.head_dim();
  for (Block& b : blocks_) {
    for (Tensor* cache : {&b.keys, &b.values}) {
      FP8_ASSIGN_OR_RETURN(Tensor larger, Tensor::empty(device_, ElementType::kFloat32, {grown, kv_dim}));
      if (cache_rows_ > 0) FP8_RETURN_IF_ERROR(device_.backend().copy(larger.raw(), cache->raw(), cache->nbytes()));
      *cache = std::move(larger);
    }
  }
  cache_rows_ = grown;
  return absl::OkStatus();
}

absl::Status DeviceDecoder::run_blocks(std::span<const int32_t> tokens) {
  const auto n = static_cast<int64_t>(tokens.size());
  const int64_t pos = position_;
  const int64_t hd = c_.head_dim();
  const int64_t kv_dim = c_.n_kv_heads * hd;
  FP8_RETURN_IF_ERROR(reserve(pos + n));
  FP8_RETURN_IF_ERROR(device_.backend().queue_copy_from_host(tokens_.raw(), tokens.data(), tokens.size_bytes()));
  FP8_RETURN_IF_ERROR(ops_.embedding_forward(tokens_.data<int32_t>(), n, embeddings_.data<float>(), c_.vocab_size,
                                             c_.dim, x_.raw()));
  const RopeShape q_rope{1, n, c_.n_heads, hd, pos};
  const RopeShape k_rope{1, n, c_.n_kv_heads, hd, pos};
  const KvCacheAttentionShape attention{1, n, pos, cache_rows_, c_.n_heads, c_.n_kv_heads, hd};
  float* const inv_rms = inv_rms_.data<float>();
  for (Block& b : blocks_) {
    // The new positions' rows of the cache: contiguous, so the GEMMs write them in place.
    float* k_rows = b.keys.data<float>() + pos * kv_dim;
    float* v_rows = b.values.data<float>() + pos * kv_dim;
    FP8_RETURN_IF_ERROR(
        ops_.rmsnorm_forward(x_.raw(), b.attention_norm.data<float>(), n, c_.dim, c_.norm_eps, h_.raw(), inv_rms));
    FP8_RETURN_IF_ERROR(linear(n, h_.raw(), b.wq, q_.data<float>()));
    FP8_RETURN_IF_ERROR(linear(n, h_.raw(), b.wk, k_rows));
    FP8_RETURN_IF_ERROR(linear(n, h_.raw(), b.wv, v_rows));
    FP8_RETURN_IF_ERROR(ops_.rope_forward(q_rope, c_.rope_theta, q_.raw(), q_.raw()));
    FP8_RETURN_IF_ERROR(ops_.rope_forward(k_rope, c_.rope_theta, k_rows, k_rows));
    FP8_RETURN_IF_ERROR(
        ops_.kv_cache_attention_forward(attention, q_.raw(), b.keys.raw(), b.values.raw(), attn_.raw()));
    FP8_RETURN_IF_ERROR(linear(n, attn_.raw(), b.wo, mid_.data<float>(), x_.raw()));
    FP8_RETURN_IF_ERROR(
        ops_.rmsnorm_forward(mid_.raw(), b.ffn_norm.data<float>(), n, c_.dim, c_.norm_eps, h_.raw(), inv_rms));
    FP8_RETURN_IF_ERROR(linear(n, h_.raw(), b.w1, gate_.data<float>()));
    FP8_RETURN_IF_ERROR(linear(n, h_.raw(), b.w3, up_.data<float>()));
    FP8_RETURN_IF_ERROR(ops_.swiglu_forward(gate_.raw(), up_.raw(), n * c_.ffn_dim, swiglu_.raw()));
    FP8_RETURN_IF_ERROR(linear(n, swiglu_.raw(), b.w2, x_.data<float>(), mid_.raw()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::span<const float>> DeviceDecoder::feed(std::span<const int32_t> tokens) {
  if (tokens.empty()) return absl::InvalidArgumentError("no tokens to feed");
  for (int32_t token : tokens) {
    if (token < 0 || token >= c_.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("token ", token, " is outside the vocabulary of ", c_.vocab_size));
    }
  }
  if (static_cast<int64_t>(tokens.size()) > c_.max_seq_len - position_) {
    return absl::InvalidArgumentError(absl::StrCat("the context is full: max_seq_len is ", c_.max_seq_len));
  }
  // A failure below leaves position_ where it started: the tokens are not in the context,
  // and the cache rows they wrote are written again by the next tokens fed.
  const int64_t start = position_;
  for (size_t first = 0; first < tokens.size(); first += kChunk) {
    const std::span<const int32_t> chunk = tokens.subspan(first, std::min<size_t>(kChunk, tokens.size() - first));
    if (absl::Status s = run_blocks(chunk); !s.ok()) {
      position_ = start;
      return s;
    }
    position_ += static_cast<int64_t>(chunk.size());
  }
  // The logits of the last token's row only.
  const int64_t last = static_cast<int64_t>(((tokens.size() - 1) % kChunk)) * c_.dim;
  absl::Status s = ops_.rmsnorm_forward(x_.data<float>() + last, final_norm_.data<float>(), 1, c_.dim, c_.norm_eps,
                                        h_.raw(), inv_rms_.data<float>());
  if (s.ok()) s = linear(1, h_.raw(), c_.tie_embeddings ? embeddings_ : output_, logits_device_.data<float>());
  if (s.ok()) s = logits_device_.download_bytes(std::as_writable_bytes(std::span<float>(logits_)));
  if (!s.ok()) {
    position_ = start;
    return s;
  }
  return std::span<const float>(logits_);
}

}  // namespace fp8::hf
