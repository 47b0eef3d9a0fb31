// A committed checkpoint's model, whole: its config and every parameter's full fp32 tensor,
// from the shards of any world size. Under FSDP each rank's shard holds rows
// [r · rows_per_rank, (r + 1) · rows_per_rank) of every parameter, flattened and padded
// with zero rows (worker/engine/fsdp/shard_layout.h); the shards are put back together and
// the padding dropped.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "fp8/v1/job.pb.h"
#include "worker/engine/model/llama_config.h"

namespace fp8::hf {

struct NamedTensor {
  std::string name;  // this project's (llama_names.h)
  std::vector<int64_t> shape;
  std::vector<float> values;
};

struct CheckpointModel {
  std::filesystem::path step_dir;  // <root>/step-N
  int64_t step = 0;
  int world_size = 1;
  v1::ModelSpec spec;  // as the job resolved it
  engine::LlamaConfig config;
  std::vector<NamedTensor> parameters;  // llama_parameter_shapes' order

  const NamedTensor* find(std::string_view name) const;
};

// `dir` is a checkpoint root (its newest committed step is read) or one step-N directory.
// The model's shape comes from the shards' metadata (engine::kModelSpecMetadata), or from
// `model` where given (checkpoints written before that record existed). No committed
// checkpoint, a damaged shard (a checksum that does not match) or a shard that does not
// fit the model is an error naming the file; InvalidArgument throughout, since all are
// bad input to the tools that call this.
absl::StatusOr<CheckpointModel> read_checkpoint_model(const std::filesystem::path& dir,
                                                      const std::optional<v1::ModelSpec>& model = std::nullopt);

// The model a fresh job would start from (LlamaModel's initial parameters from `seed`,
// recipe none), in a checkpoint's terms: by name, without the vocabulary's padding rows.
// For the generation tests and benchmarks, which need a model of a given shape.
absl::StatusOr<CheckpointModel> initial_checkpoint_model(const engine::LlamaConfig& config, uint64_t seed);

}  // namespace fp8::hf
