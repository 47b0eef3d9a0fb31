// The sizes of a Llama-style decoder, read from the job's model section.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "common/jobspec/model_shapes.h"
#include "fp8/fp8.h"
#include "fp8/v1/job.pb.h"

namespace fp8::engine {

// What a decoder block keeps from its forward for its backward (train.activation_checkpointing).
// What is not kept runs again just before the block's backward, with the same inputs and
// the same fp8 scales, so every mode computes the same bits.
enum class ActivationCheckpointing : uint8_t {
  kNone,       // everything the backward reads
  kFull,       // the block's input only: the whole block runs again
  kSelective,  // the GEMMs' and the attention's outputs: the norms and SwiGLU's product run again
};
const char* activation_checkpointing_name(ActivationCheckpointing a);

struct LlamaConfig {
  int64_t vocab_size = 256;
  int64_t dim = 64;
  int64_t n_layers = 2;
  int64_t n_heads = 4;
  int64_t n_kv_heads = 4;  // grouped-query attention when fewer than n_heads
  int64_t ffn_dim = 176;
  int64_t max_seq_len = 64;
  double rope_theta = 10000.0;
  float norm_eps = 1e-5f;
  bool tie_embeddings = false;  // the output projection reuses the embedding table
  // The activations' element type between layers (train.compute_dtype): fp32 or bf16.
  // Parameters, logits and the loss are fp32 either way.
  DType activations = DType::kFloat32;
  ActivationCheckpointing checkpointing = ActivationCheckpointing::kNone;

  // Tensor-parallel ranks sharing each block (model/tensor_parallel.h): each holds
  // 1/tensor_parallel of the heads, key-value heads and feed-forward columns.
  int64_t tensor_parallel = 1;
  // Sequence parallelism (parallel.sequence): between blocks a tensor-parallel rank holds
  // 1/tensor_parallel of a micro-batch's tokens (Activations::local_tokens).
  bool sequence_parallel = false;

  int64_t head_dim() const { return dim / n_heads; }
  // This rank's share under tensor parallelism (the whole model's without it).
  int64_t local_heads() const { return n_heads / tensor_parallel; }
  int64_t local_kv_heads() const { return n_kv_heads / tensor_parallel; }
  int64_t local_ffn_dim() const { return ffn_dim / tensor_parallel; }
  // Rows of the embedding table and the output projection (jobspec::padded_vocabulary).
  int64_t padded_vocab() const { return jobspec::padded_vocabulary(vocab_size); }
  // "dim 64, 2 layers, 4 heads (4 kv), ffn 176, vocab 256" (", bf16 activations", ", full
  // activation checkpointing" when so):
  // for logs and checkpoint metadata.
  std::string describe() const;
  // Every parameter's elements, embedding and its padding included.
  int64_t parameter_count() const;
};

// The model section of a resolved JobSpec (defaults filled by the job loader). Rejects
// sizes the engine cannot build, naming the field, for specs that did not come through
// the loader.
absl::StatusOr<LlamaConfig> llama_config_from_spec(const v1::ModelSpec& model);
// The same, with the activations' type from train.compute_dtype and what blocks keep from
// train.activation_checkpointing.
absl::StatusOr<LlamaConfig> llama_config_from_spec(const v1::ModelSpec& model, const v1::TrainSpec& train);

}  // namespace fp8::engine
