// A model as a checkpoint would hold it, for the generation tests: LlamaModel's initial
// parameters (recipe none, seeded), by name, without the vocabulary's padding rows.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "worker/engine/hf/checkpoint_model.h"
#include "worker/engine/model/llama.h"
#include "worker/engine/tensor/device.h"

namespace fp8::hf {

inline CheckpointModel random_checkpoint_model(const engine::LlamaConfig& config, uint64_t seed) {
  CheckpointModel m;
  m.config = config;
  v1::Fp8Spec fp8;
  fp8.set_recipe(v1::Fp8Spec::NONE);
  absl::StatusOr<std::unique_ptr<engine::LlamaModel>> model =
      engine::LlamaModel::create(engine::Device::cpu(), m.config, fp8, seed);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return m;
  for (const engine::Parameter& p : (*model)->parameters().all()) {
    absl::StatusOr<std::vector<float>> values = p.value.download<float>();
    EXPECT_TRUE(values.ok());
    if (!values.ok()) return m;
    std::vector<int64_t> shape = p.value.shape();
    const int64_t row = p.value.numel() / shape[0];
    shape[0] -= p.padding_rows;
    values->resize(static_cast<size_t>(shape[0] * row));
    m.parameters.push_back({p.name, shape, *values});
  }
  return m;
}

}  // namespace fp8::hf
