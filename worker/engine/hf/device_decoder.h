// Next-token logits on any engine device, a GPU included, with a KV cache: the model's
// weights in that device's memory, and each fed token run through the engine's own
// kernels (the Backend's fp32 GEMMs, ModelOps' RMSNorm, RoPE at the token's position,
// SwiGLU) with its keys and values kept per block, so that position p costs one pass
// over the weights and over p cached rows (ModelOps::kv_cache_attention_forward).
//
// fp32, no fp8 casts: the function LlamaModel computes in evaluation with recipe none.
// The cache grows with the context (doubling), not to max_seq_len at once: an imported
// model may allow a context far longer than any prompt given to it.
//
//   auto device = *engine::Device::cuda(0);
//   auto d = *DeviceDecoder::create(model, *device);
//   for (int32_t t : prompt) logits = *d->feed(t);
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
  // The model's weights are copied to `device`, which must outlive the decoder; `model`
  // need not. A parameter missing or shaped otherwise than the config says is an
  // InvalidArgument naming it.
  static absl::StatusOr<std::unique_ptr<DeviceDecoder>> create(const CheckpointModel& model,
                                                               const engine::Device& device);

  absl::StatusOr<std::span<const float>> feed(int32_t token) override;
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

  // y [rows] = w [rows, cols] · x [cols], plus `residual` [rows] where given.
  absl::Status linear(const engine::Tensor& x, const engine::Tensor& w, float* y,
                      const engine::Tensor* residual = nullptr);
  // Makes room in every block's cache for `rows` positions, keeping the rows cached so far.
  absl::Status reserve(int64_t rows);

  const engine::LlamaConfig c_;
  const engine::Device& device_;
  ModelOps& ops_;
  engine::Tensor embeddings_, final_norm_, output_;  // output_: empty when tied
  std::vector<Block> blocks_;
  int64_t cache_rows_ = 0;
  int64_t position_ = 0;
  // Scratch of one position, in the device's memory.
  engine::Tensor token_, x_, mid_, h_, q_, attn_, gate_, up_, swiglu_, inv_rms_, logits_device_;
  std::vector<float> logits_;
};

}  // namespace fp8::hf
