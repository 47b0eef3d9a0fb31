// model.init_from: a job's parameters from a model in Hugging Face's Llama layout instead
// of a random initialisation (hf/hf_model_source.h reads it). The folder's config.json must
// describe the job's model; each difference is named, field against key. Under tensor
// parallelism each rank takes its part of every split tensor (Parameter::split): its rows of
// wq, wk, wv, w1 and w3, its columns of wo and w2. Under FSDP each rank reads only the rows
// of its shards (fsdp/shard_layout.h), rows of its tensor-parallel part where there is one.
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
  // This process's data-parallel rank and the data-parallel ranks: `trained` holds rank
  // `rank`'s FSDP shards when world_size > 1 (fsdp_model.h). Tensor-parallel peers share
  // one data-parallel rank; each parameter's split says which part it holds.
  int rank = 0;
  int world_size = 1;
};

// Overwrites every parameter of `trained` (full tensors or tensor-parallel parts, or this
// rank's shards of them) with the folder's. InvalidArgument, prefixed "model.init_from",
// for a folder that does not hold the job's model.
absl::Status init_from_hf(const v1::ModelSpec& model, const InitFromOptions& options, ParameterSet& trained);

}  // namespace fp8::engine
