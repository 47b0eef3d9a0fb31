// The shapes a ModelSpec implies: the Llama feed-forward width rule and the list of linear
// layers, under the names that fp8.include / fp8.exclude globs match. The training engine
// names its layers the same way, so a filter means the same thing to the validator and to
// the trainer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fp8/v1/job.pb.h"

namespace fp8::jobspec {

// Byte-level tokens: one per byte value.
inline constexpr int kByteVocabulary = 256;
// Bounds that keep every size computed from a spec well inside 64-bit arithmetic and the
// layer list short enough to check; far above any model this service trains.
inline constexpr int64_t kMaxLayers = 1024;
inline constexpr int64_t kMaxWidth = 1 << 20;  // dim, ffn_dim, vocab_size, max_seq_len
// parallel.tensor's bound.
inline constexpr int64_t kMaxTensorParallel = 64;

// The embedding table and the output projection have a multiple of this many rows, the
// vocabulary padded as Megatron and torchtitan pad it: GEMM shapes stay aligned for the
// tensor cores and shard evenly. The padding rows stay zero and their logits are outside
// the loss.
inline constexpr int64_t kVocabPadMultiple = 64;
inline int64_t padded_vocabulary(int64_t vocab) {
  return (vocab + kVocabPadMultiple - 1) / kVocabPadMultiple * kVocabPadMultiple;
}

// Llama's SwiGLU width: 2/3 of 4*dim, rounded up to a multiple of 16 (Llama rounds to
// 256; 16 keeps small models small and is what fp8 GEMMs need). 64 -> 176, 4096 -> 10928.
int64_t llama_ffn_dim(int64_t dim);

struct LinearLayer {
  std::string name;  // "layers.3.attention.wq", "output"
  std::string role;  // the name without its block: "attention.wq", "output"
  int block = -1;    // the transformer block, -1 for layers outside the blocks
  int64_t in_features = 0;
  int64_t out_features = 0;
};

// Whether `model` has every size ListLinearLayers needs, positive, bounded, and with heads
// dividing evenly (dim by n_heads, n_heads by n_kv_heads).
bool model_shape_is_known(const v1::ModelSpec& model);

// Every linear layer, block by block, then the output projection (its out_features the
// padded vocabulary). Requires
// model_shape_is_known(model); returns an empty list otherwise.
std::vector<LinearLayer> list_linear_layers(const v1::ModelSpec& model);

// parallel.tensor, 1 where it is unset or out of range (validation reports the latter).
int64_t tensor_parallel_ranks(const v1::JobSpec& spec);

// The ranks that each train a batch of their own: world_size / parallel.tensor (at least 1).
// The tensor-parallel ranks among them train one batch together, so a job's tokens are
// rank 0's times this (a spec stored before parallel existed has no tensor: world_size).
int data_parallel_ranks(const v1::JobSpec& spec);

// What one tensor-parallel rank of `tensor` holds of `layer` (job.proto, ParallelSpec):
// wq, wk, wv, w1 and w3 split by output features, wo and w2 by input features, the output
// projection whole. `tensor` must divide the split dimension.
LinearLayer tensor_parallel_share(const LinearLayer& layer, int64_t tensor);

}  // namespace fp8::jobspec
