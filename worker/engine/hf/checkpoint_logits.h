// Logits of a checkpoint's model for one sequence of token ids, computed by this project's
// own forward in fp32 with no fp8 casts (recipe none): the reference that an exported model,
// and DeviceDecoder's generation, are compared with.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/engine/hf/checkpoint_model.h"
#include "worker/engine/model/llama.h"
#include "worker/engine/tensor/device.h"

namespace fp8::hf {

// The training engine's model of `model` on `device`: fp32 activations, recipe none, the
// checkpoint's parameters (the vocabulary's padding rows zero).
absl::StatusOr<std::unique_ptr<engine::LlamaModel>> engine_model(const CheckpointModel& model,
                                                                 const engine::Device& device);

// InvalidArgument for no tokens, more than max_seq_len of them, or an id outside the
// vocabulary; `what` starts the message.
absl::Status check_tokens(const engine::LlamaConfig& config, std::span<const int32_t> tokens, const char* what);

// [tokens.size(), vocab_size] row-major, from `model` (engine_model's); errors of
// check_tokens.
absl::StatusOr<std::vector<float>> engine_logits(engine::LlamaModel& model, std::span<const int32_t> tokens);

// The same from the checkpoint's model, on the CPU.
absl::StatusOr<std::vector<float>> checkpoint_logits(const CheckpointModel& model, std::span<const int32_t> tokens);

}  // namespace fp8::hf
