// What each training step leaves on the device for the host to read later, so that a step
// never waits for it: its micro-batches' losses and its gradients' sum of squares (the
// grad norm, which clipping reads on the device: ModelOps::queue_grad_norm), and under
// FSDP the ranks' stop votes. Up to kCapacity steps are kept; the trainer reads them back
// in one wait when a step reports, checkpoints or the history is full, and checks them for
// divergence then, step by step. Under FSDP the ranks sum each step's values on the
// device first (FsdpModel::reduce_step_values), so every rank reads the same; the trainer
// reads each step's summed votes apart, a step later (Backend::queue_read).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/engine/tensor/device.h"
#include "worker/engine/tensor/tensor.h"

namespace fp8::engine {

class StepStats {
 public:
  static constexpr int64_t kCapacity = 64;

  // `ranks`: how many ranks' losses each step's values sum (1 for one process).
  static absl::StatusOr<StepStats> create(const Device& device, int64_t micro_batches, int64_t ranks = 1);

  // Where step `step` (the next one, in order) writes its values: its micro-batch losses
  // (micro_batches floats) and right after them its stop vote (one float: 1 to stop, left
  // 0 by one process), and its gradients' sum of squares (one double), all device memory;
  // and the clipping factor for AdamW (one float, reused each step). Call only while
  // !full().
  struct Slot {
    float* losses = nullptr;
    float* stop_vote = nullptr;  // losses + micro_batches
    double* sum_of_squares = nullptr;
    float* clip_scale = nullptr;
  };
  Slot begin(int64_t step);
  bool full() const { return static_cast<int64_t>(steps_.size()) == kCapacity; }
  bool empty() const { return steps_.empty(); }

  // The values of the steps begun since the last read, in order (one wait for the device).
  struct StepValues {
    int64_t step = 0;
    double loss = 0;       // mean over the step's micro-batches (and ranks), summed in order in double
    double grad_norm = 0;  // sqrt of the sum of squares
  };
  absl::StatusOr<std::vector<StepValues>> read();

 private:
  StepStats(int64_t micro_batches, int64_t ranks, Tensor values, Tensor clip)
      : micro_batches_(micro_batches), ranks_(ranks), values_(std::move(values)), clip_(std::move(clip)) {}

  int64_t micro_batches_;
  int64_t ranks_;
  // What read() reads in one copy: kCapacity doubles of sums (held as 2 · kCapacity fp32
  // words first, so they are 8-byte aligned: device memory is 256-byte aligned), then the
  // losses and votes, fp32 [kCapacity, micro_batches + 1].
  Tensor values_;
  Tensor clip_;  // fp32 [1]
  std::vector<int64_t> steps_;  // begun since the last read
};

}  // namespace fp8::engine
