// model.init_from: a job's parameters from a model in Hugging Face's Llama layout instead
// of a random initialisation (hf/hf_model_source.h reads it). The folder's config.json must
// describe the job's model; each difference is named, field against key. Under FSDP each
// rank reads only the rows of its shards (fsdp/shard_layout.h).
#pragma once

#include <filesystem>

#include "absl/status/status.h"
#include "fp8/v1/job.pb.h"
#include "worker/engine/model/parameters.h"

namespace fp8::engine {

struct InitFromOptions {
  std::filesystem::path dir;
  // False where the folder was opened beneath a root (/proc/self/fd/N): a symbolic link
  // as one of its files is refused rather than followed out of it.
  bool follow_links = true;
  int rank = 0;        // this process's rank and the job's ranks: `trained` holds rank
  int world_size = 1;  // `rank`'s FSDP shards when world_size > 1 (fsdp_model.h)
};

// Overwrites every parameter of `trained` (full tensors, or this rank's shards) with the
// folder's. InvalidArgument, prefixed "model.init_from", for a folder that does not hold
// the job's model.
absl::Status init_from_hf(const v1::ModelSpec& model, const InitFromOptions& options, ParameterSet& trained);

}  // namespace fp8::engine
