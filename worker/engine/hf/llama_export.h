// Export of a committed checkpoint to Hugging Face's Llama layout: a folder with
// config.json (hf_config.h), model.safetensors (llama_names.h for the tensor names) and,
// for a job trained on SentencePiece tokens, its model as tokenizer.model.
//
// The folder appears whole or not at all: it is written as a hidden temporary folder
// beside `out` and renamed at the end; on any error the temporary folder is removed.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>

#include "absl/status/statusor.h"
#include "fp8/v1/job.pb.h"
#include "worker/engine/hf/safetensors_format.h"

namespace fp8::hf {

struct ExportOptions {
  std::filesystem::path checkpoint;  // a root or one step-N directory (checkpoint_model.h)
  std::filesystem::path out;         // must not exist, or be an empty directory
  SafetensorsDType dtype = SafetensorsDType::kF32;  // bf16 rounds to nearest even
  // The model section, for checkpoints that do not record theirs.
  std::optional<v1::ModelSpec> model;
  // The job's data.tokenizer_model (empty: none), copied as tokenizer.model; its
  // vocabulary must be the model's.
  std::filesystem::path tokenizer_model;
};

struct ExportSummary {
  std::filesystem::path step_dir;
  int64_t step = 0;
  int world_size = 1;
  int64_t tensors = 0;
  int64_t parameters = 0;  // elements
};

// InvalidArgument for bad input (no committed checkpoint, a damaged shard, an `out` that
// exists and is not empty), naming the path; other errors are I/O failures.
absl::StatusOr<ExportSummary> export_llama(const ExportOptions& options);

}  // namespace fp8::hf
