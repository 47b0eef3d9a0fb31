// Next-token logits of a model (a checkpoint's, or an imported one's) one token at a time,
// with a KV cache: each fed token's keys and values are kept, so position p costs one
// pass over the weights and p cached rows instead of a forward over the whole prefix.
//
// fp32 on the CPU, no fp8 casts: the function LlamaModel computes in evaluation with
// recipe none (RMSNorm in double as the CPU ops do, RoPE from the same tables, causal
// grouped-query attention, SwiGLU), each matrix-vector product accumulated in double.
//
//   LlamaDecoder d = *LlamaDecoder::create(model);
//   for (int32_t t : prompt) logits = *d.feed(t);   // logits after the last prompt token
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/engine/hf/checkpoint_model.h"
#include "worker/engine/hf/next_token_model.h"

namespace fp8::ops {
class RopeTable;
}

namespace fp8::hf {

class LlamaDecoder final : public NextTokenModel {
 public:
  // `model` must outlive the decoder. A parameter missing or shaped otherwise than the
  // config says is an InvalidArgument naming it.
  static absl::StatusOr<LlamaDecoder> create(const CheckpointModel& model);

  absl::StatusOr<std::span<const float>> feed(int32_t token) override;
  int64_t position() const override { return position_; }
  int64_t max_seq_len() const override { return c_.max_seq_len; }
  void reset() override { position_ = 0; }

 private:
  struct Block {
    const float *attention_norm, *wq, *wk, *wv, *wo, *ffn_norm, *w1, *w2, *w3;
  };
  explicit LlamaDecoder(const CheckpointModel& model);

  const engine::LlamaConfig& c_;
  const float* embeddings_ = nullptr;
  const float* final_norm_ = nullptr;
  const float* output_ = nullptr;  // the embeddings when tied
  std::vector<Block> blocks_;
  std::shared_ptr<const ops::RopeTable> rope_;
  // Per block, [positions so far (or more), n_kv_heads * head_dim] each.
  std::vector<std::vector<float>> keys_, values_;
  int64_t position_ = 0;
  // Scratch of one position.
  std::vector<float> x_, h_, q_, k_, v_, attn_, scores_, gate_, up_, logits_;
};

}  // namespace fp8::hf
