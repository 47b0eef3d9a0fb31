// A model's weights as a decoder reads them: a CheckpointModel's tensors by role, each
// checked against the shape its config gives it (device_decoder.h uploads them).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/engine/hf/checkpoint_model.h"

namespace fp8::hf {

struct DecoderWeights {
  struct Block {
    const NamedTensor *attention_norm, *wq, *wk, *wv, *wo, *ffn_norm, *w1, *w2, *w3;
  };
  const NamedTensor* embeddings = nullptr;  // [vocab_size, dim]
  const NamedTensor* final_norm = nullptr;  // [dim]
  const NamedTensor* output = nullptr;      // [vocab_size, dim]; the embeddings when tied
  std::vector<Block> blocks;
};

// Pointers into `model`, which must outlive them. A parameter missing or shaped otherwise
// than the config says is an InvalidArgument naming it.
absl::StatusOr<DecoderWeights> decoder_weights(const CheckpointModel& model);

}  // namespace fp8::hf
