// The model's trainable tensors: fp32 master values with their gradients, by name, in a
// fixed order (the order the optimizer, checkpoints and gradient clipping walk them).
//
// Names follow the Llama checkpoint convention and match the linear layer names that
// fp8.include / fp8.exclude globs see (common/jobspec/model_shapes.h):
//   tok_embeddings, layers.3.attention_norm, layers.3.attention.wq, ...,
//   layers.3.ffn_norm, layers.3.feed_forward.w1, ..., norm, output
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fp8/fp8.h"
#include "worker/engine/tensor/tensor.h"

namespace fp8::engine {

// How a parameter starts out (see init_parameters).
enum class ParameterInit : uint8_t {
  kNormal,          // N(0, 0.02²): embeddings and input projections
  kScaledNormal,    // N(0, (0.02 / sqrt(2 · n_layers))²): projections into the residual stream
  kOnes,            // norm gains
};

// Which part of the whole parameter a rank holds under tensor parallelism
// (model/tensor_parallel.h): part `index` of `parts` equal slices along `axis`
// (0: rows, 1: columns); axis -1 is the whole parameter.
struct ParameterSplit {
  int axis = -1;
  int index = 0;
  int parts = 1;
  bool split() const { return axis >= 0 && parts > 1; }
};

struct Parameter {
  std::string name;
  Tensor value;  // fp32 master weights; empty while not allocated (ParameterStorage::kDeferred)
  Tensor grad;   // same shape; accumulates over micro-batches
  ParameterInit init = ParameterInit::kNormal;
  // AdamW's decoupled weight decay applies to matrices, not to norm gains (which decay
  // would pull towards zero rather than towards their neutral value of one).
  bool weight_decay = true;
  TensorShape shape;  // the whole parameter's, allocated or not (this rank's part of it under a split)
  ParameterSplit split;
  // Under sequence parallelism a whole parameter that each tensor-parallel rank applies to
  // its own tokens only (the embedding, the norms' gains): its gradient is this rank's
  // share, which the ranks sum before it is read.
  bool grad_summed_across_tensor_parallel = false;
  // Trailing rows that only pad a matrix (LlamaConfig::padded_vocab): initialised to zero,
  // and nothing gives them a gradient, so they stay zero.
  int64_t padding_rows = 0;
  // Set by ParameterSet::discard_grads(): grad's contents are stale and stand for zero
  // until an op claims it (below).
  bool grad_discarded = false;

  // The store for an op about to produce (part of) this gradient: kOverwrite for the first
  // since discard_grads(), which then writes grad (a GEMM with beta = 0) instead of adding
  // to zeros, kAccumulate otherwise. Either way grad holds a real sum afterwards.
  Store claim_grad();
  // For ops that can only add to grad (an embedding's scatter, a norm's column sums): zeroes
  // a discarded gradient first.
  absl::Status claim_grad_for_adding();
};

// Whether parameters get memory when they are added: kDeferred leaves value and grad
// empty, for FSDP to allocate and initialise each rank's rows alone (fsdp_model.h), so
// that no rank ever holds the whole model.
enum class ParameterStorage : uint8_t { kAllocated, kDeferred };

class ParameterSet {
 public:
  // Adds a parameter and its gradient, zeroed (kAllocated) or without memory (kDeferred);
  // the pointer stays valid as more are added.
  absl::StatusOr<Parameter*> add(const Device& device, std::string name, TensorShape shape, ParameterInit init,
                                 bool weight_decay, ParameterStorage storage = ParameterStorage::kAllocated);

  std::deque<Parameter>& all() { return params_; }
  const std::deque<Parameter>& all() const { return params_; }
  // nullptr when there is none.
  const Parameter* find(std::string_view name) const;
  // Elements of every parameter, allocated or not.
  int64_t element_count() const;

  absl::Status zero_grads();
  // zero_grads(), lazily: every gradient stands for zero until an op claims it
  // (Parameter::claim_grad), so that the step's first producer of each overwrites it and no
  // pass zeroes what it is about to overwrite. define_grads() then zeroes those that nothing
  // claimed; gradients are read (norm, reductions, optimizer) only after it.
  void discard_grads();
  absl::Status define_grads();

 private:
  std::deque<Parameter> params_;
};

// Deterministic initialisation: each parameter draws from its own stream, seeded by
// (seed, its name), so adding a layer or reordering never changes the others, and the
// same seed gives the same bits on every machine that shares the C++ library's math.
// Every parameter must be allocated.
absl::Status init_parameters(ParameterSet& params, uint64_t seed, int64_t n_layers);

// The values init_parameters gives `p` (by its name, shape and init), on the host. A split
// parameter gets its part of the whole one's values, so that tensor-parallel ranks start
// from the model one process starts from.
std::vector<float> initial_values(const Parameter& p, uint64_t seed, int64_t n_layers);

// Threads for drawing initial values: as many as the CPU kernels are given (a rank's share
// of the cores), at most `parameters`.
size_t init_threads(size_t parameters);

}  // namespace fp8::engine
