// A model as a checkpoint would hold it, for the generation tests: LlamaModel's initial
// parameters (recipe none, seeded), by name, without the vocabulary's padding rows.
#pragma once

#include <cstdint>

#include "gtest/gtest.h"
#include "worker/engine/hf/checkpoint_model.h"

namespace fp8::hf {

inline CheckpointModel random_checkpoint_model(const engine::LlamaConfig& config, uint64_t seed) {
  absl::StatusOr<CheckpointModel> m = initial_checkpoint_model(config, seed);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? *std::move(m) : CheckpointModel{};
}

}  // namespace fp8::hf
