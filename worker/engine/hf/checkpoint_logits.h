// Logits of a checkpoint's model for one sequence of token ids, computed by this project's
// own forward on the CPU in fp32 with no fp8 casts (recipe none): the reference that an
// exported model is compared with.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/engine/hf/checkpoint_model.h"

namespace fp8::hf {

// [tokens.size(), vocab_size] row-major. InvalidArgument for no tokens, more than
// max_seq_len of them, or an id outside the vocabulary.
absl::StatusOr<std::vector<float>> checkpoint_logits(const CheckpointModel& model, std::span<const int32_t> tokens);

}  // namespace fp8::hf
