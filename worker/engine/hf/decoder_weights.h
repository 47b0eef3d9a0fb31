// A model's weights as a decoder reads them: pointers into a CheckpointModel's tensors,
// each checked against the shape its config gives it (device_decoder.h uploads them).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/engine/hf/checkpoint_model.h"

namespace fp8::hf {

struct DecoderWeights {
  struct Block {
    const float *attention_norm, *wq, *wk, *wv, *wo, *ffn_norm, *w1, *w2, *w3;
  };
  const float* embeddings = nullptr;  // [vocab_size, dim]
  const float* final_norm = nullptr;  // [dim]
  const float* output = nullptr;      // [vocab_size, dim]; the embeddings when tied
  std::vector<Block> blocks;
};

// Pointers into `model`, which must outlive them. A parameter missing or shaped otherwise
// than the config says is an InvalidArgument naming it.
absl::StatusOr<DecoderWeights> decoder_weights(const CheckpointModel& model);

}  // namespace fp8::hf
