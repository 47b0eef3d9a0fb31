// Next-token logits on any engine device, a GPU included, with a KV cache: the model's
// weights in that device's memory, and the fed tokens run through the engine's own
// kernels (the Backend's fp32 GEMMs, ModelOps' RMSNorm, RoPE at the tokens' positions,
// SwiGLU) with their keys and values kept per block, so that a token at position p costs
// one pass over the weights and over p cached rows (ModelOps::kv_cache_attention_forward).
// A prompt's tokens go through together, kChunk at a time: GEMMs over many rows instead
// of a matrix-vector product per token.
//
// fp32, no fp8 casts: the function LlamaModel computes in evaluation with recipe none.
// The cache grows with the context (doubling), not to max_seq_len at once: an imported
// model may allow a context far longer than any prompt given to it.
//
//   auto device = *engine::Device::cuda(0);
//   auto d = *DeviceDecoder::create(model, *device);
//   logits = *d->feed(prompt);       // then *d->feed(next_token), ...
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "fp8/model_ops.h"
#include "worker/engine/hf/checkpoint_model.h"
#include "worker/engine/hf/next_token_model.h"
#include "worker/engine/tensor/device.h"
#include "worker/engine/tensor/tensor.h"

namespace fp8::hf {

class DeviceDecoder final : public NextTokenModel {
 public:
  // Tokens computed together at most: bounds the scratch to kChunk rows of the widest layer.
  static constexpr int64_t kChunk = 64;

  // The model's weights are copied to `device`, which must outlive the decoder; `model`
  // need not. A parameter missing or shaped otherwise than the config says is an
  // InvalidArgument naming it.
  static absl::StatusOr<std::unique_ptr<DeviceDecoder>> create(const CheckpointModel& model,
                                                               const engine::Device& device);

  using NextTokenModel::feed;
  absl::StatusOr<std::span<const float>> feed(std::span<const int32_t> tokens) override;
  int64_t position() const override { return position_; }
  int64_t max_seq_len() const override { return c_.max_seq_len; }
  void reset() override { position_ = 0; }

 private:
  struct Block {
    engine::Tensor attention_norm, wq, wk, wv, wo, ffn_norm, w1, w2, w3;
    engine::Tensor keys, values;  // [cache_rows_, n_kv_heads * head_dim]
  };
  DeviceDecoder(const engine::LlamaConfig& config, const engine::Device& device, ModelOps& ops)
      : c_(config), device_(device), ops_(ops) {}

  // Runs tokens [1, kChunk] at positions position_ ..; their keys and values land in the
  // cache, and the residual stream of each in x_. Leaves position_ as it was.
  absl::Status run_blocks(std::span<const int32_t> tokens);
  // y [rows, w.dim(0)] = x [rows, w.dim(1)] · wᵀ, plus `residual` [rows, w.dim(0)] where given.
  absl::Status linear(int64_t rows, const void* x, const engine::Tensor& w, float* y, const void* residual = nullptr);
  // Makes room in every block's cache for `rows` positions, keeping the rows cached so far.
  absl::Status reserve(int64_t rows);

  const engine::LlamaConfig c_;
  const engine::Device& device_;
  ModelOps& ops_;
  engine::Tensor embeddings_, final_norm_, output_;  // output_: empty when tied
  std::vector<Block> blocks_;
  int64_t cache_rows_ = 0;
  int64_t position_ = 0;
  // Scratch of kChunk positions, in the device's memory.
  engine::Tensor tokens_, x_, mid_, h_, q_, attn_, gate_, up_, swiglu_, inv_rms_, logits_device_;
  std::vector<float> logits_;
};

}  // namespace fp8::hf
