// A model in Hugging Face's Llama layout read whole into a CheckpointModel (every
// parameter's fp32 tensor by this project's name and row order): what generation and the
// tests take. HfModelSource (hf_model_source.h) reads it and says what it refuses.
#pragma once

#include <filesystem>

#include "absl/status/statusor.h"
#include "worker/engine/hf/checkpoint_model.h"

namespace fp8::hf {

// step is 0 and world_size 1; step_dir is `dir`. InvalidArgument for every refusal.
absl::StatusOr<CheckpointModel> read_hf_model(const std::filesystem::path& dir);

}  // namespace fp8::hf
